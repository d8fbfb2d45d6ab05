/*
 * test_dispatch.cc - dispatch and combine (incmoe.h, "Dispatch and combine"):
 * the plan's shared verdict as a pure function, and the collectives across
 * real processes on every algorithm that has them.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
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
    for (incmoe_algo_t algo : {INCMOE_ALGO_INC}) {
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

/* ------------------------------------------------------------------------ */
/* point to point (ring and a2a)                                             */

/* A job on a switch with small chunks (4 KiB), so a few dozen rows cross chunk boundaries, and
   2 credits, so a combine's pieces wait for them; eager or rendezvous bulk data. */
struct PeerVariant {
    incmoe_algo_t algo;
    bool rndv;
};

harness::SwitchProc g_small_chunks;

class PeerDc : public ::testing::TestWithParam<PeerVariant>
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
        PeerVariant v = GetParam();
        auto res = harness::run_ranks(n, [&](int rank) -> std::string {
            setenv("INCMOE_RNDV_THRESH", v.rndv ? "1024" : "0", 1);
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = g_small_chunks.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            p.algo = v.algo;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return std::string("create: ") + incmoe_strerror(st);
            std::string err = body(comm, rank, n);
            st = incmoe_comm_destroy(comm);
            if (err.empty() && st != INCMOE_OK)
                err = std::string("destroy: ") + incmoe_strerror(st);
            return err;
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
   chunk boundaries and rows larger than a chunk, plans long enough to go rendezvous: every
   received row, its source and every combined element exact, in the documented order (others
   ascending, the owner's last). */
TEST_P(PeerDc, RandomSetsAreExactAgainstTheReference)
{
    for (int n : {2, 3, 5, 8}) {
        for (size_t H : {size_t(24), size_t(1100)}) {
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

/* Rank 0 cannot take what it would receive: every rank fails the dispatch with the same
   reason, nothing is written, rank 0 learns the rows it would have received, and the next
   dispatch of the same communicator (with room) succeeds. */
TEST_P(PeerDc, CapacityExceededFailsEveryRankAndTheNextOneWorks)
{
    DcCase c{4, {30, 20, 0, 41}, 16, 77};
    run(4, [&](incmoe_comm_t *comm, int me, int) -> std::string {
        const size_t need = c.received(me).size();
        RankDc r(comm, c, me, need);
        std::fill(r.got.begin(), r.got.end(), -7.0f);
        incmoe_req_t &req = r.d;
        incmoe_status_t st = r.dispatch(me == 0 ? need - 1 : need);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
        if (st != INCMOE_ERR_NO_MEMORY)
            return std::string("dispatch gave ") + incmoe_strerror(st);
        char why[256];
        incmoe_req_error(comm, &req, why, sizeof(why));
        /* The same reason on every rank, naming rank 0 and what rank 0 counted. */
        const size_t need0 = c.received(0).size();
        std::string want = "dispatch epoch 1: rank 0 would receive " + std::to_string(need0) +
                           " rows, capacity " + std::to_string(need0 - 1);
        if (std::string(why) != want)
            return "reason: '" + std::string(why) + "', want '" + want + "'";
        size_t R = 0;
        if (incmoe_dispatch_result(comm, &req, &R, nullptr, 0) != INCMOE_ERR_NO_MEMORY || R != need)
            return "dispatch_result gave R=" + std::to_string(R);
        for (float v : r.got)
            if (v != -7.0f)
                return "a failed dispatch wrote into the receive buffer";
        incmoe_dispatch_release(comm, &req);
        return dispatch_and_combine(comm, me, c, need);
    });
}

/* Many dispatches posted before any is waited on, then their combines likewise: plans and
   rows of collectives a rank has not started yet wait, and the combines' credits carry a
   whole window of pieces. */
TEST_P(PeerDc, ManyInFlightAreExact)
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

/* Rank 2 receives nothing in 10,000 dispatches: it still completes each only after every rank's
   plan came, so it never runs a window ahead, and every row rank 1 gets is rank 0's. */
TEST_P(PeerDc, ARankThatReceivesNothingKeepsInStep)
{
    if (GetParam().rndv)
        GTEST_SKIP() << "one row of 4 bytes never goes rendezvous";
    const int n = 3, K = 10000, depth = 64;
    run(n, [&](incmoe_comm_t *comm, int me, int) -> std::string {
        std::vector<uint32_t> x(K), got(K, 0);
        for (int k = 0; k < K; k++)
            x[k] = (uint32_t)k * 7 + 1;
        incmoe_mr_t *xm, *gm;
        incmoe_mem_register(comm, x.data(), x.size() * 4, &xm);
        incmoe_mem_register(comm, got.data(), got.size() * 4, &gm);
        uint64_t to_rank1 = 1u << 1;
        std::vector<incmoe_req_t> reqs(K);
        for (int k = 0; k < K + depth; k++) {
            if (k >= depth) {
                incmoe_req_t *r = &reqs[k - depth];
                incmoe_status_t st = incmoe_wait(comm, r);
                if (st == INCMOE_OK)
                    st = incmoe_dispatch_release(comm, r);
                if (st != INCMOE_OK)
                    return "dispatch " + std::to_string(k - depth) + ": " + incmoe_strerror(st);
            }
            if (k >= K)
                continue;
            incmoe_dispatch_params_t dp = {};
            dp.send_mr = xm;
            dp.send_offset = (size_t)k * 4;
            dp.nrows = me == 0 ? 1 : 0;
            dp.row_bytes = 4;
            dp.sets = &to_rank1;
            dp.recv_mr = gm;
            dp.recv_offset = (size_t)k * 4;
            dp.capacity = me == 1 ? 1 : 0;
            if (incmoe_dispatch(comm, &dp, &reqs[k]) != INCMOE_OK)
                return "post " + std::to_string(k);
        }
        for (int k = 0; me == 1 && k < K; k++)
            if (got[k] != x[k])
                return "dispatch " + std::to_string(k) + " brought " + std::to_string(got[k]);
        return "";
    });
}

INSTANTIATE_TEST_SUITE_P(
    Algo, PeerDc,
    ::testing::Values(PeerVariant{INCMOE_ALGO_RING, false}, PeerVariant{INCMOE_ALGO_A2A, false},
                      PeerVariant{INCMOE_ALGO_RING, true}, PeerVariant{INCMOE_ALGO_A2A, true}),
    [](const ::testing::TestParamInfo<PeerVariant> &info) {
        return std::string(info.param.algo == INCMOE_ALGO_RING ? "ring" : "a2a") +
               (info.param.rndv ? "_rndv" : "_eager");
    });

} // namespace
