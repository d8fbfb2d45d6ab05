/* harness.cc - see harness.h.  The processes are started by tools/launch.c, the
   same code the tools' embedded runs use. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <sstream>

#include "launch.h"

#include "base/clock.h"

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

/* How many ExpectErrors live (only the parent reads it, after the ranks ended). */
static int errors_expected = 0;

ExpectErrors::ExpectErrors(const char *why)
{
    (void)why; /* the reason is for the reader of the test */
    errors_expected++;
}

ExpectErrors::~ExpectErrors()
{
    errors_expected--;
}

/* "[SEC.USEC] IDENT error ": the level is the word after the identity. */
static bool is_error_line(const std::string &line)
{
    if (line.size() < 2 || line[0] != '[')
        return false;
    size_t close = line.find("] ");
    if (close == std::string::npos)
        return false;
    size_t level = line.find(' ', close + 2);
    return level != std::string::npos && line.compare(level, 7, " error ") == 0;
}

std::vector<std::string> error_lines(const std::string &text)
{
    std::vector<std::string> lines;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (is_error_line(line))
            lines.push_back(line);
    return lines;
}

/* What every rank process needs: the body, the file its message goes to and the file that
   takes its stderr. */
struct RankJob {
    const std::function<std::string(int rank)> *body;
    std::vector<FILE *> out, err;
};

static int rank_main(int rank, int, const char *, void *arg)
{
    RankJob *job = static_cast<RankJob *>(arg);
    fflush(stderr);
    dup2(fileno(job->err[rank]), STDERR_FILENO); /* the parent reads it once the rank ended */
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
    fflush(stderr);
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

/* The rank's stderr, passed on to the test's; a rank that succeeded but printed error lines
   fails with them unless errors are expected. */
static std::string quiet_check(FILE *err, const std::string &result)
{
    std::string text = read_all(err);
    fwrite(text.data(), 1, text.size(), stderr);
    if (!result.empty() || errors_expected > 0)
        return result;
    std::vector<std::string> lines = error_lines(text);
    if (lines.empty())
        return result;
    std::string msg = "a run that succeeded printed " + std::to_string(lines.size()) +
                      " incmoe error line(s) (harness::ExpectErrors if the test wants them):";
    for (const std::string &l : lines)
        msg += "\n  " + l;
    return msg;
}

static void close_all(RankJob *job)
{
    for (FILE *f : job->out)
        fclose(f);
    for (FILE *f : job->err)
        fclose(f);
}

std::vector<std::string> run_ranks(int nranks, const std::function<std::string(int rank)> &body,
                                   int timeout_s, std::vector<double> *ended_s)
{
    RankJob job{&body, {}, {}};
    std::vector<std::string> out(nranks);
    for (int r = 0; r < nranks; r++) {
        FILE *f = tmpfile(), *e = tmpfile();
        if (f != nullptr)
            job.out.push_back(f);
        if (e != nullptr)
            job.err.push_back(e);
        if (f == nullptr || e == nullptr) {
            close_all(&job);
            for (auto &s : out)
                s = "cannot create the files for the ranks' messages";
            return out;
        }
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
    for (int r = 0; r < nranks; r++)
        out[r] = quiet_check(job.err[r], describe(job.out[r], ends[r], res, timeout_s));
    close_all(&job);
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

incmoe_status_t comm_create(const std::string &addr, unsigned long long job, int rank, int nranks,
                            incmoe_comm_t **comm, const CommOptions &opt)
{
    incmoe_comm_params_t p = {};
    p.field_mask = INCMOE_COMM_PARAM_ALGO;
    p.algo = opt.algo;
    p.switch_addr = addr.c_str();
    p.job_id = job;
    p.rank = rank;
    p.nranks = nranks;
    if (opt.timeout_ms > 0) {
        p.field_mask |= INCMOE_COMM_PARAM_TIMEOUT;
        p.timeout_ms = opt.timeout_ms;
    }
    if (opt.secret != nullptr) {
        p.field_mask |= INCMOE_COMM_PARAM_SECRET;
        p.secret = opt.secret;
        p.secret_len = strlen(opt.secret);
    }
    return incmoe_comm_create(&p, comm);
}

std::string with_comm(const std::string &addr, unsigned long long job, int rank, int nranks,
                      const CommOptions &opt,
                      const std::function<std::string(incmoe_comm_t *comm)> &body,
                      bool body_destroys)
{
    incmoe_comm_t *comm;
    incmoe_status_t st = comm_create(addr, job, rank, nranks, &comm, opt);
    if (st != INCMOE_OK)
        return std::string("comm_create: ") + incmoe_strerror(st);
    std::string err = body(comm);
    if (body_destroys)
        return err;
    st = incmoe_comm_destroy(comm);
    if (err.empty() && st != INCMOE_OK)
        err = std::string("comm_destroy: ") + incmoe_strerror(st);
    return err;
}

std::string comm_text(incmoe_comm_t *comm)
{
    char text[512] = "";
    incmoe_comm_error(comm, text, sizeof(text));
    return text;
}

std::string why(incmoe_comm_t *comm, incmoe_status_t st, const std::string &what)
{
    return what + ": " + incmoe_strerror(st) + " " + comm_text(comm);
}

incmoe_status_t barrier_wait(incmoe_comm_t *comm)
{
    incmoe_req_t req;
    incmoe_status_t st = incmoe_barrier(comm, &req);
    return st == INCMOE_OK ? incmoe_wait(comm, &req) : st;
}

std::vector<std::shared_ptr<void>> &registered()
{
    static std::vector<std::shared_ptr<void>> store;
    return store;
}

incmoe_status_t destroy_then_free(incmoe_comm_t *comm)
{
    incmoe_status_t st = incmoe_comm_destroy(comm);
    registered().clear();
    return st;
}

int load(const int *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

void store(int *p, int v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

int bump(int *p)
{
    return __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL);
}

bool await_at_least(const int *p, int want, double timeout_s)
{
    double deadline = inc_now_s() + timeout_s;
    while (load(p) < want) {
        if (inc_now_s() > deadline)
            return false;
        usleep(1000);
    }
    return true;
}

unsigned long long unique_job_id()
{
    static std::atomic<unsigned> counter{0};
    return ((unsigned long long)getpid() << 20) ^ (unsigned long long)time(nullptr) << 40 ^
           (counter++ + 1);
}

} // namespace harness
