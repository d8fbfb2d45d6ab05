/*
 * harness.h - multi-process test scaffolding: a real incmoe-switchd on
 * loopback and N forked rank processes.  A rank's body returns "" on success
 * or a description of what went wrong; the parent collects them.  What every
 * suite's ranks share is here too: a communicator on the switch, the status
 * checks (CHECK_OK, why), the buffers a rank registers, and a board in shared
 * memory on which ranks post events for each other.
 *
 * A correct run is a quiet run: a rank whose body succeeded but which printed
 * an incmoe `error` log line fails with those lines, unless the test declared
 * that errors are expected (ExpectErrors).
 */
#ifndef INCMOE_TEST_HARNESS_H
#define INCMOE_TEST_HARNESS_H

#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "incmoe/incmoe.h"

namespace harness
{

struct SwitchProc {
    pid_t pid = -1;
    std::string addr; /* "127.0.0.1:PORT" */
};

/* Starts SWITCHD_PATH --listen 127.0.0.1:0 plus extra args and waits until it listens.
   log_path: the switch's stderr (its log) is appended to that file instead of the test's. */
bool switch_start(SwitchProc *sw, const std::vector<std::string> &extra_args = {},
                  const std::string &log_path = "");
/* SIGTERM, then SIGKILL after a grace period; returns the exit status (or -1). */
int switch_stop(SwitchProc *sw);

/* Runs body(rank) in nranks forked processes; kills them all after timeout_s.
   Returns one string per rank: "" when the rank succeeded.  ended_s (if given)
   gets, per rank, inc_now_s() a few ms after its process ended. */
std::vector<std::string> run_ranks(int nranks, const std::function<std::string(int rank)> &body,
                                   int timeout_s = 120, std::vector<double> *ended_s = nullptr);

/* While one lives, run_ranks takes the ranks' incmoe error lines as expected: a test of failures
   declares it, with why, before it runs its ranks ("rank 2 is killed"). */
class ExpectErrors
{
  public:
    explicit ExpectErrors(const char *why);
    ~ExpectErrors();
    ExpectErrors(const ExpectErrors &) = delete;
    ExpectErrors &operator=(const ExpectErrors &) = delete;
};

/* The incmoe error log lines in text (base/log.c's "[SEC.USEC] IDENT error ..."). */
std::vector<std::string> error_lines(const std::string &text);

/* Formats the failures of run_ranks for a gtest message; "" when all passed. */
std::string failures(const std::vector<std::string> &results);

/* A T the test and its forked ranks share (mapped before the fork, zeroed): where ranks post
   events for each other, so that none waits for another by sleeping.  T holds plain fields
   read and written with load() and store(). */
template <class T> class SharedBoard
{
  public:
    SharedBoard()
    {
        void *m =
            mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        board_ = m == MAP_FAILED ? nullptr : static_cast<T *>(m);
        if (board_ != nullptr)
            memset(static_cast<void *>(board_), 0, sizeof(T));
    }
    ~SharedBoard()
    {
        if (board_ != nullptr)
            munmap(board_, sizeof(T));
    }
    SharedBoard(const SharedBoard &) = delete;
    SharedBoard &operator=(const SharedBoard &) = delete;
    /* nullptr when the mapping failed. */
    T *get() const
    {
        return board_;
    }

  private:
    T *board_;
};

/* A field of a SharedBoard, read (acquire) and written (release) across processes. */
int load(const int *p);
void store(int *p, int v);
/* Adds one to *p; returns the new value. */
int bump(int *p);
/* Waits at most timeout_s for *p to reach at least want (polling with a 1 ms back-off). */
bool await_at_least(const int *p, int want, double timeout_s = 20);

/* ---- a rank's communicator and what its body checks --------------------------------------- */

/* What a rank's communicator may differ in; the rest is incmoe_comm_create's defaults. */
struct CommOptions {
    incmoe_algo_t algo = INCMOE_ALGO_INC;
    int timeout_ms = 0;           /* > 0: INCMOE_COMM_PARAM_TIMEOUT */
    const char *secret = nullptr; /* set: INCMOE_COMM_PARAM_SECRET */
};

/* Rank `rank` of `nranks` joins job `job` through the switch at addr (waits for all). */
incmoe_status_t comm_create(const std::string &addr, unsigned long long job, int rank, int nranks,
                            incmoe_comm_t **comm, const CommOptions &opt = CommOptions());

/* Rank `rank` of `nranks` in job `job` at addr: creates its communicator, runs body on it and
   destroys it; "" or what went wrong, the body's failure first.  A body whose collectives may
   fail destroys the communicator itself (what did not complete stays the library's until
   then) and passes body_destroys. */
std::string with_comm(const std::string &addr, unsigned long long job, int rank, int nranks,
                      const CommOptions &opt,
                      const std::function<std::string(incmoe_comm_t *comm)> &body,
                      bool body_destroys = false);

/* The communicator's reason for its failure, "" while it is healthy. */
std::string comm_text(incmoe_comm_t *comm);
/* "what: STATUS REASON": a call that failed, and why. */
std::string why(incmoe_comm_t *comm, incmoe_status_t st, const std::string &what);
/* A barrier, waited for: every rank of the job has joined when it returns INCMOE_OK. */
incmoe_status_t barrier_wait(incmoe_comm_t *comm);

/* In a rank's body (which returns "" or what went wrong): return why() if call fails. */
#define CHECK_OK_ON(comm, call)                                                                    \
    do {                                                                                           \
        incmoe_status_t st_ = (call);                                                              \
        if (st_ != INCMOE_OK)                                                                      \
            return harness::why((comm), st_, #call);                                               \
    } while (0)
/* CHECK_OK_ON on the body's `comm`. */
#define CHECK_OK(call) CHECK_OK_ON(comm, call)

/*
 * Memory a rank registers.  After a failure the collectives in flight own their ranges until
 * incmoe_comm_destroy returns (incmoe.h, "Buffers"), so a body takes its buffers from here and
 * they are freed only after the communicator is gone (destroy_then_free).  Each rank is a
 * process of its own: one store per rank.
 */
std::vector<std::shared_ptr<void>> &registered();
template <typename T> std::vector<T> &buffer(size_t n, T fill = T())
{
    auto buf = std::make_shared<std::vector<T>>(n, fill);
    registered().push_back(buf);
    return *buf;
}
/* Destroys comm, then frees what it may have written. */
incmoe_status_t destroy_then_free(incmoe_comm_t *comm);

/* A job id nobody else in this test run uses. */
unsigned long long unique_job_id();

} // namespace harness

#endif
