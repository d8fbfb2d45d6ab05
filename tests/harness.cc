/* harness.cc - see harness.h. */
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include "base/clock.h"

/* Present in sanitizer builds: lets a forked rank check for leaks before _exit(). */
extern "C" void __lsan_do_leak_check(void) __attribute__((weak));

namespace harness
{

bool switch_start(SwitchProc *sw, const std::vector<std::string> &extra_args)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its timeout takes its switch along */
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        /* INCMOE_TEST_SWITCH_WRAPPER runs the switch under a tool, e.g. valgrind. */
        std::vector<std::string> words;
        if (const char *wrap = getenv("INCMOE_TEST_SWITCH_WRAPPER")) {
            std::string w(wrap), cur;
            for (char ch : w + " ") {
                if (ch == ' ') {
                    if (!cur.empty())
                        words.push_back(cur);
                    cur.clear();
                } else {
                    cur += ch;
                }
            }
        }
        std::vector<const char *> argv;
        for (auto &w : words)
            argv.push_back(w.c_str());
        argv.insert(argv.end(), {SWITCHD_PATH, "--listen", "127.0.0.1:0"});
        for (auto &a : extra_args)
            argv.push_back(a.c_str());
        argv.push_back(nullptr);
        execvp(argv[0], const_cast<char *const *>(argv.data()));
        _exit(127);
    }
    close(fds[1]);
    /* The daemon's first stdout line is "listening on HOST:PORT". */
    std::string line;
    double deadline = inc_now_s() + 60;
    while (inc_now_s() < deadline && line.find('\n') == std::string::npos) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        char buf[256];
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n <= 0)
            break;
        line.append(buf, n);
    }
    close(fds[0]);
    size_t at = line.find("listening on ");
    if (at == std::string::npos) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        return false;
    }
    std::string rest = line.substr(at + 13);
    sw->addr = rest.substr(0, rest.find_first_of(" \n"));
    sw->pid = pid;
    return true;
}

int switch_stop(SwitchProc *sw)
{
    if (sw->pid <= 0)
        return -1;
    kill(sw->pid, SIGTERM);
    int status = 0;
    double deadline = inc_now_s() + 10;
    while (waitpid(sw->pid, &status, WNOHANG) == 0) {
        if (inc_now_s() > deadline) {
            kill(sw->pid, SIGKILL);
            waitpid(sw->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    sw->pid = -1;
    return status;
}

std::vector<std::string> run_ranks(int nranks, const std::function<std::string(int rank)> &body,
                                   int timeout_s)
{
    std::vector<pid_t> pids(nranks, -1);
    std::vector<int> fds(nranks, -1);
    std::vector<std::string> out(nranks);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks; r++) {
        int p[2];
        if (pipe(p) != 0) {
            out[r] = "pipe failed";
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            std::string err;
            try {
                err = body(r);
            } catch (const std::exception &e) {
                err = std::string("exception: ") + e.what();
            }
            if (!err.empty()) {
                ssize_t w = write(p[1], err.data(), err.size());
                (void)w;
            }
            close(p[1]);
            if (__lsan_do_leak_check != nullptr)
                __lsan_do_leak_check(); /* exits non-zero on a leak */
            _exit(err.empty() ? 0 : 1);
        }
        close(p[1]);
        pids[r] = pid;
        fds[r] = p[0];
        fcntl(fds[r], F_SETFL, O_NONBLOCK);
    }
    double deadline = inc_now_s() + timeout_s;
    int left = nranks;
    std::vector<bool> done(nranks, false);
    while (left > 0) {
        for (int r = 0; r < nranks; r++) {
            if (done[r] || pids[r] < 0) {
                if (!done[r]) {
                    done[r] = true;
                    left--;
                }
                continue;
            }
            char buf[4096];
            ssize_t n;
            while ((n = read(fds[r], buf, sizeof(buf))) > 0)
                out[r].append(buf, n);
            int status;
            if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
                while ((n = read(fds[r], buf, sizeof(buf))) > 0)
                    out[r].append(buf, n);
                if (WIFSIGNALED(status))
                    out[r] += " (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
                else if (WEXITSTATUS(status) != 0 && out[r].empty())
                    out[r] = "exit status " + std::to_string(WEXITSTATUS(status));
                close(fds[r]);
                done[r] = true;
                left--;
            }
        }
        if (left == 0)
            break;
        if (inc_now_s() > deadline) {
            for (int r = 0; r < nranks; r++) {
                if (!done[r]) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], nullptr, 0);
                    close(fds[r]);
                    out[r] += " (timed out after " + std::to_string(timeout_s) + " s)";
                    done[r] = true;
                }
            }
            break;
        }
        usleep(2000);
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
