/*
 * test_ll.cc - the low-latency form of dispatch and combine (incmoe.h, "The
 * low-latency form") across real processes, on every algorithm: each rank's
 * regions, counts, source pairs and combined rows against a reference folded
 * here from the case alone (by source and by expert); bytes outside the
 * regions' rows, before and after the receive range, stay untouched; the
 * refusals and disagreements fail every rank alike with one reason and the
 * communicator carries on; a dead rank fails the others; and in fp32 the
 * results are bitwise those of the bulk form on the same inputs.
 */
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dc_ref.h"
#include "exact_int.h"
#include "harness.h"

extern "C" {
#include "incmoe/incmoe.h"
}

namespace
{

using harness::why;
using namespace dc_ref;

/* ------------------------------------------------------------------------ */
/* the case and its reference                                                */

/* One low-latency dispatch and combine, the same in every process (made from a seed). */
struct LlCase : dc_ref::Sets { /* by expert, the sets are made from experts */
    size_t row_bytes = 24;
    size_t max_tokens = 4;
    bool by_expert = false;
    int topk = 0, num_experts = 0;
    std::vector<int32_t> expert_rank;          /* [e] */
    std::vector<std::vector<int32_t>> experts; /* [s][i * topk + j] */

    /* The experts of rank d, ascending: its local experts. */
    std::vector<int> locals(int d) const
    {
        std::vector<int> out;
        for (int e = 0; e < num_experts; e++)
            if (expert_rank[e] == d)
                out.push_back(e);
        return out;
    }
    /* Does row (s, i) name expert e? */
    bool names(int s, size_t i, int e) const
    {
        for (int j = 0; j < topk; j++)
            if (experts[s][i * topk + j] == e)
                return true;
        return false;
    }
    size_t nregions(int d) const
    {
        return by_expert ? locals(d).size() : (size_t)n;
    }
    size_t region_rows() const
    {
        return by_expert ? (size_t)n * max_tokens : max_tokens;
    }
    /* Region j of rank d: the (source rank, source row) of its rows, in order. */
    std::vector<std::pair<uint32_t, uint32_t>> region(int d, size_t j) const
    {
        std::vector<std::pair<uint32_t, uint32_t>> out;
        for (int s = 0; s < n; s++) {
            if (!by_expert && s != (int)j)
                continue;
            for (size_t i = 0; i < rows[s]; i++)
                if (by_expert ? names(s, i, locals(d)[j]) : in_set(s, i, d))
                    out.push_back({(uint32_t)s, (uint32_t)i});
        }
        return out;
    }
};

/* Rank d's partial element e of row i of rank s for expert x (by source x = -1), an exact small
   integer: sums of a few stay exact in every type, products are of +-1. */
long long partial_val(const LlCase &c, int d, int s, size_t i, int x, size_t e)
{
    return dc_ref::small_exact(
        (unsigned)(d * 1000003 + s * 7919 + (int)i * 131 + (int)e * 17 + x * 31 + (int)c.seed), c,
        5);
}

/* What owner s gets for row i: op over every partial given for it (by source, one per rank
   of its set; by expert, one per local expert each holder's row names), as exact integers;
   zeros when none. */
std::vector<unsigned char> combined_row(const LlCase &c, int s, size_t i)
{
    return dc_ref::exact_row(c, [&](size_t e) {
        std::vector<long long> vals;
        for (int d = 0; d < c.n; d++) {
            if (!c.in_set(s, i, d))
                continue;
            if (!c.by_expert)
                vals.push_back(partial_val(c, d, s, i, -1, e));
            for (int x : c.by_expert ? c.locals(d) : std::vector<int>())
                if (c.names(s, i, x))
                    vals.push_back(partial_val(c, d, s, i, x, e));
        }
        return vals;
    });
}

/* A case of n ranks, rows[r] rows each, by source, sets of the given shape. */
LlCase make_case(int n, std::vector<size_t> rows, size_t max_tokens, SetShape shape, unsigned seed)
{
    LlCase c;
    c.n = n;
    c.rows = rows;
    c.max_tokens = max_tokens;
    c.seed = seed;
    std::mt19937_64 rng(seed); /* MIXED: one of the first four shapes */
    draw_sets(c, shape, rng, 4, [&] { return rng() % 5 < 2; });
    return c;
}

/* A case by expert: num_experts spread over the ranks (some ranks may hold none), topk ids a
   row, some -1 and some repeated; the sets are the ranks of the experts. */
LlCase make_expert_case(int n, std::vector<size_t> rows, size_t max_tokens, int num_experts,
                        int topk, unsigned seed)
{
    LlCase c = make_case(n, rows, max_tokens, EMPTY, seed);
    c.by_expert = true;
    c.num_experts = num_experts;
    c.topk = topk;
    std::mt19937_64 rng(seed * 7 + 1);
    for (int e = 0; e < num_experts; e++)
        c.expert_rank.push_back((int32_t)(rng() % n));
    for (int s = 0; s < n; s++) {
        std::vector<int32_t> ids(rows[s] * topk);
        for (size_t i = 0; i < rows[s]; i++) {
            for (int j = 0; j < topk; j++) {
                int32_t e = rng() % 6 == 0 ? -1 : (int32_t)(rng() % num_experts);
                ids[i * topk + j] = e;
                if (e >= 0)
                    c.sets[s][i * c.words() + (size_t)c.expert_rank[e] / 64] |=
                        (uint64_t)1 << (c.expert_rank[e] % 64);
            }
        }
        c.experts.push_back(ids);
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* one rank's run                                                            */

const size_t kGuardRows = 2; /* canary rows before and after the receive range */

/* The dispatch's params of rank me for case c over b (registered here); nrows may differ
   from the case's (over max_tokens). */
incmoe_status_t prepare(incmoe_comm_t *comm, const LlCase &c, int me, Buffers &b,
                        incmoe_dispatch_params_t *p, size_t nrows)
{
    const size_t rb = c.row_bytes;
    b.comm = comm;
    b.capacity = c.nregions(me) * c.region_rows();
    b.send.assign(std::max<size_t>(1, nrows * rb), 0);
    for (size_t i = 0; i < nrows; i++)
        for (size_t j = 0; j < rb; j++)
            b.send[i * rb + j] = row_byte(c, me, i, j);
    b.recv.assign((b.capacity + 2 * kGuardRows) * rb, kCanary);
    incmoe_status_t st = incmoe_mem_register(comm, b.send.data(), b.send.size(), &b.m_send);
    if (st == INCMOE_OK)
        st = incmoe_mem_register(comm, b.recv.data(), b.recv.size(), &b.m_recv);
    *p = incmoe_dispatch_params_t{};
    p->field_mask = INCMOE_DISPATCH_PARAM_LOW_LATENCY;
    p->send_mr = b.m_send;
    p->nrows = nrows;
    p->row_bytes = rb;
    p->recv_mr = b.m_recv;
    p->recv_offset = kGuardRows * rb;
    p->capacity = b.capacity;
    p->max_tokens = c.max_tokens;
    if (c.by_expert) {
        p->field_mask |= INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT;
        p->experts = c.experts[me].empty() ? nullptr : c.experts[me].data();
        p->topk = c.topk;
        p->num_experts = c.num_experts;
        p->expert_rank = c.expert_rank.data();
    } else {
        p->sets = c.sets[me].empty() ? nullptr : c.sets[me].data();
    }
    return st;
}

incmoe_status_t post_dispatch(incmoe_comm_t *comm, const LlCase &c, int me, Buffers &b,
                              incmoe_req_t *req, bool wait = true)
{
    incmoe_dispatch_params_t p;
    incmoe_status_t st = prepare(comm, c, me, b, &p, c.rows[me]);
    if (st == INCMOE_OK)
        st = incmoe_dispatch(comm, &p, req);
    return st != INCMOE_OK || !wait ? st : incmoe_wait(comm, req);
}

/* Every byte of the receive buffer outside the filled rows is still the canary. */
std::string check_untouched(const LlCase &c, int me, const Buffers &b)
{
    const size_t rb = c.row_bytes;
    std::vector<bool> filled(b.recv.size() / rb, false);
    for (size_t j = 0; j < c.nregions(me); j++)
        for (size_t k = 0; k < c.region(me, j).size(); k++)
            filled[kGuardRows + j * c.region_rows() + k] = true;
    for (size_t at = 0; at < b.recv.size(); at++)
        if (!filled[at / rb] && b.recv[at] != kCanary)
            return "byte " + std::to_string(at) +
                   " of the receive buffer outside every region's "
                   "rows was written";
    return "";
}

/* The regions, their counts, the source pairs and the untouched bytes against the case. */
std::string check_dispatch(incmoe_comm_t *comm, const LlCase &c, int me, const Buffers &b,
                           const incmoe_req_t *req)
{
    std::vector<std::pair<uint32_t, uint32_t>> all;
    std::vector<uint32_t> counts(c.nregions(me) + 1, 7777);
    size_t nregions = 0, nrecv = 0;
    CHECK_OK(incmoe_dispatch_counts(comm, req, counts.data(), counts.size(), &nregions));
    if (nregions != c.nregions(me) || counts[nregions] != 7777)
        return "dispatch_counts gave " + std::to_string(nregions) + " regions, want " +
               std::to_string(c.nregions(me));
    const size_t rb = c.row_bytes;
    for (size_t j = 0; j < nregions; j++) {
        auto want = c.region(me, j);
        if (counts[j] != want.size())
            return "region " + std::to_string(j) + " has " + std::to_string(counts[j]) +
                   " rows, want " + std::to_string(want.size());
        for (size_t k = 0; k < want.size(); k++) {
            const unsigned char *row = &b.recv[(kGuardRows + j * c.region_rows() + k) * rb];
            for (size_t x = 0; x < rb; x++)
                if (row[x] != row_byte(c, want[k].first, want[k].second, x))
                    return "region " + std::to_string(j) + " row " + std::to_string(k) + " (rank " +
                           std::to_string(want[k].first) + " row " +
                           std::to_string(want[k].second) + ") differs";
        }
        all.insert(all.end(), want.begin(), want.end());
    }
    std::vector<uint32_t> src(2 * all.size() + 2, 7777);
    CHECK_OK(incmoe_dispatch_result(comm, req, &nrecv, src.data(), all.size() + 1));
    if (nrecv != all.size() || src[2 * all.size()] != 7777)
        return "R " + std::to_string(nrecv) + ", want " + std::to_string(all.size());
    for (size_t k = 0; k < all.size(); k++)
        if (src[2 * k] != all[k].first || src[2 * k + 1] != all[k].second)
            return "source pair " + std::to_string(k) + " differs";
    return check_untouched(c, me, b);
}

/* Combine the dispatch with this rank's partials (in the dispatch's layout) and check each
   result row and the guard rows after them. */
std::string run_combine(incmoe_comm_t *comm, const LlCase &c, int me, Buffers &b,
                        const incmoe_req_t *dispatch)
{
    const size_t esize = incmoe_dtype_size(c.dtype), pb = c.row_count * esize;
    b.part.assign(std::max<size_t>(1, b.capacity * pb), 0xEE);
    for (size_t j = 0; j < c.nregions(me); j++) {
        auto got = c.region(me, j);
        int x = c.by_expert ? c.locals(me)[j] : -1;
        for (size_t k = 0; k < got.size(); k++)
            for (size_t e = 0; e < c.row_count; e++)
                exact_int::put(c.dtype, partial_val(c, me, (int)got[k].first, got[k].second, x, e),
                               &b.part[(j * c.region_rows() + k) * pb + e * esize]);
    }
    return combine_and_check(comm, c, me, b, dispatch, kGuardRows,
                             [&](size_t i) { return combined_row(c, me, i); });
}

/* ------------------------------------------------------------------------ */
/* across processes                                                          */

harness::SwitchProc g_switch;
/* Small chunks and few credits: a message of a few rows may take several credits. */
const char *const kChunk = "4096";
const char *const kCredits = "8";

/* An algorithm, and whether payloads past 512 bytes go rendezvous (else eager). */
class Ll : public ::testing::TestWithParam<Variant>
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(
            harness::switch_start(&g_switch, {"--chunk-size", kChunk, "--credits", kCredits}))
            << "could not start incmoe-switchd";
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_switch);
    }

    /* body on n ranks of a fresh job; expect_destroy_ok false: the body destroys comm. */
    std::vector<std::string> run(int n,
                                 const std::function<std::string(incmoe_comm_t *, int)> &body,
                                 int timeout_s = 120, bool expect_destroy_ok = true,
                                 int comm_timeout_ms = 0)
    {
        unsigned long long job = harness::unique_job_id();
        return harness::run_ranks(
            n,
            [&](int rank) -> std::string {
                setenv("INCMOE_RNDV_THRESH", GetParam().rndv ? "512" : "0", 1);
                harness::CommOptions opt;
                opt.algo = GetParam().algo;
                opt.timeout_ms = comm_timeout_ms;
                return harness::with_comm(
                    g_switch.addr, job, rank, n, opt,
                    [&](incmoe_comm_t *comm) { return body(comm, rank); }, !expect_destroy_ok);
            },
            timeout_s);
    }
};

#define EXPECT_RANKS(res) EXPECT_EQ(harness::failures(res), "")

/* T of each rank: all t, or every third rank none and the others up to t. */
std::vector<size_t> rows_for(int n, size_t t, bool some_empty)
{
    std::vector<size_t> rows(n, t);
    for (int r = 0; some_empty && r < n; r++)
        rows[r] = r % 3 == 1 ? 0 : t - (size_t)r % 2;
    return rows;
}

TEST_P(Ll, RandomSetsOnOneToEightRanksMatchTheFold)
{
    for (int n = 1; n <= 8; n++) {
        EXPECT_RANKS(run(n,
                         [&](incmoe_comm_t *comm, int me) -> std::string {
                             unsigned seed = 100;
                             for (bool some_empty : {false, true}) {
                                 for (size_t t : {(size_t)1, (size_t)5}) {
                                     LlCase c = make_case(n, rows_for(n, t, some_empty), 5, RANDOM,
                                                          seed++);
                                     std::string e = dispatch_then_combine(comm, c, me);
                                     if (!e.empty())
                                         return "T " + std::to_string(t) + ": " + e;
                                 }
                             }
                             return "";
                         }))
            << n << " ranks";
    }
}

TEST_P(Ll, EmptyAllRanksOwnOnlyAndMixedSets)
{
    for (int n : {2, 3, 5}) {
        EXPECT_RANKS(run(n,
                         [&](incmoe_comm_t *comm, int me) -> std::string {
                             unsigned seed = 7;
                             for (SetShape sh : {EMPTY, ALL_RANKS, OWN_ONLY, MIXED}) {
                                 LlCase c = make_case(n, rows_for(n, 6, true), 6, sh, seed++);
                                 std::string e = dispatch_then_combine(comm, c, me);
                                 if (!e.empty())
                                     return "shape " + std::to_string(sh) + ": " + e;
                             }
                             return "";
                         }))
            << n << " ranks";
    }
}

/* Every rank at max_tokens works; a rank over it fails the dispatch on every rank alike with
   INCMOE_ERR_NO_MEMORY and one reason, writes nothing, and the communicator carries on. */
TEST_P(Ll, AtMaxTokensWorksAndOverItFailsEveryRankAlike)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        LlCase c = make_case(3, {4, 4, 4}, 4, ALL_RANKS, 11);
        std::string e = dispatch_then_combine(comm, c, me);
        if (!e.empty())
            return "at max_tokens: " + e;
        Buffers b;
        incmoe_dispatch_params_t p;
        CHECK_OK(prepare(comm, c, me, b, &p, me == 1 ? 5 : 4));
        incmoe_req_t req;
        CHECK_OK(incmoe_dispatch(comm, &p, &req));
        incmoe_status_t st = incmoe_wait(comm, &req);
        std::string want = "dispatch epoch 2: rank 1 has 5 rows, max_tokens 4";
        if (st != INCMOE_ERR_NO_MEMORY || req_why(comm, &req) != want)
            return std::string("over max_tokens: ") + incmoe_strerror(st) + " '" +
                   req_why(comm, &req) + "', want '" + want + "'";
        for (size_t at = 0; at < b.recv.size(); at++)
            if (b.recv[at] != kCanary)
                return "the failed dispatch wrote byte " + std::to_string(at);
        CHECK_OK(incmoe_dispatch_release(comm, &req));
        return dispatch_then_combine(comm, make_case(3, {4, 0, 3}, 4, MIXED, 12), me);
    }));
}

/* A message beyond the credits a rank has per stream (8 x 4096 bytes here) is refused the same
   way: every rank fails with INCMOE_ERR_NO_MEMORY and the refusing rank's reason. */
TEST_P(Ll, AMessageBeyondTheCreditsFailsEveryRankAlike)
{
    EXPECT_RANKS(run(2, [&](incmoe_comm_t *comm, int me) -> std::string {
        LlCase c = make_case(2, {40, 1}, 40, ALL_RANKS, 13);
        c.row_bytes = 1024; /* rank 0's 40 rows take 40 KiB, over 32 KiB */
        Buffers b;
        incmoe_req_t req;
        incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
        std::string reason = req_why(comm, &req);
        if (st != INCMOE_ERR_NO_MEMORY || reason.find("dispatch epoch 1: rank 0's message of") != 0)
            return std::string("got ") + incmoe_strerror(st) + " '" + reason + "'";
        CHECK_OK(incmoe_dispatch_release(comm, &req));
        for (size_t at = 0; at < b.recv.size(); at++)
            if (b.recv[at] != kCanary)
                return "the refused dispatch wrote byte " + std::to_string(at);
        return dispatch_then_combine(comm, make_case(2, {3, 2}, 4, RANDOM, 14), me);
    }));
}

TEST_P(Ll, EveryDatatypeAndOperationOfCombine)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        unsigned seed = 300;
        return each_reduction([&](incmoe_dtype_t dt, incmoe_redop_t op) {
            LlCase c = make_case(3, rows_for(3, 4, false), 4, MIXED, seed++);
            c.dtype = dt;
            c.op = op;
            c.row_count = 12;
            return dispatch_then_combine(comm, c, me);
        });
    }));
}

/* Ranks that disagree on max_tokens or row_bytes fail the dispatch on every rank with one
   reason (INCMOE_ERR_MISMATCH); the communicator carries on. */
TEST_P(Ll, DisagreeingMaxTokensOrRowBytesFailEveryRankWithOneReason)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        /* max_tokens; row_bytes; row_bytes by expert (the ids follow the row: 20 and 17
           bytes pad to the same 24 on the wire, and still disagree); the layout */
        for (int round = 0; round < 4; round++) {
            LlCase c = round < 2 ? make_case(3, {2, 2, 2}, 4, ALL_RANKS, 20 + round)
                                 : make_expert_case(3, {2, 2, 2}, 4, 5, 1, 20 + round);
            if (me == 2 && round == 0)
                c.max_tokens = 3;
            if (me == 1 && round == 1)
                c.row_bytes = 32;
            if (round == 2)
                c.row_bytes = me == 1 ? 17 : 20;
            if (me == 1 && round == 3)
                c.by_expert = false; /* the same rows and sets, by source */
            Buffers b;
            incmoe_req_t req;
            incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
            std::string reason = req_why(comm, &req);
            std::string rank = round == 0 ? "rank 2" : "rank 1";
            if (st != INCMOE_ERR_MISMATCH || reason.find(rank) == std::string::npos)
                return std::string("round ") + std::to_string(round) + ": " + incmoe_strerror(st) +
                       " '" + reason + "'";
            for (size_t at = 0; at < b.recv.size(); at++)
                if (b.recv[at] != kCanary)
                    return "a failed dispatch wrote byte " + std::to_string(at);
            CHECK_OK(incmoe_dispatch_release(comm, &req));
        }
        return dispatch_then_combine(comm, make_case(3, {2, 3, 1}, 4, MIXED, 23), me);
    }));
}

/* A combine whose ranks disagree (rank 1's partials are of another type) fails on every rank
   with INCMOE_ERR_MISMATCH and one reason, writes nothing, and keeps its dispatch: combined
   again, it is exact. */
TEST_P(Ll, ACombineThatDisagreesFailsEveryRankAndKeepsItsDispatch)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        LlCase c = make_case(3, {3, 2, 3}, 4, MIXED, 33);
        Buffers b;
        incmoe_req_t disp, req;
        CHECK_OK(post_dispatch(comm, c, me, b, &disp));
        std::vector<unsigned char> part(3 * 4 * 64, 0), out(3 * 64, kCanary);
        incmoe_mr_t *mp, *mo;
        CHECK_OK(incmoe_mem_register(comm, part.data(), part.size(), &mp));
        CHECK_OK(incmoe_mem_register(comm, out.data(), out.size(), &mo));
        incmoe_combine_params_t p = {};
        p.dispatch = disp;
        p.send_mr = mp;
        p.recv_mr = mo;
        p.row_count = 8;
        p.dtype = me == 1 ? INCMOE_INT32 : INCMOE_FLOAT32;
        p.op = INCMOE_SUM;
        CHECK_OK(incmoe_combine(comm, &p, &req));
        incmoe_status_t st = incmoe_wait(comm, &req);
        std::string reason = req_why(comm, &req);
        if (st != INCMOE_ERR_MISMATCH || reason.find("combine epoch 1: rank 1") != 0)
            return std::string("got ") + incmoe_strerror(st) + " '" + reason + "'";
        for (unsigned char x : out)
            if (x != kCanary)
                return "the failed combine wrote its result";
        CHECK_OK(incmoe_mem_deregister(comm, mp));
        CHECK_OK(incmoe_mem_deregister(comm, mo));
        return run_combine(comm, c, me, b, &disp);
    }));
}

/* A caller's refusal with the form: every rank fails with INCMOE_ERR_INVALID_ARG and the
   lowest refusing rank's reason, for the dispatch and for its combine (which keeps its
   dispatch, combined for real after). */
TEST_P(Ll, ARefusalFailsEveryRankWithTheLowestRefusersReason)
{
    EXPECT_RANKS(run(3, [&](incmoe_comm_t *comm, int me) -> std::string {
        LlCase c = make_case(3, {3, 3, 3}, 4, RANDOM, 30);
        Buffers b;
        incmoe_req_t req;
        incmoe_status_t st;
        if (me == 0) {
            st = post_dispatch(comm, c, me, b, &req);
        } else {
            incmoe_dispatch_params_t p = {};
            p.field_mask = INCMOE_DISPATCH_PARAM_REFUSED | INCMOE_DISPATCH_PARAM_LOW_LATENCY;
            p.max_tokens = 4;
            p.refused = me == 1 ? "x is not contiguous" : "mask has the wrong shape";
            CHECK_OK(incmoe_dispatch(comm, &p, &req));
            st = incmoe_wait(comm, &req);
        }
        std::string want = "dispatch epoch 1: rank 1 refused its dispatch arguments: x is not "
                           "contiguous";
        if (st != INCMOE_ERR_INVALID_ARG || req_why(comm, &req) != want)
            return std::string("dispatch: ") + incmoe_strerror(st) + " '" + req_why(comm, &req) +
                   "'";
        CHECK_OK(incmoe_dispatch_release(comm, &req));
        Buffers d;
        incmoe_req_t disp;
        CHECK_OK(post_dispatch(comm, c, me, d, &disp));
        incmoe_combine_params_t p = {};
        p.dispatch = disp;
        if (me == 2) {
            p.field_mask = INCMOE_COMBINE_PARAM_REFUSED;
            p.refused = "partials of the wrong shape";
            CHECK_OK(incmoe_combine(comm, &p, &req));
        } else {
            std::vector<float> part(3 * 4 * 8), out(3 * 8);
            incmoe_mr_t *mp, *mo;
            CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &mp));
            CHECK_OK(incmoe_mem_register(comm, out.data(), out.size() * 4, &mo));
            p.send_mr = mp;
            p.recv_mr = mo;
            p.row_count = 8;
            p.dtype = INCMOE_FLOAT32;
            p.op = INCMOE_SUM;
            CHECK_OK(incmoe_combine(comm, &p, &req));
            st = incmoe_wait(comm, &req);
            incmoe_mem_deregister(comm, mp);
            incmoe_mem_deregister(comm, mo);
        }
        st = incmoe_wait(comm, &req);
        want = "combine epoch 1: rank 2 refused its combine arguments: partials of the wrong shape";
        if (st != INCMOE_ERR_INVALID_ARG || req_why(comm, &req) != want)
            return std::string("combine: ") + incmoe_strerror(st) + " '" + req_why(comm, &req) +
                   "'";
        return run_combine(comm, c, me, d, &disp);
    }));
}

/* In fp32 the low-latency form gives bitwise the bulk form's results on the same inputs: the
   same rows in each source's block, the same combined rows (random non-integer values, so the
   reduction order shows). */
TEST_P(Ll, Fp32ResultsAreBitwiseTheBulkForms)
{
    const int n = 4;
    EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
        LlCase c = make_case(n, {5, 3, 0, 5}, 5, RANDOM, 40);
        const size_t rb = c.row_bytes, cnt = 16, pb = cnt * 4;
        /* bulk */
        Buffers bulk;
        bulk.comm = comm;
        bulk.send.assign(std::max<size_t>(1, c.rows[me] * rb), 0);
        for (size_t i = 0; i < c.rows[me]; i++)
            for (size_t j = 0; j < rb; j++)
                bulk.send[i * rb + j] = row_byte(c, me, i, j);
        bulk.recv.assign(n * 5 * rb, 0);
        CHECK_OK(incmoe_mem_register(comm, bulk.send.data(), bulk.send.size(), &bulk.m_send));
        CHECK_OK(incmoe_mem_register(comm, bulk.recv.data(), bulk.recv.size(), &bulk.m_recv));
        incmoe_dispatch_params_t p = {};
        p.send_mr = bulk.m_send;
        p.nrows = c.rows[me];
        p.row_bytes = rb;
        p.sets = c.sets[me].empty() ? nullptr : c.sets[me].data();
        p.recv_mr = bulk.m_recv;
        p.capacity = n * 5;
        incmoe_req_t dbulk, dll;
        CHECK_OK(incmoe_dispatch(comm, &p, &dbulk));
        CHECK_OK(incmoe_wait(comm, &dbulk));
        Buffers ll;
        CHECK_OK(post_dispatch(comm, c, me, ll, &dll));
        std::vector<uint32_t> counts(n), bulk_counts(n);
        size_t bulk_regions = 0;
        CHECK_OK(incmoe_dispatch_counts(comm, &dll, counts.data(), n, nullptr));
        /* the bulk form's regions are its sources too */
        CHECK_OK(incmoe_dispatch_counts(comm, &dbulk, bulk_counts.data(), n, &bulk_regions));
        if (bulk_regions != (size_t)n || bulk_counts != counts)
            return "the bulk form's counts differ from the low-latency form's";
        /* the same partial per received row in both layouts */
        std::mt19937 rng(me + 1);
        std::uniform_real_distribution<float> val(-3.f, 3.f);
        std::vector<float> pbulk(n * 5 * cnt), pll(n * 5 * cnt), obulk(5 * cnt), oll(5 * cnt);
        size_t at = 0;
        for (int s = 0; s < n; s++)
            for (uint32_t k = 0; k < counts[s]; k++, at++)
                for (size_t e = 0; e < cnt; e++)
                    pbulk[at * cnt + e] = pll[(s * 5 + k) * cnt + e] = val(rng);
        incmoe_mr_t *m[4];
        CHECK_OK(incmoe_mem_register(comm, pbulk.data(), pbulk.size() * 4, &m[0]));
        CHECK_OK(incmoe_mem_register(comm, pll.data(), pll.size() * 4, &m[1]));
        CHECK_OK(incmoe_mem_register(comm, obulk.data(), obulk.size() * 4, &m[2]));
        CHECK_OK(incmoe_mem_register(comm, oll.data(), oll.size() * 4, &m[3]));
        for (int form = 0; form < 2; form++) {
            incmoe_combine_params_t cp =
                dc_ref::combine_params(form == 0 ? dbulk : dll, m[form], m[2 + form], cnt);
            incmoe_req_t r;
            CHECK_OK(incmoe_combine(comm, &cp, &r));
            CHECK_OK(incmoe_wait(comm, &r));
        }
        for (int k = 0; k < 4; k++)
            CHECK_OK(incmoe_mem_deregister(comm, m[k]));
        at = 0;
        for (int s = 0; s < n; s++)
            for (uint32_t k = 0; k < counts[s]; k++, at++)
                if (memcmp(&bulk.recv[at * rb], &ll.recv[(kGuardRows + s * 5 + k) * rb], rb) != 0)
                    return "dispatched row " + std::to_string(k) + " of rank " + std::to_string(s) +
                           " differs from the bulk form's";
        if (memcmp(obulk.data(), oll.data(), c.rows[me] * pb) != 0)
            return "the combined rows differ from the bulk form's";
        return "";
    }));
}

/* Bulk and low-latency collectives in flight together on one communicator share the streams
   (and, between the ranks, the combine's credits): every result is still exact. */
TEST_P(Ll, BulkAndLowLatencyCollectivesInFlightTogether)
{
    const int n = 3;
    EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
        /* bulk: 30 rows of 1 KiB to every rank (many chunks and credits) */
        const size_t T = 30, rb = 1024, cnt = 256;
        std::vector<unsigned char> x(T * rb), recv(n * T * rb);
        for (size_t i = 0; i < x.size(); i++)
            x[i] = (unsigned char)(me * 7 + i);
        std::vector<uint64_t> sets(T, (1u << n) - 1);
        std::vector<float> part(n * T * cnt), out(T * cnt);
        for (size_t i = 0; i < part.size(); i++)
            part[i] = (float)(me + 1);
        incmoe_mr_t *m[4];
        CHECK_OK(incmoe_mem_register(comm, x.data(), x.size(), &m[0]));
        CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size(), &m[1]));
        CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &m[2]));
        CHECK_OK(incmoe_mem_register(comm, out.data(), out.size() * 4, &m[3]));
        incmoe_dispatch_params_t p = {};
        p.send_mr = m[0];
        p.nrows = T;
        p.row_bytes = rb;
        p.sets = sets.data();
        p.recv_mr = m[1];
        p.capacity = n * T;
        LlCase c = make_case(n, {3, 2, 4}, 4, MIXED, 80);
        Buffers b;
        incmoe_req_t d_bulk, d_ll, c_bulk;
        CHECK_OK(incmoe_dispatch(comm, &p, &d_bulk));
        CHECK_OK(post_dispatch(comm, c, me, b, &d_ll, false));
        CHECK_OK(incmoe_wait(comm, &d_bulk));
        CHECK_OK(incmoe_wait(comm, &d_ll));
        std::string e = check_dispatch(comm, c, me, b, &d_ll);
        if (!e.empty())
            return e;
        incmoe_combine_params_t cp = {};
        cp.dispatch = d_bulk;
        cp.send_mr = m[2];
        cp.recv_mr = m[3];
        cp.row_count = cnt;
        cp.dtype = INCMOE_FLOAT32;
        cp.op = INCMOE_SUM;
        CHECK_OK(incmoe_combine(comm, &cp, &c_bulk));
        e = run_combine(comm, c, me, b, &d_ll); /* while the bulk combine is in flight */
        CHECK_OK(incmoe_wait(comm, &c_bulk));
        for (size_t i = 0; i < out.size(); i++)
            if (out[i] != (float)(n * (n + 1) / 2))
                return "bulk combined element " + std::to_string(i) + " is " +
                       std::to_string(out[i]);
        for (int s = 0; s < n; s++)
            for (size_t i = 0; i < T * rb; i++)
                if (recv[s * T * rb + i] != (unsigned char)(s * 7 + i))
                    return "bulk dispatched byte " + std::to_string(i) + " of rank " +
                           std::to_string(s) + " differs";
        for (incmoe_mr_t *r : m)
            CHECK_OK(incmoe_mem_deregister(comm, r));
        return e;
    }));
}

/* Many low-latency dispatches posted before any is waited for, each message taking 3 of a
   peer's 8 credits: they queue in epoch order and all complete exact; so do their combines. */
TEST_P(Ll, ManyInFlightUnderTightCreditsAllCompleteExact)
{
    const int n = 4, k = 12;
    EXPECT_RANKS(run(n, [&](incmoe_comm_t *comm, int me) -> std::string {
        std::vector<LlCase> cases;
        std::vector<Buffers> bufs(k);
        std::vector<incmoe_req_t> reqs(k);
        for (int i = 0; i < k; i++) {
            cases.push_back(make_case(n, rows_for(n, 5, i % 2 == 1), 5, ALL_RANKS, 90 + i));
            cases.back().row_bytes = 2000; /* 5 rows to a peer: 10 KB, 3 chunks */
            cases.back().row_count = 500;
        }
        for (int i = 0; i < k; i++)
            CHECK_OK(post_dispatch(comm, cases[i], me, bufs[i], &reqs[i], false));
        for (int i = 0; i < k; i++) {
            CHECK_OK(incmoe_wait(comm, &reqs[i]));
            std::string e = check_dispatch(comm, cases[i], me, bufs[i], &reqs[i]);
            if (!e.empty())
                return "dispatch " + std::to_string(i) + ": " + e;
        }
        for (int i = 0; i < k; i++) {
            std::string e = run_combine(comm, cases[i], me, bufs[i], &reqs[i]);
            if (!e.empty())
                return "combine " + std::to_string(i) + ": " + e;
        }
        return "";
    }));
}

/* By expert (vLLM's batched layout): each local expert's region, its rows by source then
   source row, a row in every region of an expert it names; the combine folds each received
   row's partials over its local experts first.  Some ranks hold no expert. */
TEST_P(Ll, ByExpertRegionsAndTheFoldedCombineMatchTheFold)
{
    for (int n : {1, 2, 3, 5}) {
        EXPECT_RANKS(run(n,
                         [&](incmoe_comm_t *comm, int me) -> std::string {
                             unsigned seed = 500;
                             /* the fold and the reduction in several types and operations */
                             const struct {
                                 int topk;
                                 incmoe_dtype_t dtype;
                                 incmoe_redop_t op;
                             } kinds[] = {{1, INCMOE_FLOAT32, INCMOE_SUM},
                                          {2, INCMOE_BFLOAT16, INCMOE_MAX},
                                          {4, INCMOE_INT32, INCMOE_PROD},
                                          {3, INCMOE_FLOAT16, INCMOE_SUM}};
                             for (const auto &k : kinds) {
                                 const int topk = k.topk;
                                 LlCase c = make_expert_case(n, rows_for(n, 4, topk == 2), 4,
                                                             2 * n + 1, topk, seed++);
                                 c.dtype = k.dtype;
                                 c.op = k.op;
                                 std::string e = dispatch_then_combine(comm, c, me);
                                 if (!e.empty())
                                     return "topk " + std::to_string(topk) + ": " + e;
                             }
                             return "";
                         }))
            << n << " ranks";
    }
}

/* A rank that dies in the middle of a low-latency dispatch fails the others within the job's
   timeout, whatever they were waiting for. */
TEST_P(Ll, ARankThatDiesMidDispatchFailsTheOthers)
{
    harness::ExpectErrors errors_expected("rank 2 exits in the middle of a dispatch");
    harness::SharedBoard<int> shared;
    int *heard = shared.get();
    ASSERT_NE(heard, nullptr);
    EXPECT_RANKS(run(
        4,
        [&](incmoe_comm_t *comm, int me) -> std::string {
            LlCase c = make_case(4, {3, 3, 3, 3}, 4, ALL_RANKS, 60);
            incmoe_status_t st = harness::barrier_wait(comm);
            if (st != INCMOE_OK)
                return why(comm, st, "barrier");
            if (me == 2)
                _exit(0); /* gone before its message */
            Buffers b;
            incmoe_req_t req;
            st = post_dispatch(comm, c, me, b, &req);
            char text[300] = "";
            incmoe_comm_error(comm, text, sizeof(text));
            b.comm = nullptr;
            harness::bump(heard);
            harness::await_at_least(heard, 3, 30);
            incmoe_comm_destroy(comm);
            if (st == INCMOE_OK || strstr(text, "rank 2") == nullptr)
                return std::string("got ") + incmoe_strerror(st) + " '" + text + "'";
            return "";
        },
        60, false, 3000));
}

/* Arguments this rank rejects fail the job with a reason naming them. */
TEST_P(Ll, WrongArgumentsAreRejectedWithTheirReason)
{
    harness::ExpectErrors errors_expected("ranks post wrong low-latency arguments");
    struct Bad {
        const char *what;
        std::function<void(incmoe_dispatch_params_t *)> spoil;
    } bad[] = {
        {"max_tokens 0", [](incmoe_dispatch_params_t *p) { p->max_tokens = 0; }},
        {"capacity 7 rows", [](incmoe_dispatch_params_t *p) { p->capacity = 7; }},
        {"topk 0",
         [](incmoe_dispatch_params_t *p) {
             p->field_mask |= INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT;
             p->sets = nullptr;
         }},
    };
    struct Board {
        int created; /* ranks whose communicator exists */
        int heard;   /* rank 1 has the job's reason */
    };
    for (const Bad &k : bad) {
        harness::SharedBoard<Board> shared;
        ASSERT_NE(shared.get(), nullptr);
        int *created = &shared.get()->created, *heard = &shared.get()->heard;
        EXPECT_RANKS(run(
            2,
            [&](incmoe_comm_t *comm, int me) -> std::string {
                /* Rank 0's refusal fails the job: not before rank 1's create returned, or
                   that is what fails (with the job's error). */
                harness::bump(created);
                if (!harness::await_at_least(created, 2, 30))
                    return "the other rank's communicator never came";
                LlCase c = make_case(2, {2, 2}, 4, ALL_RANKS, 70);
                Buffers b;
                incmoe_dispatch_params_t p;
                CHECK_OK(prepare(comm, c, me, b, &p, 2));
                if (me == 0)
                    k.spoil(&p);
                incmoe_req_t req;
                incmoe_status_t st = incmoe_dispatch(comm, &p, &req);
                if (st == INCMOE_OK)
                    st = incmoe_wait(comm, &req);
                char text[300] = "";
                incmoe_comm_error(comm, text, sizeof(text));
                b.comm = nullptr;
                /* Rank 0 keeps its communicator until rank 1 heard the reason: a rank gone
                   first would be what rank 1 hears. */
                if (me == 1)
                    harness::bump(heard);
                else if (!harness::await_at_least(heard, 1, 30))
                    return "rank 1's dispatch never ended";
                incmoe_comm_destroy(comm);
                if (st != INCMOE_ERR_INVALID_ARG || strstr(text, k.what) == nullptr)
                    return std::string("got ") + incmoe_strerror(st) + " '" + text + "'";
                return "";
            },
            60, false))
            << k.what;
    }
}

std::string variant_name(const ::testing::TestParamInfo<Variant> &info)
{
    const incmoe_algo_t a = info.param.algo;
    return std::string(a == INCMOE_ALGO_INC    ? "inc"
                       : a == INCMOE_ALGO_RING ? "ring"
                                               : "a2a") +
           (info.param.rndv ? "_rndv" : "");
}

INSTANTIATE_TEST_SUITE_P(Algos, Ll, ::testing::ValuesIn(all_variants()), variant_name);

} // namespace
