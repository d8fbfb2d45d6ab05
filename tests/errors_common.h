/*
 * errors_common.h - what the error suites (test_errors_*.cc, one per subsystem) share: a
 * communicator on the suite's switch, the reason texts, the check that the switch still serves
 * after a bad job, the switch's log, raw messages that break a job, and the Errors fixture.
 */
#ifndef INCMOE_TEST_ERRORS_COMMON_H
#define INCMOE_TEST_ERRORS_COMMON_H

#include <sys/wait.h>

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/wire.h"
#include "incmoe/incmoe.h"
}

namespace errtest
{

std::string status_text(incmoe_status_t st);

/* A communicator on the switch at addr, joining within timeout_ms. */
incmoe_status_t create(const std::string &addr, unsigned long long job, int rank, int n,
                       incmoe_comm_t **comm, int timeout_ms = 3000, const char *secret = nullptr,
                       incmoe_algo_t algo = INCMOE_ALGO_INC);

using harness::comm_text;

/* Runs the n ranks of job on the switch at addr: each joins (as create, with timeout_ms and
   algo) and runs body on its communicator, which body destroys; one result per rank, a failed
   join its own. */
std::vector<std::string>
run_job(const std::string &addr, unsigned long long job, int n,
        const std::function<std::string(incmoe_comm_t *comm, int rank)> &body, int timeout_s = 60,
        int timeout_ms = 3000, incmoe_algo_t algo = INCMOE_ALGO_INC);

/* Destroys comm, which ended a call with st: "" when st is want and the communicator's reason
   mentions what, else what differs. */
std::string destroy_expecting(incmoe_comm_t *comm, incmoe_status_t st, incmoe_status_t want,
                              const std::string &what);

/* A small AllGather on a fresh job proves the switch still serves. */
void expect_switch_serves(const std::string &addr, int n = 2);

/* Restarts the fixture's switch logging at debug level to a file of the test's, so a test can
   see joins happen; returns the file. */
std::string restart_logged(harness::SwitchProc *sw);

/* Waits (at most 10 s) until the switch logged the join of rank to job. */
bool switch_saw_join(const std::string &log, unsigned long long job, int rank);

/* Rank 1 of a job of two as a raw client on the switch at addr: it joins, gives rank 0 time to
   join and post, misbehaves and must then hear an ERROR; "" or what went otherwise. */
std::string raw_rank_misbehaves(const std::string &addr, uint64_t job,
                                const std::function<void(RawClient &, uint64_t job)> &misbehave);

/* A raw rank 1 next to a real rank 0: whatever the raw one sends wrong, rank 0 hears why.
   Rank 0 posts an AllGather of two blocks of `block` bytes: small (SMALL) at the default,
   in chunks (POST/DATA) from 65544 bytes. */
void expect_raw_breaks_job(const std::string &addr, incmoe_status_t want, const std::string &what,
                           const std::function<void(RawClient &, uint64_t job)> &misbehave,
                           size_t block = 4096);

/* A raw rank 1's header of msg on stream, epoch 1. */
inc_wire_hdr raw_hdr(inc_wire_msg_t msg, uint64_t job, incmoe_stream_t stream);

/* Runs fn with this process's stderr going to a fresh file, which stays where any child started
   meanwhile writes; returns the file's path. */
std::string with_stderr_to_file(const std::function<void()> &fn);

std::string file_text(const std::string &path);

incmoe_status_t create_logged(const std::string &addr, incmoe_comm_t **comm, std::string *log);

class Errors : public ::testing::Test
{
  protected:
    harness::SwitchProc sw;
    void SetUp() override
    {
        /* A low floor: the jobs here run with the timeouts their ranks ask for. */
        ASSERT_TRUE(harness::switch_start(&sw, {"--timeout-ms", "1000"}));
    }
    void TearDown() override
    {
        expect_switch_serves(sw.addr);
        int status = harness::switch_stop(&sw);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the switch crashed";
    }
};

/* The Errors fixture over the algorithms a test names (INSTANTIATE_TEST_SUITE_P in its suite). */
class ErrorsByAlgo : public Errors, public ::testing::WithParamInterface<incmoe_algo_t>
{
};

} // namespace errtest

#endif
