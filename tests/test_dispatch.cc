/*
 * test_dispatch.cc - dispatch and combine (incmoe.h, "Dispatch and combine"):
 * the plan's shared verdict as a pure function, and the collectives across
 * real processes on every algorithm that has them (an algorithm without them
 * skips), each checked against a plain fold written here: which rows land
 * where, their sources, and each combined row as exact arithmetic over the
 * partials of exactly the ranks in its set.  Guard bytes around every receive
 * range must stay untouched.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
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
/* the reference                                                             */

/* One dispatch and combine, the same in every process (made from a seed). */
struct Case {
    int n = 1;
    size_t row_bytes = 64;
    std::vector<size_t> rows;                /* T of each rank */
    std::vector<std::vector<uint64_t>> sets; /* [s][i * W + w] */
    std::vector<size_t> capacity;            /* of each rank; SIZE_MAX: exactly R */
    size_t row_count = 8;                    /* elements of a partial row */
    incmoe_dtype_t dtype = INCMOE_FLOAT32;
    incmoe_redop_t op = INCMOE_SUM;
    unsigned seed = 1;

    size_t words() const
    {
        return INCMOE_SET_WORDS(n);
    }
    bool in_set(int s, size_t i, int d) const
    {
        return (sets[s][i * words() + (size_t)d / 64] >> (d % 64)) & 1;
    }
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

/* Row contents: byte j of row i of rank s. */
unsigned char row_byte(const Case &c, int s, size_t i, size_t j)
{
    return (unsigned char)(s * 131 + i * 7 + j * 13 + c.seed);
}

/* A partial's element as an exact small integer: rank d's partial of row i of rank s.
   Sums of up to 8 stay exact in every type; products are of +-1. */
long long partial_val(const Case &c, int d, int s, size_t i, size_t e)
{
    unsigned h = (unsigned)(d * 1000003 + s * 7919 + (int)i * 131 + (int)e * 17 + (int)c.seed);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    bool is_unsigned =
        c.dtype == INCMOE_UINT8 || c.dtype == INCMOE_UINT32 || c.dtype == INCMOE_UINT64;
    if (c.op == INCMOE_PROD)
        return (h & 1) ? 1 : -1;
    return is_unsigned ? (long long)(h % 9) : (long long)(h % 9) - 4;
}

/* fp16 bits of a small integer (|v| < 2048), written out here. */
uint16_t half_of_int(long long v)
{
    if (v == 0)
        return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    unsigned long long a = (unsigned long long)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(a);
    uint16_t mant = (uint16_t)((a << (10 - e)) & 0x3ff);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}

/* The bytes of an exact integer value as an element of dtype (integers wrap as the C types
   do: -1 is all ones). */
void put_val(incmoe_dtype_t dtype, long long v, void *dst)
{
    switch (dtype) {
    case INCMOE_INT8:
    case INCMOE_UINT8: {
        uint8_t x = (uint8_t)v;
        memcpy(dst, &x, 1);
        break;
    }
    case INCMOE_INT32:
    case INCMOE_UINT32: {
        uint32_t x = (uint32_t)v;
        memcpy(dst, &x, 4);
        break;
    }
    case INCMOE_INT64:
    case INCMOE_UINT64: {
        uint64_t x = (uint64_t)v;
        memcpy(dst, &x, 8);
        break;
    }
    case INCMOE_FLOAT16: {
        uint16_t x = half_of_int(v);
        memcpy(dst, &x, 2);
        break;
    }
    case INCMOE_BFLOAT16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t x = (uint16_t)(u >> 16); /* exact: a small integer needs few mantissa bits */
        memcpy(dst, &x, 2);
        break;
    }
    case INCMOE_FLOAT32: {
        float f = (float)v;
        memcpy(dst, &f, 4);
        break;
    }
    case INCMOE_FLOAT64: {
        double f = (double)v;
        memcpy(dst, &f, 8);
        break;
    }
    }
}

/* What the owner s gets for row i: op over the partials of exactly the ranks in its set
   (zeros for an empty set), as exact integers. */
std::vector<unsigned char> combined_row(const Case &c, int s, size_t i)
{
    const size_t esize = incmoe_dtype_size(c.dtype);
    std::vector<unsigned char> out(c.row_count * esize, 0);
    for (size_t e = 0; e < c.row_count; e++) {
        bool any = false;
        long long acc = 0;
        for (int d = 0; d < c.n; d++) {
            if (!c.in_set(s, i, d))
                continue;
            long long v = partial_val(c, d, s, i, e);
            if (!any)
                acc = v;
            else if (c.op == INCMOE_SUM)
                acc += v;
            else if (c.op == INCMOE_PROD)
                acc *= v;
            else if (c.op == INCMOE_MAX)
                acc = std::max(acc, v);
            else
                acc = std::min(acc, v);
            any = true;
        }
        if (any)
            put_val(c.dtype, acc, &out[e * esize]);
    }
    return out;
}

/* A case of n ranks with rows[r] rows each and sets drawn with the given shape. */
enum SetShape { RANDOM, EMPTY, ALL_RANKS, OWN_ONLY, OTHERS_ONLY, MIXED };

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
    for (int s = 0; s < n; s++) {
        std::vector<uint64_t> sets(rows[s] * c.words(), 0);
        for (size_t i = 0; i < rows[s]; i++) {
            SetShape sh = shape == MIXED ? (SetShape)(rng() % 5) : shape;
            for (int d = 0; d < n; d++) {
                bool on = sh == RANDOM        ? bit(rng)
                          : sh == ALL_RANKS   ? true
                          : sh == OWN_ONLY    ? d == s
                          : sh == OTHERS_ONLY ? d != s
                                              : false;
                if (on)
                    sets[i * c.words() + (size_t)d / 64] |= (uint64_t)1 << (d % 64);
            }
        }
        c.sets.push_back(sets);
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* one rank's run                                                            */

const size_t kGuardRows = 3;
const unsigned char kCanary = 0xA5;

std::string why(incmoe_comm_t *comm, incmoe_status_t st, const std::string &what)
{
    char text[300] = "";
    incmoe_comm_error(comm, text, sizeof(text));
    return what + ": " + incmoe_strerror(st) + " " + text;
}

std::string req_why(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    char text[300] = "";
    incmoe_req_error(comm, req, text, sizeof(text));
    return text;
}

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        incmoe_status_t st_ = (call);                                                              \
        if (st_ != INCMOE_OK)                                                                      \
            return why(comm, st_, #call);                                                          \
    } while (0)

/* Registered buffers of one rank for a case, canaries in every receive range. */
struct Buffers {
    std::vector<unsigned char> send, recv, part, out;
    incmoe_mr_t *m_send = nullptr, *m_recv = nullptr, *m_part = nullptr, *m_out = nullptr;
    incmoe_comm_t *comm = nullptr;

    ~Buffers()
    {
        for (incmoe_mr_t *m : {m_send, m_recv, m_part, m_out})
            if (m != nullptr)
                incmoe_mem_deregister(comm, m);
    }
};

/* Dispatch: post and wait; the status of the wait (failures alone are the caller's). */
incmoe_status_t post_dispatch(incmoe_comm_t *comm, const Case &c, int me, Buffers &b,
                              incmoe_req_t *req)
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
    incmoe_dispatch_params_t p = {};
    p.send_mr = b.m_send;
    p.nrows = c.rows[me];
    p.row_bytes = rb;
    p.sets = c.sets[me].empty() ? nullptr : c.sets[me].data();
    p.recv_mr = b.m_recv;
    p.capacity = cap;
    st = incmoe_dispatch(comm, &p, req);
    return st != INCMOE_OK ? st : incmoe_wait(comm, req);
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
            put_val(c.dtype, partial_val(c, me, (int)got[k].first, got[k].second, e),
                    &b.part[k * pb + e * esize]);
    b.out.assign((c.rows[me] + kGuardRows) * pb, kCanary);
    CHECK_OK(incmoe_mem_register(comm, b.part.data(), b.part.size(), &b.m_part));
    CHECK_OK(incmoe_mem_register(comm, b.out.data(), b.out.size(), &b.m_out));
    incmoe_combine_params_t p = {};
    p.dispatch = *dispatch;
    p.send_mr = b.m_part;
    p.recv_mr = b.m_out;
    p.row_count = c.row_count;
    p.dtype = c.dtype;
    p.op = c.op;
    incmoe_req_t req;
    CHECK_OK(incmoe_combine(comm, &p, &req));
    CHECK_OK(incmoe_wait(comm, &req));
    std::ostringstream err;
    for (size_t i = 0; i < c.rows[me]; i++) {
        auto want = combined_row(c, me, i);
        if (memcmp(&b.out[i * pb], want.data(), pb) != 0) {
            err << "combined row " << i << " (" << incmoe_dtype_name(c.dtype) << " "
                << incmoe_redop_name(c.op) << ") differs at byte ";
            for (size_t j = 0; j < pb; j++)
                if (b.out[i * pb + j] != want[j]) {
                    err << j << ": got " << (int)b.out[i * pb + j] << " want " << (int)want[j];
                    break;
                }
            return err.str();
        }
    }
    for (size_t at = c.rows[me] * pb; at < b.out.size(); at++)
        if (b.out[at] != kCanary)
            return "combine wrote past the owner's rows";
    /* The combine released its dispatch. */
    if (incmoe_dispatch_release(comm, dispatch) != INCMOE_ERR_INVALID_ARG)
        return "a combined dispatch was still kept";
    return "";
}

const char *const kUnsupported = "unsupported";

/* Dispatch, check, combine, check. */
std::string dc_case(incmoe_comm_t *comm, const Case &c, int me)
{
    Buffers b;
    incmoe_req_t req;
    incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
    if (st == INCMOE_ERR_UNSUPPORTED)
        return kUnsupported;
    if (st != INCMOE_OK)
        return why(comm, st, "dispatch") + " / " + req_why(comm, &req);
    std::string e = check_dispatch(comm, c, me, b, &req);
    if (e.empty())
        e = run_combine(comm, c, me, b, &req);
    return e;
}

/* ------------------------------------------------------------------------ */
/* across processes                                                          */

struct Variant {
    incmoe_algo_t algo;
    bool rndv;
};

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

    /* Runs body on n ranks of a fresh job; every rank answering kUnsupported skips. */
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
                incmoe_comm_params_t p = {};
                p.field_mask = INCMOE_COMM_PARAM_ALGO;
                p.switch_addr = g_switch[v.rndv].addr.c_str();
                p.job_id = job;
                p.rank = rank;
                p.nranks = n;
                p.algo = v.algo;
                incmoe_comm_t *comm;
                incmoe_status_t st = incmoe_comm_create(&p, &comm);
                if (st == INCMOE_ERR_UNSUPPORTED)
                    return kUnsupported;
                if (st != INCMOE_OK)
                    return std::string("comm_create: ") + incmoe_strerror(st);
                std::string err = body(comm, rank);
                st = incmoe_comm_destroy(comm);
                if (err.empty() && expect_destroy_ok && st != INCMOE_OK)
                    err = std::string("comm_destroy: ") + incmoe_strerror(st);
                return err;
            },
            timeout_s);
    }
};

bool all_unsupported(const std::vector<std::string> &res)
{
    for (auto &r : res)
        if (r != kUnsupported)
            return false;
    return !res.empty();
}

#define EXPECT_RANKS(res)                                                                          \
    do {                                                                                           \
        auto res_ = (res);                                                                         \
        if (all_unsupported(res_))                                                                 \
            GTEST_SKIP() << "this algorithm has no dispatch and combine yet";                      \
        EXPECT_EQ(harness::failures(res_), "");                                                    \
    } while (0)

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
                std::string e = dc_case(comm, c, me);
                if (!e.empty())
                    return e == kUnsupported ? e
                                             : "T " + std::to_string(k.t) + " row " +
                                                   std::to_string(k.rb) + ": " + e;
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
                    std::string e = dc_case(comm, c, me);
                    if (!e.empty())
                        return e == kUnsupported ? e
                                                 : "shape " + std::to_string(sh) + " T " +
                                                       std::to_string(t) + ": " + e;
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
        for (int dt = INCMOE_INT8; dt <= INCMOE_BFLOAT16; dt++) {
            for (int op = INCMOE_SUM; op <= INCMOE_MIN; op++) {
                if (!incmoe_reduce_supported((incmoe_dtype_t)dt, (incmoe_redop_t)op))
                    continue;
                for (size_t t : {(size_t)4, (size_t)60}) { /* small, then chunked */
                    Case c = make_case(3, rows_for(3, t, 0), 64, MIXED, seed++);
                    c.dtype = (incmoe_dtype_t)dt;
                    c.op = (incmoe_redop_t)op;
                    c.row_count = 24;
                    std::string e = dc_case(comm, c, me);
                    if (!e.empty())
                        return e;
                }
            }
        }
        return "";
    }));
}

/* A rank's whole contribution goes as one SMALL up to half a chunk: the rows per rank sweep
   across that limit (all-ranks sets: each row goes out), and both sides are exact. */
TEST_P(Dc, BothSidesOfTheSmallLimit)
{
    EXPECT_RANKS(run(4, [&](incmoe_comm_t *comm, int me) -> std::string {
        const size_t rb = 120; /* 128 bytes a row with its set: the limit is near 15 rows */
        unsigned seed = 50;
        for (size_t t = 10; t <= 20; t++) {
            for (SetShape sh : {ALL_RANKS, OTHERS_ONLY}) {
                Case c = make_case(4, rows_for(4, t, 0), rb, sh, seed++);
                c.row_count = rb / 4; /* partials as large as the rows */
                std::string e = dc_case(comm, c, me);
                if (!e.empty())
                    return e == kUnsupported ? e : "T " + std::to_string(t) + ": " + e;
            }
        }
        return "";
    }));
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

} // namespace
