/*
 * harness.h - multi-process test scaffolding: a real incmoe-switchd on
 * loopback and N forked rank processes.  A rank's body returns "" on success
 * or a description of what went wrong; the parent collects them.
 */
#ifndef INCMOE_TEST_HARNESS_H
#define INCMOE_TEST_HARNESS_H

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

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

/* Formats the failures of run_ranks for a gtest message; "" when all passed. */
std::string failures(const std::vector<std::string> &results);

/* A job id nobody else in this test run uses. */
unsigned long long unique_job_id();

} // namespace harness

#endif
