/*
 * launch.h - a job on this host: incmoe-switchd on loopback and N forked rank
 * processes.  Shared by the tools' embedded runs and the test harness.
 *
 * Every process started here gets SIGKILL when the thread that started it
 * ends (PR_SET_PDEATHSIG), so nothing outlives a tool or a test killed by its
 * timeout; start a job from a thread that outlives it (the tools' and the
 * tests' main thread).
 */
#ifndef INCMOE_TOOLS_LAUNCH_H
#define INCMOE_TOOLS_LAUNCH_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    pid_t pid;     /* -1: not running */
    char addr[64]; /* HOST:PORT it listens on */
} inc_launch_switch_t;

/*
 * Runs [wrapper...] path --listen 127.0.0.1:0 [extra_args...] and waits at
 * most timeout_s for its first stdout line, "... listening on HOST:PORT".
 * wrapper (a tool such as valgrind, found on PATH) and extra_args are
 * NULL-terminated lists; either may be NULL.  Returns 0 with sw filled, or -1
 * with the child reaped when it did not come up.
 */
int inc_launch_switch_start(const char *const *wrapper, const char *path,
                            const char *const *extra_args, double timeout_s,
                            inc_launch_switch_t *sw);

/* SIGTERM, then SIGKILL after grace_s; reaps it.  Returns its wait status, or
   -1 when none was running. */
int inc_launch_switch_stop(inc_launch_switch_t *sw, double grace_s);

/* The body of rank `rank`; its return value is the process's exit code. */
typedef int (*inc_launch_rank_fn_t)(int rank, int nranks, const char *switch_addr, void *arg);

typedef struct {
    int nranks;
    inc_launch_rank_fn_t fn;
    void *arg;
    const char *switch_addr; /* handed to fn */
    double timeout_s;        /* ranks still running then are stopped; <= 0: no deadline */
    /*
     * 0: the first rank to fail stops the others (they would wait for it
     * forever); 1: the others run on, as a test of failure detection needs.
     */
    int keep_going;
    /* Program name for the reports on stderr (a rank's signal, the deadline,
       the ranks stopped, the switch's exit); NULL: silent. */
    const char *prog;
} inc_launch_params_t;

typedef struct {
    int status;  /* wait status; -1: never started (fork failed) */
    int stopped; /* the launcher signalled it: deadline, fork failure or another rank's failure */
    double ended_s; /* inc_now_s() when it was reaped, a few ms after it ended; 0: never */
} inc_launch_rank_t;

typedef struct {
    int failed_rank;   /* the first rank to exit non-zero or die by itself; -1: none */
    int timed_out;     /* the deadline passed with ranks running */
    int started;       /* ranks forked; below nranks when fork failed */
    int switch_exited; /* the watched switch ended while the ranks ran */
} inc_launch_result_t;

/*
 * Forks p->nranks children running p->fn and waits for all of them.  sw (may
 * be NULL) is watched: its exit while the ranks run is reported and sw->pid
 * becomes -1.  ranks (p->nranks entries, may be NULL) gets each rank's end.
 * Returns 0 when every rank exited 0, else -1.
 */
int inc_launch_ranks(const inc_launch_params_t *p, inc_launch_switch_t *sw,
                     inc_launch_rank_t *ranks, inc_launch_result_t *res);

#ifdef __cplusplus
}
#endif

#endif
