/*
 * test_dispatch.cc - dispatch and combine (incmoe.h, "Dispatch and combine"):
 * the plan's shared verdict as a pure function, and the collectives across
 * real processes on every algorithm that has them (an algorithm without them
 * skips), each checked against a plain fold written here: which rows land
 * where, their sources, and each combined row as exact arithmetic over the
 * partials of exactly the ranks in its set.  Guard bytes around every receive
 * range must stay untouched.
 */
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dc_ref.h"
#include "errors_common.h"
#include "exact_int.h"
#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/dc_plan.h"
#include "incmoe/incmoe.h"
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

/* A plan's verdict: the status, the rank it names (-1: none) and the reason. */
void expect_verdict(const inc_dc_verdict_t &v, incmoe_status_t status, int rank, const char *reason)
{
    EXPECT_EQ(v.status, status);
    EXPECT_EQ(v.rank, rank);
    EXPECT_STREQ(v.reason, reason);
}

TEST(DispatchPlan, EveryRankWithinItsCapacityIsOk)
{
    DispatchPlan p({{1, 2, 0}, {0, 0, 3}, {4, 0, 0}}, {5, 2, 3}, {64, 64, 64});
    inc_dc_verdict_t v = p.verdict(1);
    expect_verdict(v, INCMOE_OK, -1, "");
    EXPECT_EQ(inc_dc_rows_to(3, p.in.data(), 0), 5u);
}

TEST(DispatchPlan, TheFirstRankOverItsCapacityFailsWithItsCounts)
{
    DispatchPlan p({{1, 3, 2}, {0, 0, 3}, {4, 0, 0}}, {5, 2, 4}, {8, 8, 8});
    inc_dc_verdict_t v = p.verdict(7);
    expect_verdict(v, INCMOE_ERR_NO_MEMORY, 1,
                   "dispatch epoch 7: rank 1 would receive 3 rows, capacity 2");
}

TEST(DispatchPlan, RowSizesThatDisagreeAreAMismatchBeforeCapacity)
{
    DispatchPlan p({{9, 0}, {0, 0}}, {0, 0}, {16, 32});
    inc_dc_verdict_t v = p.verdict(3);
    expect_verdict(v, INCMOE_ERR_MISMATCH, 1,
                   "dispatch epoch 3: rank 1 has rows of 32 bytes, rank 0 of 16");
}

/* A rank that refused its arguments fails the dispatch on every rank with its reason, before
   the shapes and capacities are looked at; the lowest such rank is named. */
TEST(DispatchPlan, ARefusalComesFirstAndNamesTheLowestRefusingRank)
{
    DispatchPlan p({{9, 0, 0}, {0, 0, 0}, {0, 0, 0}}, {0, 0, 0}, {16, 32, 16});
    p.in[2].refused = "mask has shape (3, 2), expected (3, 3)";
    inc_dc_verdict_t v = p.verdict(5);
    expect_verdict(v, INCMOE_ERR_INVALID_ARG, 2,
                   "dispatch epoch 5: rank 2 refused its dispatch arguments: mask has "
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
    expect_verdict(v, INCMOE_ERR_MISMATCH, 1,
                   "combine epoch 2: rank 1 gives 1 partial rows for rank 0, which sent "
                   "it 2 rows in dispatch epoch 4");
}

TEST(CombinePlan, AnotherDispatchOrShapeIsAMismatchNamingTheRank)
{
    CombinePlan p({{0, 0}, {0, 0}}, {{0, 0}, {0, 0}});
    p.in[1].dispatch_epoch = 5;
    inc_dc_verdict_t v = p.verdict(9);
    expect_verdict(v, INCMOE_ERR_MISMATCH, 1,
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
    expect_verdict(v, INCMOE_ERR_INVALID_ARG, 1,
                   "combine epoch 6: rank 1 refused its combine arguments: partials "
                   "have 3 rows, the dispatch delivered 4");
}

/* ------------------------------------------------------------------------ */
/* the reference                                                             */

using namespace dc_ref;

/* One dispatch and combine, the same in every process (made from a seed). */
struct Case : dc_ref::Sets {
    size_t row_bytes = 64;
    std::vector<size_t> capacity; /* of each rank; SIZE_MAX: exactly R */

    /* (source rank, source row) of each row rank d receives, in order. */
    std::vector<std::pair<uint32_t, uint32_t>> received(int d) const
    {
        std::vector<std::pair<uint32_t, uint32_t>> out;
        for (int s = 0; s < n; s++)
            for (size_t i = 0; i < rows[s]; i++)
                if (in_set(s, i, d))
                    out.push_back({(uint32_t)s, (uint32_t)i});
        return out;
    }
    size_t cap(int d) const
    {
        return capacity[d] == SIZE_MAX ? received(d).size() : capacity[d];
    }
};

/* A partial's element as an exact small integer: rank d's partial of row i of rank s.
   Sums of up to 8 stay exact in every type; products are of +-1. */
long long partial_val(const Case &c, int d, int s, size_t i, size_t e)
{
    return dc_ref::small_exact(
        (unsigned)(d * 1000003 + s * 7919 + (int)i * 131 + (int)e * 17 + (int)c.seed), c, 9);
}

/* What the owner s gets for row i: op over the partials of exactly the ranks in its set
   (zeros for an empty set), as exact integers. */
std::vector<unsigned char> combined_row(const Case &c, int s, size_t i)
{
    return dc_ref::exact_row(c, [&](size_t e) {
        std::vector<long long> vals;
        for (int d = 0; d < c.n; d++)
            if (c.in_set(s, i, d))
                vals.push_back(partial_val(c, d, s, i, e));
        return vals;
    });
}

/* A case of n ranks with rows[r] rows each and sets drawn with the given shape. */
Case make_case(int n, std::vector<size_t> rows, size_t row_bytes, SetShape shape, unsigned seed,
               double density = 0.4)
{
    Case c;
    c.n = n;
    c.row_bytes = row_bytes;
    c.rows = rows;
    c.seed = seed;
    c.capacity.assign(n, SIZE_MAX);
    std::mt19937_64 rng(seed);
    std::bernoulli_distribution bit(density);
    dc_ref::draw_sets(c, shape, rng, 5, [&] { return bit(rng); });
    return c;
}

/* ------------------------------------------------------------------------ */
/* one rank's run                                                            */

const size_t kGuardRows = 3;

using harness::why;

/* A dispatch of rank me's first nrows rows of c (row_bytes each) from b's send buffer into
   b's receive buffer, capacity rows. */
incmoe_dispatch_params_t dispatch_params(const Case &c, int me, const Buffers &b, size_t nrows,
                                         size_t row_bytes, size_t capacity)
{
    incmoe_dispatch_params_t p = {};
    p.send_mr = b.m_send;
    p.nrows = nrows;
    p.row_bytes = row_bytes;
    p.sets = c.sets[me].empty() ? nullptr : c.sets[me].data();
    p.recv_mr = b.m_recv;
    p.capacity = capacity;
    return p;
}

/* Dispatch: post and (if wait) wait; the status (failures alone are the caller's). */
incmoe_status_t post_dispatch(incmoe_comm_t *comm, const Case &c, int me, Buffers &b,
                              incmoe_req_t *req, bool wait = true)
{
    const size_t rb = c.row_bytes, cap = c.cap(me);
    b.comm = comm;
    b.send.assign(std::max<size_t>(1, c.rows[me] * rb), 0);
    for (size_t i = 0; i < c.rows[me]; i++)
        for (size_t j = 0; j < rb; j++)
            b.send[i * rb + j] = row_byte(c, me, i, j);
    b.recv.assign((cap + kGuardRows) * rb, kCanary);
    incmoe_status_t st = incmoe_mem_register(comm, b.send.data(), b.send.size(), &b.m_send);
    if (st == INCMOE_OK)
        st = incmoe_mem_register(comm, b.recv.data(), b.recv.size(), &b.m_recv);
    if (st != INCMOE_OK)
        return st;
    incmoe_dispatch_params_t p = dispatch_params(c, me, b, c.rows[me], rb, cap);
    st = incmoe_dispatch(comm, &p, req);
    return st != INCMOE_OK || !wait ? st : incmoe_wait(comm, req);
}

/* The received rows, their sources and the guard rows against the reference. */
std::string check_dispatch(incmoe_comm_t *comm, const Case &c, int me, const Buffers &b,
                           const incmoe_req_t *req)
{
    auto want = c.received(me);
    size_t nrecv = 0;
    std::vector<uint32_t> src(2 * want.size() + 2, 7777);
    incmoe_status_t st = incmoe_dispatch_result(comm, req, &nrecv, src.data(), want.size() + 1);
    if (st != INCMOE_OK)
        return why(comm, st, "dispatch_result");
    std::ostringstream err;
    if (nrecv != want.size()) {
        err << "received " << nrecv << " rows, want " << want.size();
        return err.str();
    }
    const size_t rb = c.row_bytes;
    for (size_t k = 0; k < want.size(); k++) {
        if (src[2 * k] != want[k].first || src[2 * k + 1] != want[k].second) {
            err << "row " << k << " from (" << src[2 * k] << ", " << src[2 * k + 1] << "), want ("
                << want[k].first << ", " << want[k].second << ")";
            return err.str();
        }
        for (size_t j = 0; j < rb; j++) {
            if (b.recv[k * rb + j] != row_byte(c, want[k].first, want[k].second, j)) {
                err << "row " << k << " (from rank " << want[k].first << " row " << want[k].second
                    << ") byte " << j << " differs";
                return err.str();
            }
        }
    }
    if (src[2 * want.size()] != 7777)
        return "the source table was written past R";
    for (size_t at = want.size() * rb; at < b.recv.size(); at++)
        if (b.recv[at] != kCanary) {
            err << "byte " << at << " past the " << want.size() << " received rows was written";
            return err.str();
        }
    return "";
}

/* Combine the dispatch with this rank's partials and check each result row. */
std::string run_combine(incmoe_comm_t *comm, const Case &c, int me, Buffers &b,
                        const incmoe_req_t *dispatch)
{
    const size_t esize = incmoe_dtype_size(c.dtype), pb = c.row_count * esize;
    auto got = c.received(me);
    b.part.assign(std::max<size_t>(1, got.size() * pb), 0);
    for (size_t k = 0; k < got.size(); k++)
        for (size_t e = 0; e < c.row_count; e++)
            exact_int::put(c.dtype, partial_val(c, me, (int)got[k].first, got[k].second, e),
                           &b.part[k * pb + e * esize]);
    return dc_ref::combine_and_check(comm, c, me, b, dispatch, kGuardRows,
                                     [&](size_t i) { return combined_row(c, me, i); });
}

/* ------------------------------------------------------------------------ */
/* across processes                                                          */

/* Small chunks, so a few rows span several of them: [rndv]. */
harness::SwitchProc g_switch[2];
const char *const kChunk = "4096";

class Dc : public ::testing::TestWithParam<Variant>
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(harness::switch_start(&g_switch[0], {"--chunk-size", kChunk}))
            << "could not start incmoe-switchd";
        ASSERT_TRUE(
            harness::switch_start(&g_switch[1], {"--chunk-size", kChunk, "--rndv-thresh", "512"}));
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_switch[0]);
        harness::switch_stop(&g_switch[1]);
    }

    /* Runs body on n ranks of a fresh job.  A body
       whose collectives may fail destroys comm itself (failed: the ranges of what did not
       complete stay the library's until then) and run expects no destroy_ok. */
    std::vector<std::string> run(int n,
                                 const std::function<std::string(incmoe_comm_t *, int)> &body,
                                 int timeout_s = 120, bool expect_destroy_ok = true)
    {
        unsigned long long job = harness::unique_job_id();
        const Variant v = GetParam();
        return harness::run_ranks(
            n,
            [&](int rank) -> std::string {
                setenv("INCMOE_RNDV_THRESH", v.rndv ? "512" : "0", 1);
                harness::CommOptions opt;
                opt.algo = v.algo;
                return harness::with_comm(
                    g_switch[v.rndv].addr, job, rank, n, opt,
                    [&](incmoe_comm_t *comm) { return body(comm, rank); }, !expect_destroy_ok);
            },
            timeout_s);
    }
};

#define EXPECT_RANKS(res) EXPECT_EQ(harness::failures(res), "")

std::vector<size_t> rows_for(int n, size_t t, int shape)
{
    std::vector<size_t> rows(n);
    for (int r = 0; r < n; r++)
        rows[r] = shape == 0 ? t : (r % 3 == 1 ? 0 : t + (size_t)r * 5);
    return rows;
}

TEST_P(Dc, RandomSetsEveryRankCountMatchTheFold)
{
    for (int n = 1; n <= 8; n++) {
        EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
            /* One small case, one of many chunks with some ranks without rows, in one job. */
            struct {
                size_t t, rb;
                int shape;
            } cases[] = {{5, 24, 0}, {40, 200, 1}, {3, 1000, 1}};
            unsigned seed = 100;
            for (auto &k : cases) {
                Case c = make_case(n, rows_for(n, k.t, k.shape), k.rb, RANDOM, seed++);
                std::string e = dispatch_then_combine(comm, c, me);
                if (!e.empty())
                    return "T " + std::to_string(k.t) + " row " + std::to_string(k.rb) + ": " + e;
            }
            return "";
        }));
    }
}

TEST_P(Dc, EmptyAllRanksOwnOnlyAndMixedSets)
{
    for (int n : {2, 3, 5}) {
        EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
            unsigned seed = 7;
            for (SetShape sh : {EMPTY, ALL_RANKS, OWN_ONLY, OTHERS_ONLY, MIXED}) {
                for (size_t t : {(size_t)1, (size_t)30}) {
                    Case c = make_case(n, rows_for(n, t, 1), 48, sh, seed++);
                    std::string e = dispatch_then_combine(comm, c, me);
                    if (!e.empty())
                        return "shape " + std::to_string(sh) + " T " + std::to_string(t) + ": " + e;
                }
            }
            return "";
        }));
    }
}

TEST_P(Dc, EveryDatatypeAndOperation)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        unsigned seed = 300;
        return each_reduction([&](incmoe_dtype_t dt, incmoe_redop_t op) -> std::string {
            for (size_t t : {(size_t)4, (size_t)60}) { /* small, then chunked */
                Case c = make_case(3, rows_for(3, t, 0), 64, MIXED, seed++);
                c.dtype = dt;
                c.op = op;
                c.row_count = 24;
                std::string e = dispatch_then_combine(comm, c, me);
                if (!e.empty())
                    return e;
            }
            return "";
        });
    }));
}

/* A rank's whole contribution goes as one SMALL while its pieces take at most a chunk: the
   rows per rank sweep across that limit (each row and its set take 128 bytes, a piece's
   header 32: 31 rows are small, 32 not), and both sides are exact. */
TEST_P(Dc, BothSidesOfTheSmallLimit)
{
    EXPECT_RANKS(run(4, [&](incmoe_comm_t *comm, int me) -> std::string {
        const size_t rb = 120;
        unsigned seed = 50;
        for (size_t t = 28; t <= 36; t++) {
            for (SetShape sh : {ALL_RANKS, OTHERS_ONLY}) {
                Case c = make_case(4, rows_for(4, t, 0), rb, sh, seed++);
                c.row_count = rb / 4; /* partials as large as the rows */
                std::string e = dispatch_then_combine(comm, c, me);
                if (!e.empty())
                    return "T " + std::to_string(t) + ": " + e;
            }
        }
        return "";
    }));
}

/* A rank whose rows exceed its capacity fails the dispatch on every rank alike, writes
   nothing, reports the rows it would have received, and the communicator carries on. */
TEST_P(Dc, CapacityOverflowFailsEveryRankAlikeAndWritesNothing)
{
    for (bool small : {true, false}) {
        EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
            Case c = make_case(3, rows_for(3, small ? 3 : 50, 0), small ? 16 : 300, ALL_RANKS, 9);
            const size_t want = c.received(1).size();
            c.capacity[1] = want - 1;
            Buffers b;
            incmoe_req_t req;
            incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
            std::string reason = req_why(comm, &req);
            std::string expect = "dispatch epoch 1: rank 1 would receive " + std::to_string(want) +
                                 " rows, capacity " + std::to_string(want - 1);
            if (st != INCMOE_ERR_NO_MEMORY || reason != expect)
                return std::string("wait gave ") + incmoe_strerror(st) + " '" + reason +
                       "', want '" + expect + "'";
            if (incmoe_test(comm, &req) != INCMOE_ERR_NO_MEMORY)
                return "test does not repeat the dispatch's failure";
            for (unsigned char x : b.recv)
                if (x != kCanary)
                    return "a failed dispatch wrote into the receive buffer";
            size_t nrecv = 0;
            uint32_t src[2];
            st = incmoe_dispatch_result(comm, &req, &nrecv, src, 1);
            if (st != INCMOE_ERR_NO_MEMORY || nrecv != c.received(me).size())
                return std::string("dispatch_result gave ") + incmoe_strerror(st) + ", " +
                       std::to_string(nrecv) + " rows";
            char text[64];
            if (incmoe_comm_error(comm, text, sizeof(text)) != INCMOE_OK)
                return std::string("the communicator failed: ") + text;
            CHECK_OK(incmoe_dispatch_release(comm, &req));
            /* Retry with room, as a caller would. */
            c.capacity[1] = SIZE_MAX;
            c.seed = 10;
            return dispatch_then_combine(comm, c, me);
        }));
    }
}

/* A combine of p that every rank must see fail as a mismatch with reason want: "" or what
   came instead, after what. */
std::string combine_mismatch(incmoe_comm_t *comm, const incmoe_combine_params_t &p,
                             const char *what, const std::string &want)
{
    incmoe_req_t r;
    CHECK_OK(incmoe_combine(comm, &p, &r));
    incmoe_status_t st = incmoe_wait(comm, &r);
    std::string reason = req_why(comm, &r);
    if (st != INCMOE_ERR_MISMATCH || reason != want)
        return std::string(what) + ": " + incmoe_strerror(st) + " '" + reason + "'";
    return "";
}

/* Ranks that disagree on row_bytes, or on a combine's rows or dispatch, fail that collective
   on every rank with one reason; the communicator, and a dispatch whose combine failed, carry
   on. */
TEST_P(Dc, ShapesThatDisagreeFailEveryRankWithOneReason)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        /* row_bytes */
        Case c = make_case(3, rows_for(3, 6, 0), me == 2 ? 32 : 48, RANDOM, 21);
        Buffers b;
        incmoe_req_t d;
        incmoe_status_t st = post_dispatch(comm, c, me, b, &d);
        std::string reason = req_why(comm, &d);
        if (st != INCMOE_ERR_MISMATCH ||
            reason != "dispatch epoch 1: rank 2 has rows of 32 bytes, rank 0 of 48")
            return std::string("row_bytes: ") + incmoe_strerror(st) + " '" + reason + "'";
        CHECK_OK(incmoe_dispatch_release(comm, &d));
        /* two good dispatches; the first combine names different ones, the second a shape of
           its own */
        Case c1 = make_case(3, rows_for(3, 6, 1), 40, MIXED, 22);
        Case c2 = make_case(3, rows_for(3, 9, 0), 40, MIXED, 23);
        Buffers b1, b2;
        incmoe_req_t d1, d2;
        CHECK_OK(post_dispatch(comm, c1, me, b1, &d1));
        CHECK_OK(post_dispatch(comm, c2, me, b2, &d2));
        std::vector<float> part(64 * 16), out(64 * 16);
        incmoe_mr_t *mp, *mo;
        CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &mp));
        CHECK_OK(incmoe_mem_register(comm, out.data(), out.size() * 4, &mo));
        incmoe_combine_params_t p = {};
        p.send_mr = mp;
        p.recv_mr = mo;
        p.row_count = 8;
        p.dtype = INCMOE_FLOAT32;
        p.op = INCMOE_SUM;
        p.dispatch = me == 0 ? d1 : d2;
        std::string e = combine_mismatch(
            comm, p, "dispatches",
            "combine epoch 1: rank 1 names dispatch epoch 3, rank 0 dispatch epoch 2");
        if (!e.empty())
            return e;
        p.dispatch = d1;
        p.row_count = me == 1 ? 4 : 8;
        e = combine_mismatch(
            comm, p, "row_count",
            "combine epoch 2: rank 1 has rows of 4 float (sum), rank 0 of 8 float (sum)");
        if (!e.empty())
            return e;
        CHECK_OK(incmoe_mem_deregister(comm, mp));
        CHECK_OK(incmoe_mem_deregister(comm, mo));
        /* both dispatches are still kept: combine them for real */
        e = run_combine(comm, c1, me, b1, &d1);
        if (e.empty())
            e = run_combine(comm, c2, me, b2, &d2);
        return e;
    }));
}

/* The library keeps at most INCMOE_STREAM_WINDOW dispatches: one more is BUSY, with nothing
   posted, until one is released; a released dispatch is gone for result and release. */
TEST_P(Dc, KeptDispatchesAreBoundedAndReleased)
{
    EXPECT_RANKS(run(2, [&](incmoe_comm_t *comm, int me) -> std::string {
        Case c = make_case(2, {2, 2}, 8, ALL_RANKS, 31);
        Buffers b;
        incmoe_req_t first;
        incmoe_status_t st = post_dispatch(comm, c, me, b, &first);
        CHECK_OK(st);
        incmoe_dispatch_params_t p = dispatch_params(c, me, b, 2, 8, 4);
        incmoe_req_t req;
        for (int k = 1; k < INCMOE_STREAM_WINDOW; k++) {
            CHECK_OK(incmoe_dispatch(comm, &p, &req));
            if (k % 64 == 0)
                CHECK_OK(incmoe_wait(comm, &req));
        }
        CHECK_OK(incmoe_wait(comm, &req));
        st = incmoe_dispatch(comm, &p, &req);
        if (st != INCMOE_ERR_BUSY)
            return std::string("dispatch past the window gave ") + incmoe_strerror(st);
        CHECK_OK(incmoe_dispatch_release(comm, &first));
        if (incmoe_dispatch_release(comm, &first) != INCMOE_ERR_INVALID_ARG)
            return "a released dispatch was released again";
        size_t n;
        if (incmoe_dispatch_result(comm, &first, &n, nullptr, 0) != INCMOE_ERR_INVALID_ARG)
            return "a released dispatch still had a result";
        CHECK_OK(incmoe_dispatch(comm, &p, &req));
        CHECK_OK(incmoe_wait(comm, &req));
        CHECK_OK(incmoe_dispatch_result(comm, &req, &n, nullptr, 0));
        if (n != 4)
            return "the last dispatch received " + std::to_string(n) + " rows";
        for (uint64_t e = 2; e <= req.epoch; e++) {
            incmoe_req_t r = {INCMOE_STREAM_DISPATCH, e};
            CHECK_OK(incmoe_dispatch_release(comm, &r));
        }
        return "";
    }));
}

/* A refused dispatch or combine (incmoe.h, "A refusal"): every rank's fails with
   INCMOE_ERR_INVALID_ARG and the lowest refusing rank's reason, bounded as carried; nothing is
   written, the refused dispatch is kept as failed (released here), a combine that failed so
   keeps its dispatch, and the same communicator then runs both exactly. */
std::string refuse_round(incmoe_comm_t *comm, int me, const std::vector<std::string> &reasons,
                         bool combine, const Case &c)
{
    Buffers b;
    incmoe_req_t d, req;
    incmoe_status_t st;
    if (combine) {
        st = post_dispatch(comm, c, me, b, &d);
        if (st != INCMOE_OK)
            return why(comm, st, "dispatch before the refused combine") + " / " + req_why(comm, &d);
    }
    const bool refuses = !reasons[me].empty();
    if (!refuses && !combine) {
        st = post_dispatch(comm, c, me, b, &req);
    } else if (!combine) {
        incmoe_dispatch_params_t p = {};
        p.field_mask = INCMOE_DISPATCH_PARAM_REFUSED;
        p.refused = reasons[me].c_str();
        st = incmoe_dispatch(comm, &p, &req);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
    } else {
        std::vector<unsigned char> part(std::max<size_t>(1, c.received(me).size() * 32), 0),
            out(c.rows[me] * 32 + 32, kCanary);
        incmoe_mr_t *mp, *mo;
        CHECK_OK(incmoe_mem_register(comm, part.data(), part.size(), &mp));
        CHECK_OK(incmoe_mem_register(comm, out.data(), out.size(), &mo));
        incmoe_combine_params_t p = {};
        if (refuses) {
            p.field_mask = INCMOE_COMBINE_PARAM_REFUSED;
            p.refused = reasons[me].c_str();
        } else {
            p = dc_ref::combine_params(d, mp, mo, 8);
        }
        st = incmoe_combine(comm, &p, &req);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
        for (size_t k = 0; k < out.size(); k++)
            if (out[k] != kCanary)
                return "a refused combine wrote its result";
        incmoe_mem_deregister(comm, mp);
        incmoe_mem_deregister(comm, mo);
    }
    if (st != INCMOE_ERR_INVALID_ARG)
        return why(comm, st, "the refused collective gave") + " (wanted invalid argument)";
    int first = 0;
    while (reasons[first].empty())
        first++;
    const char *name = combine ? "combine" : "dispatch";
    std::string want = std::string(name) + " epoch " + std::to_string(req.epoch) + ": rank " +
                       std::to_string(first) + " refused its " + name +
                       " arguments: " + reasons[first].substr(0, INCMOE_REFUSAL_MAX - 1);
    if (req_why(comm, &req) != want)
        return "reason '" + req_why(comm, &req) + "', wanted '" + want + "'";
    if (!combine) {
        size_t nrecv = 99;
        if (incmoe_dispatch_result(comm, &req, &nrecv, nullptr, 0) != INCMOE_ERR_INVALID_ARG ||
            nrecv != 99)
            return "the refused dispatch's result is not its failure";
        for (size_t k = 0; k < b.recv.size(); k++)
            if (b.recv[k] != kCanary)
                return "a refused dispatch wrote rows";
        CHECK_OK(incmoe_dispatch_release(comm, &req));
        return "";
    }
    /* The failed combine kept its dispatch: it combines now. */
    return run_combine(comm, c, me, b, &d);
}

TEST_P(Dc, ARefusalFailsTheCollectiveOnEveryRankWithItsReason)
{
    const int n = 3;
    EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
        const std::string longer(3 * INCMOE_REFUSAL_MAX, 'r');
        const std::vector<std::vector<std::string>> rounds = {
            {"mask has shape (5, 2), expected (5, 3)", "", ""},
            {"", "", "x is not contiguous"},
            {"", "partials have 4 rows", longer},
            {longer, "", ""}};
        unsigned seed = 900;
        for (bool combine : {false, true}) {
            for (const auto &reasons : rounds) {
                Case c = make_case(n, rows_for(n, 6, 1), 32, RANDOM, seed++);
                std::string e = refuse_round(comm, me, reasons, combine, c);
                if (!e.empty())
                    return std::string(combine ? "combine" : "dispatch") + ": " + e;
                /* The communicator carries on: a whole dispatch and combine, exact. */
                if (!(e = dispatch_then_combine(
                          comm, make_case(n, rows_for(n, 9, 0), 40, MIXED, seed++), me))
                         .empty())
                    return "after a refusal: " + e;
            }
        }
        return "";
    }));
}

/* A set naming a rank the job does not have is refused where it is posted, and every rank
   hears why. */
TEST_P(Dc, ASetNamingNoRankFailsTheJobWithItsReason)
{
    harness::ExpectErrors errors_expected("rank 0 posts a set naming rank 5 of 3: the job fails");
    harness::SharedBoard<int> shared;
    int *others_heard = shared.get(); /* ranks other than 0 that have the job's reason */
    ASSERT_NE(others_heard, nullptr);
    EXPECT_RANKS(run(
        3,
        [&](incmoe_comm_t *comm, int me) -> std::string {
            Case c = make_case(3, rows_for(3, 4, 0), 16, RANDOM, 41);
            if (me == 0)
                c.sets[0][2] |= (uint64_t)1 << 5; /* row 2 names rank 5 of 3 */
            Buffers b;
            incmoe_req_t req;
            /* Everyone is in before rank 0 fails the job: a failure while a rank still joins
               would fail its create instead. */
            incmoe_status_t st = harness::barrier_wait(comm);
            if (st != INCMOE_OK)
                return why(comm, st, "barrier");
            st = post_dispatch(comm, c, me, b, &req);
            char text[300] = "";
            incmoe_comm_error(comm, text, sizeof(text));
            b.forget();
            /* Rank 0 refused at once; had it closed its communicator now, a ring peer could see
               its endpoint fail before the switch's ERROR with the reason arrived (as a loaded
               CI machine once did).  What is tested is the reason reaching everyone, so rank 0
               keeps its communicator until the others have theirs. */
            if (me != 0)
                harness::bump(others_heard);
            else if (!harness::await_at_least(others_heard, 2, 30))
                return "the other ranks' dispatch never ended";
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_INVALID_ARG || strstr(text, "names a rank >= 3") == nullptr)
                return std::string("got ") + incmoe_strerror(st) + " '" + text + "'";
            return "";
        },
        60, false));
}

/* A rank that dies in the middle of a dispatch fails its peers with a reason naming it. */
TEST_P(Dc, ARankThatDiesMidDispatchFailsItsPeers)
{
    harness::ExpectErrors errors_expected("rank 2 exits in the middle of a dispatch");
    harness::SharedBoard<int> shared;
    int *survivors_heard = shared.get(); /* ranks 0 and 1 that have their failure's reason */
    ASSERT_NE(survivors_heard, nullptr);
    EXPECT_RANKS(run(
        3,
        [&](incmoe_comm_t *comm, int me) -> std::string {
            Case c = make_case(3, rows_for(3, 400, 0), 1000, ALL_RANKS, 51);
            Buffers b;
            incmoe_req_t req;
            /* Everyone is in before rank 2 goes. */
            incmoe_status_t st = harness::barrier_wait(comm);
            if (st != INCMOE_OK)
                return why(comm, st, "barrier");
            if (me == 2) {
                /* Post and vanish without a word. */
                st = post_dispatch(comm, c, me, b, &req, false);
                _exit(0);
            }
            st = post_dispatch(comm, c, me, b, &req);
            /* Point to point, rank 2's rows may all have left before it went (nothing for the
               others then waits on it): the next collective it never joins fails instead. */
            if (st == INCMOE_OK)
                st = harness::barrier_wait(comm);
            char text[300] = "";
            incmoe_comm_error(comm, text, sizeof(text));
            b.forget();
            /* A survivor that left at once could fail the other for leaving before the other
               heard of rank 2 (seen once under ASan on a2a): each leaves once both heard. */
            harness::bump(survivors_heard);
            harness::await_at_least(survivors_heard, 2, 30);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_PEER_FAILED || strstr(text, "rank 2") == nullptr)
                return std::string("got ") + incmoe_strerror(st) + " '" + text + "'";
            return "";
        },
        60, false));
}

/* The epoch gap (base/wire.h): a rank that receives nothing still waits for every dispatch's
   plan, so however far it posts ahead it stays inside the switch's window of open epochs. */
TEST_P(Dc, ARankReceivingNothingForTenThousandDispatchesStaysInTheWindow)
{
    EXPECT_RANKS(run(
        3,
        [&](incmoe_comm_t *comm, int me) -> std::string {
            /* Every row goes to rank 1 only: ranks 0 and 2 receive nothing, ever. */
            Case c = make_case(3, {1, 1, 1}, 8, EMPTY, 61);
            for (int s = 0; s < 3; s++)
                c.sets[s][0] = 1u << 1;
            Buffers b;
            incmoe_req_t req;
            incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
            CHECK_OK(st);
            CHECK_OK(incmoe_dispatch_release(comm, &req));
            incmoe_dispatch_params_t p = dispatch_params(c, me, b, 1, 8, c.cap(me));
            std::vector<incmoe_req_t> kept;
            for (int k = 1; k < 10000; k++) {
                incmoe_req_t r;
                CHECK_OK(incmoe_dispatch(comm, &p, &r));
                kept.push_back(r);
                /* Release the oldest half once 512 are kept: never waiting otherwise. */
                if (kept.size() == 512) {
                    for (size_t j = 0; j < 256; j++) {
                        CHECK_OK(incmoe_wait(comm, &kept[j]));
                        CHECK_OK(incmoe_dispatch_release(comm, &kept[j]));
                    }
                    kept.erase(kept.begin(), kept.begin() + 256);
                }
            }
            for (auto &r : kept) {
                CHECK_OK(incmoe_wait(comm, &r));
                size_t n;
                CHECK_OK(incmoe_dispatch_result(comm, &r, &n, nullptr, 0));
                if (n != (me == 1 ? 3u : 0u))
                    return "rank received " + std::to_string(n) + " rows";
                CHECK_OK(incmoe_dispatch_release(comm, &r));
            }
            return "";
        },
        300));
}

std::string variant_name(const ::testing::TestParamInfo<Variant> &info)
{
    static const char *const names[] = {"inc", "ring", "a2a"};
    return std::string(names[info.param.algo]) + (info.param.rndv ? "_rndv" : "_eager");
}

INSTANTIATE_TEST_SUITE_P(Algos, Dc,
                         ::testing::Values(Variant{INCMOE_ALGO_INC, false},
                                           Variant{INCMOE_ALGO_INC, true},
                                           Variant{INCMOE_ALGO_RING, false},
                                           Variant{INCMOE_ALGO_A2A, false}),
                         variant_name);

/* ------------------------------------------------------------------------ */
/* the reduction order, and two credits                                      */

/* A job on a switch with small chunks (4 KiB), so a few dozen rows cross chunk boundaries, and
   2 credits, so chunks wait for them; eager or rendezvous bulk data.  Partials are fp32 values
   whose sum depends on the order of the additions, so a combine must add them in the documented
   order (the other contributors in ascending rank order, the owner's own last) to match the
   reference bitwise, on every algorithm alike. */
harness::SwitchProc g_small_chunks;

class DcTight : public ::testing::TestWithParam<Variant>
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(
            harness::switch_start(&g_small_chunks, {"--chunk-size", "4096", "--credits", "2"}));
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_small_chunks);
    }

    /* body on n ranks of a fresh job; "" from each when all went well. */
    void run(int n, const std::function<std::string(incmoe_comm_t *, int, int)> &body)
    {
        unsigned long long job = harness::unique_job_id();
        Variant v = GetParam();
        auto res = harness::run_ranks(n, [&](int rank) -> std::string {
            setenv("INCMOE_RNDV_THRESH", v.rndv ? "1024" : "0", 1);
            harness::CommOptions opt;
            opt.algo = v.algo;
            return harness::with_comm(g_small_chunks.addr, job, rank, n, opt,
                                      [&](incmoe_comm_t *comm) { return body(comm, rank, n); });
        });
        EXPECT_EQ(harness::failures(res), "") << "N=" << n;
    }
};

uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ a;
    for (uint64_t v : {b, c, d}) {
        h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return h;
}

/* Every rank's rows, sets and partials, drawn alike on every rank from the seed. */
struct DcCase {
    int n;
    std::vector<size_t> T; /* rows of each rank */
    size_t H;              /* floats per row */
    uint64_t seed;

    /* Rank s's row i goes to d: every 7th row nowhere, every 11th everywhere, every 13th to its
       owner alone, the others at random. */
    bool in_set(int s, size_t i, int d) const
    {
        if (i % 7 == 3)
            return false;
        if (i % 11 == 5)
            return true;
        if (i % 13 == 6)
            return d == s;
        return mix(seed, (uint64_t)s, i, (uint64_t)d) % 3 == 0;
    }
    float x(int s, size_t i, size_t e) const
    {
        return (float)(mix(seed + 1, (uint64_t)s, i, e) % 100000) / 977.0f;
    }
    /* d's partial of s's row i */
    float part(int d, int s, size_t i, size_t e) const
    {
        return (float)(mix(seed + 2, (uint64_t)d * 4096 + (uint64_t)s, i, e) % 100000) / 313.0f;
    }
    std::vector<uint64_t> sets(int s) const
    {
        size_t w = INCMOE_SET_WORDS(n);
        std::vector<uint64_t> out(T[s] * w + 1, 0);
        for (size_t i = 0; i < T[s]; i++)
            for (int d = 0; d < n; d++)
                if (in_set(s, i, d))
                    out[i * w + (size_t)d / 64] |= 1ull << (d % 64);
        return out;
    }
    /* (source rank, source row) of each row d receives, in order. */
    std::vector<std::pair<int, size_t>> received(int d) const
    {
        std::vector<std::pair<int, size_t>> out;
        for (int s = 0; s < n; s++)
            for (size_t i = 0; i < T[s]; i++)
                if (in_set(s, i, d))
                    out.push_back({s, i});
        return out;
    }
    /* The combined element: the others' partials in ascending rank order, the owner's last. */
    float combined(int s, size_t i, size_t e) const
    {
        bool any = false;
        float others = 0;
        for (int d = 0; d < n; d++) {
            if (d == s || !in_set(s, i, d))
                continue;
            others = any ? others + part(d, s, i, e) : part(d, s, i, e);
            any = true;
        }
        if (in_set(s, i, s))
            return any ? part(s, s, i, e) + others : part(s, s, i, e);
        return any ? others : 0.0f;
    }
};

/* This rank's part of one dispatch of c and its combine: its buffers (registered), the posts,
   and the checks of what came against c's own reference. */
struct RankDc {
    incmoe_comm_t *comm;
    const DcCase &c;
    int me;
    std::vector<std::pair<int, size_t>> want; /* the rows this rank receives */
    std::vector<float> x, got, part, out;
    std::vector<uint64_t> sets;
    incmoe_mr_t *mr[4] = {};
    incmoe_req_t d = {}, cb = {};

    RankDc(incmoe_comm_t *cm, const DcCase &cs, int rank, size_t capacity)
        : comm(cm), c(cs), me(rank), want(cs.received(rank)), x(cs.T[rank] * cs.H + 1),
          got(capacity * cs.H + 1), part(want.size() * cs.H + 1), out(cs.T[rank] * cs.H + 1),
          sets(cs.sets(rank))
    {
        for (size_t i = 0; i < c.T[me]; i++)
            for (size_t e = 0; e < c.H; e++)
                x[i * c.H + e] = c.x(me, i, e);
        std::vector<float> *bufs[4] = {&x, &got, &part, &out};
        for (int k = 0; k < 4; k++)
            incmoe_mem_register(comm, bufs[k]->data(), bufs[k]->size() * 4, &mr[k]);
    }
    ~RankDc()
    {
        for (incmoe_mr_t *m : mr)
            if (m != nullptr)
                incmoe_mem_deregister(comm, m);
    }
    incmoe_status_t dispatch(size_t capacity)
    {
        incmoe_dispatch_params_t dp = {};
        dp.send_mr = mr[0];
        dp.nrows = c.T[me];
        dp.row_bytes = c.H * sizeof(float);
        dp.sets = sets.data();
        dp.recv_mr = mr[1];
        dp.capacity = capacity;
        return incmoe_dispatch(comm, &dp, &d);
    }
    /* The dispatch completed: its rows and sources as the reference says; the partials this
       rank gives are written. */
    std::string check_dispatch()
    {
        size_t R = 0;
        std::vector<uint32_t> src(2 * want.size() + 2);
        incmoe_status_t st = incmoe_dispatch_result(comm, &d, &R, src.data(), want.size());
        if (st != INCMOE_OK)
            return std::string("dispatch_result: ") + incmoe_strerror(st);
        if (R != want.size())
            return "received " + std::to_string(R) + " rows, want " + std::to_string(want.size());
        for (size_t k = 0; k < R; k++) {
            auto [s, i] = want[k];
            if (src[2 * k] != (uint32_t)s || src[2 * k + 1] != (uint32_t)i)
                return "source of row " + std::to_string(k) + " is (" + std::to_string(src[2 * k]) +
                       ", " + std::to_string(src[2 * k + 1]) + "), want (" + std::to_string(s) +
                       ", " + std::to_string(i) + ")";
            for (size_t e = 0; e < c.H; e++) {
                float w = c.x(s, i, e);
                if (memcmp(&got[k * c.H + e], &w, 4) != 0)
                    return "row " + std::to_string(k) + " (" + std::to_string(s) + ", " +
                           std::to_string(i) + ") element " + std::to_string(e) + " differs";
                part[k * c.H + e] = c.part(me, s, i, e);
            }
        }
        return "";
    }
    incmoe_status_t combine()
    {
        incmoe_combine_params_t cp = {};
        cp.dispatch = d;
        cp.send_mr = mr[2];
        cp.recv_mr = mr[3];
        cp.row_count = c.H;
        cp.dtype = INCMOE_FLOAT32;
        cp.op = INCMOE_SUM;
        return incmoe_combine(comm, &cp, &cb);
    }
    std::string check_combine()
    {
        for (size_t i = 0; i < c.T[me]; i++)
            for (size_t e = 0; e < c.H; e++) {
                float w = c.combined(me, i, e);
                if (memcmp(&out[i * c.H + e], &w, 4) != 0)
                    return "combined row " + std::to_string(i) + " element " + std::to_string(e) +
                           ": " + std::to_string(out[i * c.H + e]) + ", want " + std::to_string(w);
            }
        return "";
    }
};

/* One dispatch and its combine of c on this rank, checked against c's own reference. */
std::string dispatch_and_combine(incmoe_comm_t *comm, int me, const DcCase &c, size_t capacity)
{
    RankDc r(comm, c, me, capacity);
    incmoe_status_t st = r.dispatch(capacity);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &r.d);
    if (st != INCMOE_OK)
        return std::string("dispatch: ") + incmoe_strerror(st);
    std::string e = r.check_dispatch();
    if (!e.empty())
        return e;
    if ((st = r.combine()) == INCMOE_OK)
        st = incmoe_wait(comm, &r.cb);
    if (st != INCMOE_OK)
        return std::string("combine: ") + incmoe_strerror(st);
    return r.check_combine();
}

/* Random sets with empty, everyone's and own-only rows, some ranks without rows, rows across
   chunk boundaries (point to point, rows larger than a chunk too), plans long enough to go
   rendezvous: every received row, its source and every combined element exact, in the
   documented order (others ascending, the owner's last): the switch's sums and the point-to-point
   ones are the same bits. */
TEST_P(DcTight, RandomSetsAreExactAgainstTheReference)
{
    /* In the network a row and its set must fit a chunk; point to point a row may not. */
    const size_t big = GetParam().algo == INCMOE_ALGO_INC ? 1000 : 1100;
    for (int n : {2, 3, 5, 8}) {
        for (size_t H : {size_t(24), big}) {
            DcCase c{n, {}, H, 1000u + (uint64_t)n * 7 + H};
            for (int r = 0; r < n; r++)
                c.T.push_back(
                    r == 1 ? 0 : (size_t)(mix(c.seed, 9, (uint64_t)r, 0) % (H < 100 ? 900 : 90)));
            run(n, [&](incmoe_comm_t *comm, int me, int) {
                std::string e = dispatch_and_combine(comm, me, c, c.received(me).size() + 3);
                return e.empty() ? e : "H=" + std::to_string(H) + ": " + e;
            });
        }
    }
}

/* Many dispatches posted before any is waited on, then their combines likewise: plans and
   rows of collectives a rank has not started yet wait, and the combines' credits carry a
   whole window of pieces. */
TEST_P(DcTight, ManyInFlightAreExact)
{
    const int n = 4, K = 12;
    run(n, [&](incmoe_comm_t *comm, int me, int) -> std::string {
        std::vector<DcCase> cs;
        for (int k = 0; k < K; k++) {
            DcCase c{n, {}, 300, 500u + (uint64_t)k};
            for (int r = 0; r < n; r++)
                c.T.push_back((size_t)(mix(c.seed, 3, (uint64_t)r, 0) % 60));
            cs.push_back(c);
        }
        std::vector<std::unique_ptr<RankDc>> rs;
        for (int k = 0; k < K; k++) {
            size_t R = cs[k].received(me).size();
            rs.emplace_back(new RankDc(comm, cs[k], me, R));
            if (rs[k]->dispatch(R) != INCMOE_OK)
                return "dispatch " + std::to_string(k);
        }
        std::string e;
        for (int k = 0; k < K && e.empty(); k++)
            if (incmoe_wait(comm, &rs[k]->d) != INCMOE_OK || !(e = rs[k]->check_dispatch()).empty())
                e = "dispatch " + std::to_string(k) + ": " + e;
        for (int k = 0; k < K && e.empty(); k++)
            if (rs[k]->combine() != INCMOE_OK)
                e = "combine " + std::to_string(k);
        for (int k = 0; k < K && e.empty(); k++)
            if (incmoe_wait(comm, &rs[k]->cb) != INCMOE_OK || !(e = rs[k]->check_combine()).empty())
                e = "combine " + std::to_string(k) + ": " + e;
        return e;
    });
}

INSTANTIATE_TEST_SUITE_P(Algos, DcTight, ::testing::ValuesIn(all_variants()), variant_name);

/* ------------------------------------------------------------------------ */
/* malformed messages                                                        */

harness::SwitchProc g_raw_switch;

class DcRaw : public ::testing::Test
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(harness::switch_start(&g_raw_switch));
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_raw_switch);
    }
};

/* A raw rank 1's POST of a dispatch: rows rows of 16 bytes, count[d] of them for each d. */
void raw_post(RawClient &c, uint64_t job, uint32_t rows, std::vector<uint32_t> count,
              uint32_t nranks = 2)
{
    inc_wire_dc_post p = {};
    p.rows = rows;
    p.row_bytes = 16;
    p.capacity = 10;
    p.nranks = nranks;
    std::string payload((const char *)&p, sizeof(p));
    payload.append((const char *)count.data(), 4 * count.size());
    inc_wire_hdr h = errtest::raw_hdr(WIRE_MSG_POST, job, INCMOE_STREAM_DISPATCH);
    h.total = rows;
    h.sig = inc_wire_signature(INCMOE_STREAM_DISPATCH, INCMOE_UINT8, INCMOE_SUM,
                               std::vector<uint64_t>(2, 0).data(), 2);
    h.length = payload.size();
    c.send(h, payload.data(), payload.size());
}

/* Its chunk 0: the sets of its rows, then the rows that go out (16 bytes each). */
void raw_data(RawClient &c, uint64_t job, std::vector<uint64_t> sets, size_t rows_out)
{
    std::string payload((const char *)sets.data(), 8 * sets.size());
    payload.append(16 * rows_out, 'r');
    inc_wire_hdr h = errtest::raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_DISPATCH);
    h.root = 1;
    h.total = sets.size();
    h.length = payload.size();
    c.send(h, payload.data(), payload.size());
}

/* A real rank 0 dispatches two rows to both ranks next to a raw rank 1 that misbehaves:
   rank 0 fails with a reason that says what, and the switch serves the next job. */
void expect_raw_breaks_dispatch(incmoe_status_t want, const std::string &what,
                                const std::function<void(RawClient &, uint64_t job)> &misbehave)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            if (rank == 1)
                return errtest::raw_rank_misbehaves(g_raw_switch.addr, job, misbehave);
            incmoe_comm_t *comm;
            incmoe_status_t st = harness::comm_create(g_raw_switch.addr, job, 0, 2, &comm);
            if (st != INCMOE_OK)
                return std::string("create: ") + incmoe_strerror(st);
            Case c = make_case(2, {2, 0}, 16, ALL_RANKS, 71);
            c.capacity[0] = 10; /* room for what the raw rank says it sends */
            Buffers b;
            incmoe_req_t req;
            st = post_dispatch(comm, c, 0, b, &req);
            char text[300] = "";
            incmoe_comm_error(comm, text, sizeof(text));
            b.forget();
            incmoe_comm_destroy(comm);
            if (st != want || strstr(text, what.c_str()) == nullptr)
                return std::string("got ") + incmoe_strerror(st) + " '" + text + "', want " +
                       incmoe_strerror(want) + " '" + what + "'";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "") << what;
    /* The switch carries on: a good job of two real ranks right after. */
    unsigned long long next = harness::unique_job_id();
    res = harness::run_ranks(2, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = harness::comm_create(g_raw_switch.addr, next, rank, 2, &comm);
        if (st != INCMOE_OK)
            return std::string("create after: ") + incmoe_strerror(st);
        std::string e = dispatch_then_combine(comm, make_case(2, {20, 30}, 200, RANDOM, 72), rank);
        st = incmoe_comm_destroy(comm);
        return e.empty() && st != INCMOE_OK ? std::string("destroy: ") + incmoe_strerror(st) : e;
    });
    EXPECT_EQ(harness::failures(res), "") << "the job after '" << what << "'";
}

TEST_F(DcRaw, MalformedDispatchMessagesAreRefusedWithAReason)
{
    harness::ExpectErrors errors_expected("a raw client sends malformed dispatch messages");
    expect_raw_breaks_dispatch(INCMOE_ERR_PROTOCOL, "plan fields say 3 ranks",
                               [](RawClient &c, uint64_t job) {
                                   raw_post(c, job, 0, {0, 0}, 3);
                               });
    expect_raw_breaks_dispatch(INCMOE_ERR_PROTOCOL, "before the switch sent an OK plan",
                               [](RawClient &c, uint64_t job) { raw_data(c, job, {1}, 1); });
    expect_raw_breaks_dispatch(INCMOE_ERR_PROTOCOL, "naming a rank >= 2",
                               [](RawClient &c, uint64_t job) {
                                   raw_post(c, job, 1, {1, 0});
                                   c.wait_for(WIRE_MSG_PLAN, nullptr, 5000);
                                   raw_data(c, job, {1 | 1 << 7}, 1);
                               });
    expect_raw_breaks_dispatch(INCMOE_ERR_MISMATCH, "more rows than the 1 of its plan",
                               [](RawClient &c, uint64_t job) {
                                   raw_post(c, job, 2, {1, 0});
                                   c.wait_for(WIRE_MSG_PLAN, nullptr, 5000);
                                   raw_data(c, job, {1, 1}, 2);
                               });
    expect_raw_breaks_dispatch(INCMOE_ERR_PROTOCOL, "ranks never send",
                               [](RawClient &c, uint64_t job) {
                                   inc_wire_hdr h;
                                   inc_wire_hdr_init(&h, WIRE_MSG_PLAN, job);
                                   h.rank = 1;
                                   h.stream = INCMOE_STREAM_DISPATCH;
                                   h.epoch = 1;
                                   std::string plan(sizeof(inc_wire_dc_plan), '\0');
                                   h.length = plan.size();
                                   c.send(h, plan.data(), plan.size());
                               });
    expect_raw_breaks_dispatch(INCMOE_ERR_PROTOCOL, "cut piece", [](RawClient &c, uint64_t job) {
        inc_wire_dc_post p = {};
        p.rows = 1;
        p.row_bytes = 16;
        p.capacity = 10;
        p.nranks = 2;
        std::string payload((const char *)&p, sizeof(p));
        uint32_t count[2] = {1, 0}; /* rank 0 waits for this row */
        payload.append((const char *)count, sizeof(count));
        payload.append(10, 'x'); /* not even a piece's header */
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_SMALL, job);
        h.rank = 1;
        h.stream = INCMOE_STREAM_DISPATCH;
        h.epoch = 1;
        h.total = 1;
        h.sig = inc_wire_signature(INCMOE_STREAM_DISPATCH, INCMOE_UINT8, INCMOE_SUM,
                                   std::vector<uint64_t>(2, 0).data(), 2);
        h.length = payload.size();
        c.send(h, payload.data(), payload.size());
    });
}

} // namespace
