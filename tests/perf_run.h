/* perf_run.h - runs a program with a time bound and collects what it printed (test_perf_run.cc),
   for the suites that drive tools as a user would. */
#ifndef INCMOE_TESTS_PERF_RUN_H
#define INCMOE_TESTS_PERF_RUN_H

#include <string>
#include <vector>

namespace perf_test
{

struct RunResult {
    int status = -1; /* exit status, or 128 + signal */
    bool timed_out = false;
    std::string out, err;
};

/* argv in its own process group, killed at the timeout. */
RunResult run_cmd(const std::vector<std::string> &argv, int timeout_s);

/* "" when the run ended by itself with status 0, else how it ended and what it printed. */
std::string failed_run(const RunResult &r);

/* How the run ended and what it printed, for a failed expectation's message. */
std::string describe(const RunResult &r);

/* nccl-tests table rows of out (lines not starting with '#'), split on blanks. */
std::vector<std::vector<std::string>> table_rows(const std::string &out);

} // namespace perf_test

#endif
