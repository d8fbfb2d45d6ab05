/* errors_common.cc - see errors_common.h. */
#include "errors_common.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
#include "switch/throttle.h"
}

namespace errtest
{

std::string status_text(incmoe_status_t st)
{
    return incmoe_strerror(st);
}

incmoe_status_t create(const std::string &addr, unsigned long long job, int rank, int n,
                       incmoe_comm_t **comm, int timeout_ms, const char *secret, incmoe_algo_t algo)
{
    harness::CommOptions opt;
    opt.algo = algo;
    opt.timeout_ms = timeout_ms;
    opt.secret = secret;
    return harness::comm_create(addr, job, rank, n, comm, opt);
}

std::vector<std::string>
run_job(const std::string &addr, unsigned long long job, int n,
        const std::function<std::string(incmoe_comm_t *comm, int rank)> &body, int timeout_s,
        int timeout_ms, incmoe_algo_t algo)
{
    return harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, rank, n, &comm, timeout_ms, nullptr, algo);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            return body(comm, rank);
        },
        timeout_s);
}

std::string destroy_expecting(incmoe_comm_t *comm, incmoe_status_t st, incmoe_status_t want,
                              const std::string &what)
{
    std::string text = comm_text(comm);
    incmoe_comm_destroy(comm);
    if (st != want)
        return "got " + status_text(st) + " (" + text + "), want " + status_text(want);
    if (text.find(what) == std::string::npos)
        return "reason '" + text + "' does not mention '" + what + "'";
    return "";
}

/* A small AllGather on a fresh job proves the switch still serves. */
void expect_switch_serves(const std::string &addr, int n)
{
    unsigned long long job = harness::unique_job_id();
    auto res = run_job(
        addr, job, n,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = INCMOE_OK;
            std::vector<int> send(16, rank), recv(16 * n, -1);
            incmoe_mr_t *ms, *mr;
            incmoe_mem_register(comm, send.data(), 64, &ms);
            incmoe_mem_register(comm, recv.data(), 64 * n, &mr);
            incmoe_layout_t l = {64, 0, 64, nullptr};
            incmoe_req_t req;
            st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            incmoe_comm_destroy(comm); /* before send and recv go: after a failure they are its */
            for (int b = 0; b < n && st == INCMOE_OK; b++)
                if (recv[16 * b] != b)
                    return "wrong data after an earlier bad job";
            return st == INCMOE_OK ? "" : "allgather: " + status_text(st);
        },
        60);
    EXPECT_EQ(harness::failures(res), "") << "the switch stopped serving";
}

/* Restarts the fixture's switch logging at debug level to a file of the test's, so a test can
   see joins happen; returns the file. */
std::string restart_logged(harness::SwitchProc *sw)
{
    harness::switch_stop(sw);
    std::string log = "/tmp/incmoe-switch-log-" + std::to_string(harness::unique_job_id());
    if (!harness::switch_start(sw, {"--timeout-ms", "1000", "--log-level", "debug"}, log))
        return "";
    return log;
}

/* Waits (at most 10 s) until the switch logged the join of rank to job. */
bool switch_saw_join(const std::string &log, unsigned long long job, int rank)
{
    std::string line = "job " + std::to_string(job) + ": rank " + std::to_string(rank) + " joined";
    for (double end = inc_now_s() + 10; inc_now_s() < end; usleep(10000)) {
        FILE *f = fopen(log.c_str(), "r");
        if (f == nullptr)
            return false;
        char buf[512];
        bool seen = false;
        while (!seen && fgets(buf, sizeof(buf), f) != nullptr)
            seen = strstr(buf, line.c_str()) != nullptr;
        fclose(f);
        if (seen)
            return true;
    }
    return false;
}

std::string raw_rank_misbehaves(const std::string &addr, uint64_t job,
                                const std::function<void(RawClient &, uint64_t job)> &misbehave)
{
    RawClient c;
    if (!c.connect(addr))
        return "connect";
    c.join(job, 1, 2);
    if (!c.wait_for(WIRE_MSG_JOIN_ACK, nullptr, 5000))
        return "no JOIN_ACK";
    c.progress(300); /* let rank 0 finish joining and post */
    misbehave(c, job);
    RawMsg m;
    if (!c.wait_for(WIRE_MSG_ERROR, &m, 5000))
        return "the misbehaving rank got no ERROR";
    return "";
}

/* A raw rank 1 next to a real rank 0: whatever the raw one sends wrong, rank 0 hears why.
   Rank 0 posts an AllGather of two blocks of `block` bytes: small (SMALL) at the default,
   in chunks (POST/DATA) from 65544 bytes. */
void expect_raw_breaks_job(const std::string &addr, incmoe_status_t want, const std::string &what,
                           const std::function<void(RawClient &, uint64_t job)> &misbehave,
                           size_t block)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            if (rank == 1)
                return raw_rank_misbehaves(addr, job, misbehave);
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, 0, 2, &comm, 5000);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            static float buf[1 << 16];
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            incmoe_layout_t l = {block, 0, block, nullptr};
            incmoe_req_t req;
            st = incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            return destroy_expecting(comm, st, want, what);
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
}

inc_wire_hdr raw_hdr(inc_wire_msg_t msg, uint64_t job, incmoe_stream_t stream)
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, msg, job);
    h.rank = 1;
    h.stream = (uint8_t)stream;
    h.epoch = 1;
    return h;
}

/* Runs fn with this process's stderr going to a fresh file, which stays where any child started
   meanwhile writes; returns the file's path. */
std::string with_stderr_to_file(const std::function<void()> &fn)
{
    char path[] = "/tmp/incmoe-stderr-XXXXXX";
    int fd = mkstemp(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return path;
}

std::string file_text(const std::string &path)
{
    std::string s;
    FILE *f = fopen(path.c_str(), "r");
    char buf[4096];
    size_t n;
    while (f != nullptr && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        s.append(buf, n);
    if (f != nullptr)
        fclose(f);
    return s;
}

incmoe_status_t create_logged(const std::string &addr, incmoe_comm_t **comm, std::string *log)
{
    incmoe_status_t st = INCMOE_OK;
    std::string path =
        with_stderr_to_file([&] { st = create(addr, harness::unique_job_id(), 0, 1, comm, 3000); });
    *log = file_text(path);
    unlink(path.c_str());
    if (st == INCMOE_OK)
        incmoe_comm_destroy(*comm);
    return st;
}

} // namespace errtest
