/* harness.cc - see harness.h.  The processes are started by tools/launch.c, the
   same code the tools' embedded runs use. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <sstream>
#include "launch.h"

/* Present in sanitizer builds: lets a forked rank check for leaks before _exit(). */
extern "C" void __lsan_do_leak_check(void) __attribute__((weak));

namespace harness
{

/* INCMOE_TEST_SWITCH_WRAPPER runs the switch under a tool, e.g. valgrind. */
static std::vector<std::string> switch_wrapper()
{
    std::vector<std::string> words;
    const char *wrap = getenv("INCMOE_TEST_SWITCH_WRAPPER");
    std::istringstream in(wrap != nullptr ? wrap : "");
    std::string w;
    while (in >> w)
        words.push_back(w);
    return words;
}

static std::vector<const char *> c_list(const std::vector<std::string> &v)
{
    std::vector<const char *> out;
    for (auto &s : v)
        out.push_back(s.c_str());
    out.push_back(nullptr);
    return out;
}

bool switch_start(SwitchProc *sw, const std::vector<std::string> &extra_args,
                  const std::string &log_path)
{
    std::vector<std::string> wrapper = switch_wrapper();
    /* A shell in front redirects stderr and execs the rest: sh -c SCRIPT $0 $@... */
    if (!log_path.empty())
        wrapper.insert(wrapper.begin(), {"sh", "-c", "exec \"$@\" 2>>\"$0\"", log_path});
    std::vector<const char *> wrap = c_list(wrapper), extra = c_list(extra_args);
    /* INCMOE_SWITCHD: a suite run away from its build tree (tools/gpu-check's
       bundle) names the switch it carries. */
    const char *env = getenv("INCMOE_SWITCHD");
    const char *path = env != nullptr && *env != '\0' ? env : SWITCHD_PATH;
    inc_launch_switch_t proc;
    if (inc_launch_switch_start(wrap.data(), path, extra.data(), 60, &proc) != 0)
        return false;
    sw->pid = proc.pid;
    sw->addr = proc.addr;
    return true;
}

int switch_stop(SwitchProc *sw)
{
    inc_launch_switch_t proc = {sw->pid, ""};
    sw->pid = -1;
    return inc_launch_switch_stop(&proc, 10);
}

/* What every rank process needs: the body and the file its message goes to. */
struct RankJob {
    const std::function<std::string(int rank)> *body;
    std::vector<FILE *> out;
};

static int rank_main(int rank, int, const char *, void *arg)
{
    RankJob *job = static_cast<RankJob *>(arg);
    std::string err;
    try {
        err = (*job->body)(rank);
    } catch (const std::exception &e) {
        err = std::string("exception: ") + e.what();
    }
    if (!err.empty()) {
        ssize_t w = write(fileno(job->out[rank]), err.data(), err.size());
        (void)w;
    }
    if (__lsan_do_leak_check != nullptr)
        __lsan_do_leak_check(); /* exits non-zero on a leak */
    return err.empty() ? 0 : 1;
}

static std::string read_all(FILE *f)
{
    std::string s;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fileno(f), buf, sizeof(buf), off)) > 0) {
        s.append(buf, (size_t)n);
        off += n;
    }
    return s;
}

/* A rank's message, with how it ended when that says more. */
static std::string describe(FILE *f, const inc_launch_rank_t &end, const inc_launch_result_t &res,
                            int timeout_s)
{
    std::string msg = read_all(f);
    if (end.status == -1)
        return "fork failed";
    if (end.stopped && res.timed_out)
        return msg + " (timed out after " + std::to_string(timeout_s) + " s)";
    if (end.stopped)
        return msg + " (stopped: another rank could not be started)";
    if (WIFSIGNALED(end.status))
        return msg + " (killed by signal " + std::to_string(WTERMSIG(end.status)) + ")";
    if (WEXITSTATUS(end.status) != 0 && msg.empty())
        return "exit status " + std::to_string(WEXITSTATUS(end.status));
    return msg;
}

std::vector<std::string> run_ranks(int nranks, const std::function<std::string(int rank)> &body,
                                   int timeout_s, std::vector<double> *ended_s)
{
    RankJob job{&body, {}};
    std::vector<std::string> out(nranks);
    for (int r = 0; r < nranks; r++) {
        FILE *f = tmpfile();
        if (f == nullptr) {
            for (FILE *g : job.out)
                fclose(g);
            for (auto &s : out)
                s = "cannot create the file for the ranks' messages";
            return out;
        }
        job.out.push_back(f);
    }
    inc_launch_params_t p = {};
    p.nranks = nranks;
    p.fn = rank_main;
    p.arg = &job;
    p.timeout_s = timeout_s;
    p.keep_going = 1; /* suites check how the survivors see a rank that died */
    std::vector<inc_launch_rank_t> ends(nranks);
    inc_launch_result_t res;
    inc_launch_ranks(&p, nullptr, ends.data(), &res);
    if (ended_s != nullptr)
        for (auto &e : ends)
            ended_s->push_back(e.ended_s);
    for (int r = 0; r < nranks; r++) {
        out[r] = describe(job.out[r], ends[r], res, timeout_s);
        fclose(job.out[r]);
    }
    return out;
}

std::string failures(const std::vector<std::string> &results)
{
    std::string msg;
    for (size_t r = 0; r < results.size(); r++)
        if (!results[r].empty())
            msg += "rank " + std::to_string(r) + ": " + results[r] + "\n";
    return msg;
}

unsigned long long unique_job_id()
{
    static std::atomic<unsigned> counter{0};
    return ((unsigned long long)getpid() << 20) ^ (unsigned long long)time(nullptr) << 40 ^
           (counter++ + 1);
}

} // namespace harness
