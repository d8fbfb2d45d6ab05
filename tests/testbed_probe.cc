/*
 * testbed_probe.cc - see testbed_probe.h.
 */
#include "testbed_probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include "perf_run.h"

namespace testbed_probe
{
using perf_test::run_cmd;
using perf_test::RunResult;

bool exists(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

std::string cannot_run_testbed()
{
    if (geteuid() != 0)
        return "needs root: network namespaces, veth and tc need CAP_NET_ADMIN";
    RunResult r = run_cmd({"unshare", "--net", "sh", "-c",
                           "ip link add name pa type veth peer name pb && "
                           "tc qdisc add dev pa root tbf rate 10mbit burst 40000 latency 10ms && "
                           "ip link add name pbr type bridge"},
                          20);
    if (r.status != 0)
        return "ip/tc cannot build a shaped veth and a bridge in a network namespace here: " +
               r.err;
    return "";
}

int free_testbed_id(int first)
{
    for (int k = 0, id = first + getpid() % 10; k < 10; k++, id = first + (id - first + 1) % 10)
        if (!exists("/run/incmoe-testbed/imt" + std::to_string(id) + ".state"))
            return id;
    return -1;
}

std::vector<std::string> namespaces_with(const std::string &prefix)
{
    std::vector<std::string> found;
    RunResult r = run_cmd({"ip", "netns", "list"}, 20);
    size_t at = 0;
    while ((at = r.out.find(prefix, at)) != std::string::npos) {
        if (at == 0 || r.out[at - 1] == '\n')
            found.push_back(r.out.substr(at, r.out.find_first_of(" \n", at) - at));
        at++;
    }
    return found;
}
} // namespace testbed_probe
