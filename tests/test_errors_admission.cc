/*
 * test_errors_admission.cc - the failures of admission: who may join a job (duplicate ranks, ranks
 * beyond its size, sizes that disagree) and what a job may hold (credits, the memory bound). Each
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
#include <sys/mman.h>
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

TEST_F(Errors, DuplicateRankIsRefused)
{
    harness::ExpectErrors errors_expected("a rank joins twice");
    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int i) -> std::string {
        /* The second claims rank 0 too, once the switch has the first's join. */
        if (i == 1 && !switch_saw_join(log, job, 0))
            return "the switch did not log the first join";
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, 0, 2, &comm, 1500);
        if (i == 1)
            return st == INCMOE_ERR_JOB ? "" : "duplicate rank gave " + status_text(st);
        return st == INCMOE_ERR_TIMEOUT ? "" : "lone rank gave " + status_text(st);
    });
    EXPECT_EQ(harness::failures(res), "");
    unlink(log.c_str());
}

TEST_F(Errors, RankBeyondJobSizeAndSizeDisagreementAreRefused)
{
    harness::ExpectErrors errors_expected("ranks are beyond the job's size");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        RawClient c;
        if (!c.connect(sw.addr))
            return "connect";
        c.join(harness::unique_job_id(), 4, 4);
        RawMsg m;
        if (!c.wait_for(WIRE_MSG_ERROR, &m, 3000) || m.hdr.status != INCMOE_ERR_JOB)
            return "rank 4 of 4 was not refused with a job error";
        if (m.payload.find("not below the job size") == std::string::npos)
            return "reason: " + m.payload;
        /* The client library refuses it before sending anything. */
        incmoe_comm_t *comm;
        if (create(sw.addr, 1, 4, 4, &comm) != INCMOE_ERR_INVALID_ARG)
            return "library accepted rank 4 of 4";
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");

    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    res = harness::run_ranks(2, [&](int i) -> std::string {
        /* Rank 1 says 3 ranks once the switch has formed the job's size from rank 0's join. */
        if (i == 1 && !switch_saw_join(log, job, 0))
            return "the switch did not log rank 0's join";
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, i, 2 + i, &comm, 1500);
        if (i == 1)
            return st == INCMOE_ERR_MISMATCH ? "" : "job size 3 vs 2 gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    unlink(log.c_str());
}

TEST_F(Errors, SenderIgnoringCreditsCannotMakeTheSwitchBuffer)
{
    harness::ExpectErrors errors_expected("a raw client ignores its credits");
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "credits", [](RawClient &c, uint64_t job) {
        /* A 128-chunk window sent without waiting for a single credit back (64 of the default
           128 KiB chunks are granted). */
        const uint64_t chunk = 131072, total = 128 * chunk;
        std::vector<char> data(chunk);
        for (uint64_t k = 0; k < 128; k++) {
            inc_wire_hdr d = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
            d.epoch = 5; /* never armed: nothing is forwarded, so no credit comes back */
            d.root = 1;
            d.offset = k * chunk;
            d.length = chunk;
            d.total = total;
            d.chunk = (uint32_t)k;
            c.send(&d, sizeof(d), data.data(), data.size(), true);
        }
    });
}

TEST_F(Errors, JobsThatWouldExceedTheMemoryBoundAreRefused)
{
    harness::ExpectErrors errors_expected("a job is over the memory bound");
    harness::switch_stop(&sw);
    ASSERT_TRUE(harness::switch_start(&sw, {"--max-memory", "100M"}));
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        /* 2 ranks need 64 x ((128K + 16) x 6 + 128K x 6) = 96 MiB + 6 KiB: admitted.  8 ranks
           need over 240 MiB: refused. */
        incmoe_status_t st = create(sw.addr, harness::unique_job_id(), 0, 8, &comm, 3000);
        if (st != INCMOE_ERR_NO_MEMORY)
            return "8-rank job gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
