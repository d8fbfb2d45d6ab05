/*
 * test_dispatch.cc - dispatch and combine (incmoe.h, "Dispatch and combine"):
 * the plan's shared verdict as a pure function, and the collectives across
 * real processes on every algorithm that has them.
 */
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.h"

extern "C" {
#include "incmoe/incmoe.h"
#include "base/dc_plan.h"
}

namespace
{

/* ------------------------------------------------------------------------ */
/* the plan's verdict                                                        */

/* A dispatch plan from a count matrix count[s][d] and the ranks' capacities and row sizes. */
struct DispatchPlan {
    std::vector<std::vector<uint32_t>> count;
    std::vector<inc_dc_dispatch_in_t> in;

    DispatchPlan(const std::vector<std::vector<uint32_t>> &c, const std::vector<uint64_t> &cap,
                 const std::vector<uint64_t> &row_bytes)
        : count(c)
    {
        for (size_t s = 0; s < count.size(); s++)
            in.push_back({row_bytes[s], cap[s], count[s].data()});
    }
    inc_dc_verdict_t verdict(uint64_t epoch)
    {
        inc_dc_verdict_t v;
        inc_dc_dispatch_verdict(epoch, (int)in.size(), in.data(), &v);
        return v;
    }
};

TEST(DispatchPlan, EveryRankWithinItsCapacityIsOk)
{
    DispatchPlan p({{1, 2, 0}, {0, 0, 3}, {4, 0, 0}}, {5, 2, 3}, {64, 64, 64});
    inc_dc_verdict_t v = p.verdict(1);
    EXPECT_EQ(v.status, INCMOE_OK);
    EXPECT_EQ(v.rank, -1);
    EXPECT_STREQ(v.reason, "");
    EXPECT_EQ(inc_dc_rows_to(3, p.in.data(), 0), 5u);
}

TEST(DispatchPlan, TheFirstRankOverItsCapacityFailsWithItsCounts)
{
    DispatchPlan p({{1, 3, 2}, {0, 0, 3}, {4, 0, 0}}, {5, 2, 4}, {8, 8, 8});
    inc_dc_verdict_t v = p.verdict(7);
    EXPECT_EQ(v.status, INCMOE_ERR_NO_MEMORY);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason, "dispatch epoch 7: rank 1 would receive 3 rows, capacity 2");
}

TEST(DispatchPlan, RowSizesThatDisagreeAreAMismatchBeforeCapacity)
{
    DispatchPlan p({{9, 0}, {0, 0}}, {0, 0}, {16, 32});
    inc_dc_verdict_t v = p.verdict(3);
    EXPECT_EQ(v.status, INCMOE_ERR_MISMATCH);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason, "dispatch epoch 3: rank 1 has rows of 32 bytes, rank 0 of 16");
}

/* A rank that refused its arguments fails the dispatch on every rank with its reason, before
   the shapes and capacities are looked at; the lowest such rank is named. */
TEST(DispatchPlan, ARefusalComesFirstAndNamesTheLowestRefusingRank)
{
    DispatchPlan p({{9, 0, 0}, {0, 0, 0}, {0, 0, 0}}, {0, 0, 0}, {16, 32, 16});
    p.in[2].refused = "mask has shape (3, 2), expected (3, 3)";
    inc_dc_verdict_t v = p.verdict(5);
    EXPECT_EQ(v.status, INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(v.rank, 2);
    EXPECT_STREQ(v.reason, "dispatch epoch 5: rank 2 refused its dispatch arguments: mask has "
                           "shape (3, 2), expected (3, 3)");
    p.in[1].refused = "x is not contiguous";
    v = p.verdict(5);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason,
                 "dispatch epoch 5: rank 1 refused its dispatch arguments: x is not contiguous");
}

/* What every rank carries of a reason is its first INCMOE_REFUSAL_MAX - 1 bytes: the verdict
   names no more, whatever the refusing rank held. */
TEST(DispatchPlan, ARefusalsReasonIsBoundedAsTheRanksCarryIt)
{
    DispatchPlan p({{0}}, {0}, {8});
    std::string why(3 * INCMOE_REFUSAL_MAX, 'x');
    p.in[0].refused = why.c_str();
    inc_dc_verdict_t v = p.verdict(1);
    EXPECT_EQ(v.status, INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(std::string(v.reason), "dispatch epoch 1: rank 0 refused its dispatch arguments: " +
                                         std::string(INCMOE_REFUSAL_MAX - 1, 'x'));
}

struct CombinePlan {
    std::vector<std::vector<uint32_t>> sent, recvd;
    std::vector<inc_dc_combine_in_t> in;

    /* sent[s][d]: rows of s held by d; recvd[d][s]: rows d says it holds from s. */
    CombinePlan(const std::vector<std::vector<uint32_t>> &snt,
                const std::vector<std::vector<uint32_t>> &rcv)
        : sent(snt), recvd(rcv)
    {
        for (size_t r = 0; r < sent.size(); r++)
            in.push_back({4, 16, INCMOE_FLOAT32, INCMOE_SUM, sent[r].data(), recvd[r].data()});
    }
    inc_dc_verdict_t verdict(uint64_t epoch)
    {
        inc_dc_verdict_t v;
        inc_dc_combine_verdict(epoch, (int)in.size(), in.data(), &v);
        return v;
    }
};

TEST(CombinePlan, CountsThatMirrorTheDispatchAreOk)
{
    CombinePlan p({{1, 2}, {3, 0}}, {{1, 3}, {2, 0}});
    EXPECT_EQ(p.verdict(2).status, INCMOE_OK);
}

TEST(CombinePlan, AReceiverWithOtherCountsIsTheRankAtFault)
{
    CombinePlan p({{1, 2}, {3, 0}}, {{1, 3}, {1, 0}});
    inc_dc_verdict_t v = p.verdict(2);
    EXPECT_EQ(v.status, INCMOE_ERR_MISMATCH);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason, "combine epoch 2: rank 1 gives 1 partial rows for rank 0, which sent "
                           "it 2 rows in dispatch epoch 4");
}

TEST(CombinePlan, AnotherDispatchOrShapeIsAMismatchNamingTheRank)
{
    CombinePlan p({{0, 0}, {0, 0}}, {{0, 0}, {0, 0}});
    p.in[1].dispatch_epoch = 5;
    inc_dc_verdict_t v = p.verdict(9);
    EXPECT_EQ(v.status, INCMOE_ERR_MISMATCH);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason,
                 "combine epoch 9: rank 1 names dispatch epoch 5, rank 0 dispatch epoch 4");
    p.in[1].dispatch_epoch = 4;
    p.in[1].dtype = INCMOE_BFLOAT16;
    v = p.verdict(9);
    EXPECT_EQ(v.status, INCMOE_ERR_MISMATCH);
    EXPECT_STREQ(v.reason, "combine epoch 9: rank 1 has rows of 16 bfloat16 (sum), rank 0 of 16 "
                           "float (sum)");
}

TEST(CombinePlan, ARefusalComesBeforeTheDispatchAndTheShapes)
{
    CombinePlan p({{1, 2}, {3, 0}}, {{1, 3}, {1, 0}});
    p.in[1].dispatch_epoch = 8;
    p.in[1].refused = "partials have 3 rows, the dispatch delivered 4";
    inc_dc_verdict_t v = p.verdict(6);
    EXPECT_EQ(v.status, INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason, "combine epoch 6: rank 1 refused its combine arguments: partials "
                           "have 3 rows, the dispatch delivered 4");
}

/* ------------------------------------------------------------------------ */
/* across processes                                                          */

harness::SwitchProc g_switch;

class Dispatch : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(harness::switch_start(&g_switch)) << "could not start incmoe-switchd";
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_switch);
    }
};

incmoe_status_t create(incmoe_algo_t algo, unsigned long long job, int rank, int nranks,
                       incmoe_comm_t **comm)
{
    incmoe_comm_params_t p = {};
    p.field_mask = INCMOE_COMM_PARAM_ALGO;
    p.switch_addr = g_switch.addr.c_str();
    p.job_id = job;
    p.rank = rank;
    p.nranks = nranks;
    p.algo = algo;
    return incmoe_comm_create(&p, comm);
}

/* An algorithm without dispatch and combine says so on every rank, posts nothing, and the
   communicator carries on. */
TEST_F(Dispatch, AnAlgorithmWithoutThemReturnsUnsupportedAndCarriesOn)
{
    for (incmoe_algo_t algo : {INCMOE_ALGO_INC, INCMOE_ALGO_RING}) {
        unsigned long long job = harness::unique_job_id();
        auto res = harness::run_ranks(2, [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(algo, job, rank, 2, &comm);
            if (st != INCMOE_OK)
                return std::string("create: ") + incmoe_strerror(st);
            std::string err;
            incmoe_dispatch_params_t dp = {};
            incmoe_combine_params_t cp = {};
            incmoe_req_t req;
            if ((st = incmoe_dispatch(comm, &dp, &req)) != INCMOE_ERR_UNSUPPORTED)
                err = std::string("dispatch gave ") + incmoe_strerror(st);
            else if ((st = incmoe_combine(comm, &cp, &req)) != INCMOE_ERR_UNSUPPORTED)
                err = std::string("combine gave ") + incmoe_strerror(st);
            else if ((st = incmoe_barrier(comm, &req)) != INCMOE_OK ||
                     (st = incmoe_wait(comm, &req)) != INCMOE_OK)
                err = std::string("barrier after them: ") + incmoe_strerror(st);
            st = incmoe_comm_destroy(comm);
            if (err.empty() && st != INCMOE_OK)
                err = std::string("destroy: ") + incmoe_strerror(st);
            return err;
        });
        EXPECT_EQ(harness::failures(res), "") << "algo " << algo;
    }
}

/* The a2a algorithm is listed but not built yet: create refuses it. */
TEST_F(Dispatch, AnAlgorithmNotAvailableYetIsRefusedAtCreate)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(INCMOE_ALGO_A2A, harness::unique_job_id(), 0, 1, &comm);
        if (st == INCMOE_OK) {
            incmoe_comm_destroy(comm);
            return "a2a was created";
        }
        return st == INCMOE_ERR_UNSUPPORTED ? "" : std::string("gave ") + incmoe_strerror(st);
    });
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
