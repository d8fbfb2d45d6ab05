/* test_perf_run.cc - runs a program with a time bound and collects what it printed
   (shared by the test_perf_* suites, which drive tools as a user would). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "perf_run.h"

#include "base/clock.h"

namespace perf_test
{

RunResult run_cmd(const std::vector<std::string> &argv, int timeout_s)
{
    RunResult res;
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) {
        res.err = "pipe failed";
        return res;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        res.err = "fork failed";
        return res;
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group, so a timeout stops its children too */
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        close(out[0]);
        close(out[1]);
        close(err[0]);
        close(err[1]);
        std::vector<char *> args;
        for (auto &a : argv)
            args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string *dst[2] = {&res.out, &res.err};
    int open_fds = 2;
    double deadline = inc_now_s() + timeout_s;
    while (open_fds > 0) {
        int left_ms = (int)((deadline - inc_now_s()) * 1000);
        if (left_ms <= 0) {
            res.timed_out = true;
            kill(-pid, SIGKILL);
            break;
        }
        if (poll(fds, 2, left_ms < 200 ? left_ms : 200) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t n = read(fds[i].fd, buf, sizeof(buf));
            if (n > 0) {
                dst[i]->append(buf, (size_t)n);
            } else {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (auto &f : fds)
        if (f.fd >= 0)
            close(f.fd);
    int status = 0;
    waitpid(pid, &status, 0);
    res.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return res;
}

std::string failed_run(const RunResult &r)
{
    if (r.timed_out)
        return "timed out\n" + r.out + r.err;
    if (r.status != 0)
        return "exit status " + std::to_string(r.status) + "\n" + r.out + r.err;
    return "";
}

std::string describe(const RunResult &r)
{
    return "exit " + std::to_string(r.status) + (r.timed_out ? " (timed out)" : "") +
           "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

std::vector<std::vector<std::string>> table_rows(const std::string &out)
{
    std::vector<std::vector<std::string>> rows;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::istringstream words(line);
        std::vector<std::string> row;
        std::string w;
        while (words >> w)
            row.push_back(w);
        if (!row.empty())
            rows.push_back(row);
    }
    return rows;
}

} // namespace perf_test
