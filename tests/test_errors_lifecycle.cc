/*
 * test_errors_lifecycle.cc - the failures of the lifecycle: a communicator destroyed or released
 * with collectives in flight, a join that cannot complete, a switch that cannot be reached. Each
 * gets its own error on the job's ranks (or a refused connection), and the switch goes on serving
 * another job (errors_common.h has what the error suites share).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
#include "switch/throttle.h"
}

#include "errors_common.h"

using namespace errtest;

namespace
{

/* Rank 0 destroys its communicator with an AllGather the others never post; they wait on a
   barrier rank 0 never joins.  Destroy returns after its bound, and the others' waits fail
   with a reason naming rank 0 instead of hanging.  release: incmoe_comm_release instead,
   with a long bound (30 s) it must not wait for: it and the others' failures come within a
   tenth of it (a bound that tells waiting from not waiting, no speed figure). */
void expect_destroy_in_flight_fails_peers(const std::string &addr, incmoe_algo_t algo,
                                          bool release = false)
{
    const int n = 3, bound_ms = release ? 30000 : 2000;
    const double within_s = release ? bound_ms / 10000.0 : bound_ms / 1000.0 * 2 + 8;
    unsigned long long job = harness::unique_job_id();
    /* How many of the others have created their communicator: rank 0 leaves only then, so
       none of them hears of it while still joining. */
    struct Created {
        int others;
    };
    harness::SharedBoard<Created> shared;
    Created *created = shared.get();
    ASSERT_NE(created, nullptr);
    auto res = run_job(
        addr, job, n,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = INCMOE_OK;
            incmoe_req_t req;
            if (rank != 0)
                harness::bump(&created->others);
            else if (!harness::await_at_least(&created->others, n - 1, 30))
                return "the others never created their communicators";
            double t0 = inc_now_s();
            if (rank == 0) {
                static char buf[3 * 4096];
                incmoe_mr_t *mr;
                incmoe_mem_register(comm, buf, sizeof(buf), &mr);
                incmoe_layout_t l = {4096, 0, 4096, nullptr};
                st = incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
                if (st != INCMOE_OK)
                    return "allgather: " + status_text(st);
                /* Both also unmap mr, still in use. */
                st = release ? incmoe_comm_release(comm) : incmoe_comm_destroy(comm);
                double waited = inc_now_s() - t0;
                if (st != INCMOE_ERR_TIMEOUT)
                    return "destroy gave " + status_text(st);
                /* Destroy: the bound, plus closing, plus slack for a loaded 2-core machine: a
                   hang would be caught here. */
                if (waited > within_s)
                    return "destroy returned after " + std::to_string(waited) + " s";
                return "";
            }
            st = incmoe_barrier(comm, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            double waited = inc_now_s() - t0;
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find(release ? "rank 0 released" : "rank 0") == std::string::npos)
                return "reason does not name rank 0: " + text;
            if (waited > within_s)
                return "noticed after " + std::to_string(waited) + " s";
            return "";
        },
        60, bound_ms, algo);
    EXPECT_EQ(harness::failures(res), "");
}

TEST_P(ErrorsByAlgo, DestroyWithCollectiveInFlightFailsThePeers)
{
    harness::ExpectErrors errors_expected("a rank destroys its communicator mid-collective");
    expect_destroy_in_flight_fails_peers(sw.addr, GetParam());
}

TEST_P(ErrorsByAlgo, ReleaseWithCollectiveInFlightDoesNotWaitAndFailsThePeers)
{
    harness::ExpectErrors errors_expected("a rank releases its communicator mid-collective");
    expect_destroy_in_flight_fails_peers(sw.addr, GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Algos, ErrorsByAlgo,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_param_name);

/* With nothing in flight a release leaves in order: the others' next collective, among
   themselves in a job of their own, is unaffected, and release returns INCMOE_OK. */
TEST_F(Errors, ReleaseWithNothingInFlightLeavesInOrder)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, rank, 2, &comm);
        if (st != INCMOE_OK)
            return "create: " + status_text(st);
        incmoe_req_t req;
        st = incmoe_barrier(comm, &req);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
        if (st != INCMOE_OK)
            return "barrier: " + status_text(st);
        st = incmoe_comm_release(comm);
        return st == INCMOE_OK ? "" : "release gave " + status_text(st);
    });
    EXPECT_EQ(harness::failures(res), "");
    EXPECT_EQ(incmoe_comm_release(nullptr), INCMOE_ERR_INVALID_ARG);
}

/* A switch that took the TCP connection but never answers (stopped): the join times out with
   an error, and the rank's process ends normally.  Tearing the endpoint down with the JOIN
   still queued on it used to make UCX abort the process. */
TEST_F(Errors, JoinAgainstAStoppedSwitchTimesOut)
{
    harness::ExpectErrors errors_expected("the switch is stopped");
    harness::SwitchProc stopped;
    ASSERT_TRUE(harness::switch_start(&stopped));
    ASSERT_EQ(kill(stopped.pid, SIGSTOP), 0);
    auto res = harness::run_ranks(
        1,
        [&](int) -> std::string {
            setenv("INCMOE_TIMEOUT_MS", "1500", 1);
            incmoe_comm_params_t p = {};
            p.switch_addr = stopped.addr.c_str();
            p.job_id = harness::unique_job_id();
            p.rank = 0;
            p.nranks = 2;
            incmoe_comm_t *comm = nullptr;
            double t0 = inc_now_s();
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            double took = inc_now_s() - t0;
            fprintf(stderr, "join against a stopped switch: %s after %.2f s\n",
                    status_text(st).c_str(), took);
            if (st != INCMOE_ERR_TIMEOUT)
                return "create gave " + status_text(st);
            /* It waited its timeout, and not much more: a hang would be caught here. */
            if (took < 1.4 || took > 4.0)
                return "create returned after " + std::to_string(took) + " s";
            return "";
        },
        30);
    EXPECT_EQ(harness::failures(res), "") << "a rank killed by a signal did not end normally";
    kill(stopped.pid, SIGCONT);
    int status = harness::switch_stop(&stopped);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the resumed switch crashed";
}

TEST_F(Errors, UnreachableSwitchAndBadAddress)
{
    harness::ExpectErrors errors_expected("the switch cannot be reached");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create("127.0.0.1:1", 1, 0, 2, &comm, 2000);
        if (st != INCMOE_ERR_UNREACHABLE && st != INCMOE_ERR_PEER_FAILED &&
            st != INCMOE_ERR_TIMEOUT)
            return "closed port gave " + status_text(st);
        if (create("no-port-here", 1, 0, 2, &comm) != INCMOE_ERR_INVALID_ARG)
            return "address without port accepted";
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
