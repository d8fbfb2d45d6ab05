/* launch.c - see launch.h. */
#include "launch.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

/* After a rank fails, the others get this long to end by themselves (they are
   usually failing too and may still be saying why) before they are stopped. */
#define FAIL_GRACE_S 1.0
/* A stopped rank that ignores SIGTERM gets SIGKILL this much later. */
#define TERM_GRACE_S 2.0
/* How often the parent looks at its children while it waits. */
#define POLL_US 5000

/* In a child: die with the parent, even when the parent died before prctl. */
static void die_with_parent(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
}

static void exec_switch(const char *const *wrapper, const char *path, const char *const *extra_args,
                        int out_fd)
{
    size_t n = 0, nw = 0, nx = 0;
    while (wrapper != NULL && wrapper[nw] != NULL)
        nw++;
    while (extra_args != NULL && extra_args[nx] != NULL)
        nx++;
    const char **argv = calloc(nw + nx + 4, sizeof(*argv));
    if (argv == NULL)
        _exit(127);
    for (size_t i = 0; i < nw; i++)
        argv[n++] = wrapper[i];
    argv[n++] = path;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    for (size_t i = 0; i < nx; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    dup2(out_fd, STDOUT_FILENO);
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Reads fd until a whole line arrived, it closed, or the deadline passed. */
static void read_first_line(int fd, double timeout_s, char *line, size_t len)
{
    size_t have = 0;
    double deadline = inc_now_s() + timeout_s;
    line[0] = '\0';
    while (have < len - 1 && strchr(line, '\n') == NULL && inc_now_s() < deadline) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t k = read(fd, line + have, len - 1 - have);
        if (k <= 0)
            break;
        have += (size_t)k;
        line[have] = '\0';
    }
}

int inc_launch_switch_start(const char *const *wrapper, const char *path,
                            const char *const *extra_args, double timeout_s,
                            inc_launch_switch_t *sw)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        die_with_parent(parent);
        close(fds[0]);
        exec_switch(wrapper, path, extra_args, fds[1]);
    }
    close(fds[1]);
    char line[256];
    read_first_line(fds[0], timeout_s, line, sizeof(line));
    close(fds[0]);
    const char *at = strstr(line, "listening on ");
    if (at == NULL) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    snprintf(sw->addr, sizeof(sw->addr), "%s", at + strlen("listening on "));
    sw->addr[strcspn(sw->addr, " \n")] = '\0';
    sw->pid = pid;
    return 0;
}

int inc_launch_switch_stop(inc_launch_switch_t *sw, double grace_s)
{
    if (sw->pid <= 0)
        return -1;
    kill(sw->pid, SIGTERM);
    int status = -1;
    double deadline = inc_now_s() + grace_s;
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

/* The parent's view of one job while it runs. */
typedef struct {
    const inc_launch_params_t *p;
    pid_t *pids; /* -1: not running */
    inc_launch_rank_t *ranks;
    int running;
    double stop_at, kill_at; /* 0: not scheduled */
} job_t;

static int fork_ranks(job_t *j, inc_launch_result_t *res)
{
    const inc_launch_params_t *p = j->p;
    pid_t parent = getpid();
    fflush(NULL); /* a child must not print what the parent had buffered */
    for (int r = 0; r < p->nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            if (p->prog != NULL)
                fprintf(stderr, "%s: fork for rank %d: %s\n", p->prog, r, strerror(errno));
            return -1;
        }
        if (pid == 0) {
            die_with_parent(parent);
            int rc = p->fn(r, p->nranks, p->switch_addr, p->arg);
            fflush(NULL);
            _exit(rc);
        }
        j->pids[r] = pid;
        j->running++;
        res->started++;
    }
    return 0;
}

static void signal_running(job_t *j, int sig)
{
    for (int r = 0; r < j->p->nranks; r++)
        if (j->pids[r] > 0) {
            kill(j->pids[r], sig);
            j->ranks[r].stopped = 1;
        }
}

/* Stops every rank still running: SIGTERM now, SIGKILL after TERM_GRACE_S. */
static void stop_running(job_t *j)
{
    signal_running(j, SIGTERM);
    j->stop_at = 0;
    if (j->kill_at == 0)
        j->kill_at = inc_now_s() + TERM_GRACE_S;
}

static void on_rank_end(job_t *j, int r, int status, inc_launch_result_t *res)
{
    const inc_launch_params_t *p = j->p;
    j->pids[r] = -1;
    j->running--;
    j->ranks[r].status = status;
    j->ranks[r].ended_s = inc_now_s();
    if (j->ranks[r].stopped || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        return;
    if (WIFSIGNALED(status) && p->prog != NULL)
        fprintf(stderr, "%s: rank %d killed by signal %d\n", p->prog, r, WTERMSIG(status));
    if (res->failed_rank >= 0)
        return;
    res->failed_rank = r;
    if (!p->keep_going && j->running > 0 && j->stop_at == 0)
        j->stop_at = inc_now_s() + FAIL_GRACE_S;
}

static void reap(job_t *j, inc_launch_switch_t *sw, inc_launch_result_t *res)
{
    for (int r = 0; r < j->p->nranks; r++) {
        int status;
        if (j->pids[r] > 0 && waitpid(j->pids[r], &status, WNOHANG) == j->pids[r])
            on_rank_end(j, r, status, res);
    }
    if (sw != NULL && sw->pid > 0 && waitpid(sw->pid, NULL, WNOHANG) == sw->pid) {
        if (j->p->prog != NULL)
            fprintf(stderr, "%s: incmoe-switchd exited while the ranks ran\n", j->p->prog);
        sw->pid = -1;
        res->switch_exited = 1;
    }
}

static void wait_ranks(job_t *j, inc_launch_switch_t *sw, inc_launch_result_t *res)
{
    const inc_launch_params_t *p = j->p;
    double deadline = p->timeout_s > 0 ? inc_now_s() + p->timeout_s : 0;
    while (j->running > 0) {
        reap(j, sw, res);
        if (j->running == 0)
            break;
        double now = inc_now_s();
        if (deadline > 0 && now > deadline && !res->timed_out) {
            res->timed_out = 1;
            if (p->prog != NULL)
                fprintf(stderr, "%s: ranks still running after %g s: stopping them\n", p->prog,
                        p->timeout_s);
            stop_running(j);
        }
        if (j->stop_at > 0 && now > j->stop_at) {
            if (p->prog != NULL)
                fprintf(stderr, "%s: rank %d failed: stopping the ranks still running\n", p->prog,
                        res->failed_rank);
            stop_running(j);
        }
        if (j->kill_at > 0 && now > j->kill_at)
            signal_running(j, SIGKILL);
        usleep(POLL_US);
    }
}

int inc_launch_ranks(const inc_launch_params_t *p, inc_launch_switch_t *sw,
                     inc_launch_rank_t *ranks, inc_launch_result_t *res)
{
    job_t j = {.p = p};
    inc_launch_rank_t *own = NULL;
    *res = (inc_launch_result_t){.failed_rank = -1};
    j.pids = malloc(sizeof(pid_t) * (size_t)p->nranks);
    if (ranks == NULL)
        ranks = own = malloc(sizeof(*ranks) * (size_t)p->nranks);
    if (j.pids == NULL || ranks == NULL) {
        free(j.pids);
        free(own);
        return -1;
    }
    j.ranks = ranks;
    for (int r = 0; r < p->nranks; r++) {
        j.pids[r] = -1;
        ranks[r] = (inc_launch_rank_t){.status = -1, .stopped = 0, .ended_s = 0};
    }
    if (fork_ranks(&j, res) != 0)
        stop_running(&j);
    wait_ranks(&j, sw, res);
    int ok = res->started == p->nranks;
    for (int r = 0; r < p->nranks; r++)
        ok = ok && WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0;
    free(j.pids);
    free(own);
    return ok ? 0 : -1;
}
