/*
 * test_collectives.cc - the collectives across real processes over loopback,
 * checked byte for byte against references computed here, independently of
 * the library: every rank count of interest, every datatype and operation,
 * sizes from one element to 64 MiB, unequal and empty blocks, AllGather and
 * ReduceScatter in flight together, long runs of back-to-back collectives,
 * and bitwise reproducibility whatever order the ranks post in.
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"

extern "C" {
#include "base/dtype.h"
#include "incmoe/incmoe.h"
}

namespace
{

/* Each case runs on every algorithm and both ways of moving bulk data: eager
   (copied out of UCX's buffers; the TCP default) and rendezvous (received
   straight into the registered buffer; the RDMA choice). */
struct Variant {
    incmoe_algo_t algo;
    bool rndv;
};

harness::SwitchProc g_switch[2]; /* [rndv] */

using harness::buffer;
using harness::destroy_then_free;
using harness::why;

class Collectives : public ::testing::TestWithParam<Variant>
{
  protected:
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(harness::switch_start(&g_switch[0])) << "could not start incmoe-switchd";
        ASSERT_TRUE(harness::switch_start(&g_switch[1], {"--rndv-thresh", "4096"}));
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&g_switch[0]);
        harness::switch_stop(&g_switch[1]);
    }

    /* Runs body on nranks processes, each with a communicator of one fresh job. */
    void run(int nranks, const std::function<std::string(incmoe_comm_t *, int, int)> &body,
             int timeout_s = 120)
    {
        unsigned long long job = harness::unique_job_id();
        incmoe_algo_t algo = GetParam().algo;
        bool rndv = GetParam().rndv;
        auto results = harness::run_ranks(
            nranks,
            [&](int rank) -> std::string {
                setenv("INCMOE_RNDV_THRESH", rndv ? "4096" : "0", 1);
                harness::CommOptions opt;
                opt.algo = algo;
                incmoe_comm_t *comm;
                incmoe_status_t st =
                    harness::comm_create(g_switch[rndv].addr, job, rank, nranks, &comm, opt);
                if (st != INCMOE_OK)
                    return std::string("comm_create: ") + incmoe_strerror(st);
                std::string err = body(comm, rank, nranks);
                st = destroy_then_free(comm);
                if (err.empty() && st != INCMOE_OK)
                    err = std::string("comm_destroy: ") + incmoe_strerror(st);
                return err;
            },
            timeout_s);
        EXPECT_EQ(harness::failures(results), "") << "N=" << nranks;
    }
};

/* Exact in fp32 for any sum of a handful of ranks. */
float ag_val(int rank, size_t i)
{
    return (float)((rank * 131 + (int)(i % 997)) % 1000);
}
float rs_val(int rank, int block, size_t i)
{
    return (float)((rank * 7 + block * 3 + (int)(i % 251)) % 100);
}

/* Rows of rank r in an uneven layout: some ranks empty, some full, some in between. */
size_t rows_of(int r, int n, size_t tmax, int shape)
{
    switch (shape) {
    case 0:
        return tmax; /* equal */
    case 1:
        return r % 3 == 1 ? 0 : tmax - (size_t)r * tmax / (2 * n); /* unequal with zeros */
    default:
        return r == n - 1 ? tmax : 0; /* only the last rank has rows */
    }
}

/*
 * One AllGather and one ReduceScatter of the padded layout, in flight at the
 * same time, fp32 sum.  Every byte outside the windows must stay untouched.
 */
std::string agrs_case(incmoe_comm_t *comm, int me, int n, size_t tmax, size_t row_elems, int shape,
                      size_t band_rows)
{
    const size_t rowb = row_elems * sizeof(float);
    const size_t stride = tmax * rowb;
    std::vector<size_t> valid(n);
    for (int r = 0; r < n; r++)
        valid[r] = rows_of(r, n, tmax, shape) * rowb;
    auto &own = buffer<float>(tmax * row_elems);
    auto &gathered = buffer<float>(tmax * row_elems * n);
    auto &partial = buffer<float>(tmax * row_elems * n);
    auto &reduced = buffer<float>(tmax * row_elems);
    const unsigned char canary = 0xA5;
    memset(gathered.data(), canary, gathered.size() * sizeof(float));
    memset(reduced.data(), canary, reduced.size() * sizeof(float));
    for (size_t i = 0; i < own.size(); i++)
        own[i] = ag_val(me, i);
    for (int b = 0; b < n; b++)
        for (size_t i = 0; i < tmax * row_elems; i++)
            partial[b * tmax * row_elems + i] = rs_val(me, b, i);

    incmoe_mr_t *m_own, *m_gat, *m_par, *m_red;
    CHECK_OK(incmoe_mem_register(comm, own.data(), own.size() * 4, &m_own));
    CHECK_OK(incmoe_mem_register(comm, gathered.data(), gathered.size() * 4, &m_gat));
    CHECK_OK(incmoe_mem_register(comm, partial.data(), partial.size() * 4, &m_par));
    CHECK_OK(incmoe_mem_register(comm, reduced.data(), reduced.size() * 4, &m_red));
    /* Band by band, like the MoE pipeline: window [j*band, (j+1)*band) rows of every block. */
    std::vector<incmoe_req_t> reqs;
    for (size_t row = 0; row < tmax; row += band_rows) {
        size_t rows = std::min(band_rows, tmax - row);
        incmoe_layout_t l = {stride, row * rowb, rows * rowb, valid.data()};
        incmoe_req_t ag, rs;
        CHECK_OK(incmoe_allgather(comm, m_own, row * rowb, m_gat, 0, &l, &ag));
        CHECK_OK(incmoe_reducescatter(comm, m_par, 0, m_red, row * rowb, &l, INCMOE_FLOAT32,
                                      INCMOE_SUM, &rs));
        reqs.push_back(ag);
        reqs.push_back(rs);
    }
    for (auto &r : reqs)
        CHECK_OK(incmoe_wait(comm, &r));
    std::ostringstream err;
    const unsigned char *g = (const unsigned char *)gathered.data();
    for (int b = 0; b < n; b++) {
        for (size_t byte = 0; byte < stride; byte += 4) {
            size_t at = b * stride + byte;
            if (byte < valid[b]) {
                float got;
                memcpy(&got, g + at, 4);
                if (got != ag_val(b, byte / 4)) {
                    err << "allgather block " << b << " byte " << byte << ": got " << got
                        << " want " << ag_val(b, byte / 4);
                    return err.str();
                }
            } else if (g[at] != canary || g[at + 3] != canary) {
                err << "allgather wrote outside block " << b << "'s " << valid[b] << " bytes at "
                    << byte;
                return err.str();
            }
        }
    }
    const unsigned char *red = (const unsigned char *)reduced.data();
    for (size_t byte = 0; byte < stride; byte += 4) {
        if (byte < valid[me]) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += rs_val(r, me, byte / 4);
            float got;
            memcpy(&got, red + byte, 4);
            if (got != want) {
                err << "reducescatter byte " << byte << ": got " << got << " want " << want;
                return err.str();
            }
        } else if (red[byte] != canary) {
            err << "reducescatter wrote beyond this rank's " << valid[me] << " bytes at " << byte;
            return err.str();
        }
    }
    CHECK_OK(incmoe_mem_deregister(comm, m_own));
    CHECK_OK(incmoe_mem_deregister(comm, m_gat));
    CHECK_OK(incmoe_mem_deregister(comm, m_par));
    CHECK_OK(incmoe_mem_deregister(comm, m_red));
    return "";
}

TEST_P(Collectives, AllGatherWithReduceScatterEveryRankCount)
{
    for (int n : {1, 2, 3, 4, 5, 8}) {
        run(n, [&](incmoe_comm_t *comm, int me, int nr) -> std::string {
            struct {
                size_t tmax, row, band;
                int shape;
            } cases[] = {
                {1, 1, 1, 0},       /* one element */
                {7, 3, 2, 1},       /* odd sizes, uneven with empty blocks */
                {33, 1000, 8, 2},   /* only the last rank has tokens */
                {20, 16411, 20, 1}, /* ~1.3 MB blocks: not a multiple of the chunk */
                {64, 1024, 5, 0},   /* many bands */
            };
            for (auto &c : cases) {
                std::string e = agrs_case(comm, me, nr, c.tmax, c.row, c.shape, c.band);
                if (!e.empty())
                    return "tmax " + std::to_string(c.tmax) + " row " + std::to_string(c.row) +
                           ": " + e;
            }
            return "";
        });
    }
}

TEST_P(Collectives, SixtyFourMebibytes)
{
    /* 64 MiB gathered/reduced buffer at N=4: 16 MiB blocks, in two bands. */
    run(
        4,
        [&](incmoe_comm_t *comm, int me, int n) -> std::string {
            return agrs_case(comm, me, n, 2048, 2048, 0, 1024);
        },
        300);
}

/* Reference reduction with the library's documented order (see wire.h): integers wrap as
   unsigned arithmetic does, floats add and multiply as they are. */
template <typename T> T op_apply(int op, T a, T b)
{
    using W = typename std::conditional<std::is_integral<T>::value, std::make_unsigned<T>,
                                        std::common_type<T>>::type::type;
    switch (op) {
    case INCMOE_SUM:
        return (T)((W)a + (W)b);
    case INCMOE_PROD:
        return (T)((W)a * (W)b);
    case INCMOE_MAX:
        return a > b ? a : b;
    default:
        return a < b ? a : b;
    }
}

/* Small values whose products and sums stay exact in every type. */
double elem_val(int rank, size_t i, int op)
{
    if (op == INCMOE_PROD)
        return (double)(((rank + (int)i) % 3) - 1 == 0 ? 2 : ((rank + (int)i) % 3) - 1);
    return (double)((rank * 5 + (int)(i % 13)) % 11) - 3;
}

/* Store v as element i of a buffer of type dt. */
void put(incmoe_dtype_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case INCMOE_INT8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case INCMOE_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)(int)v;
        break;
    case INCMOE_INT32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case INCMOE_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v;
        break;
    case INCMOE_INT64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case INCMOE_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v;
        break;
    case INCMOE_FLOAT16:
        ((uint16_t *)buf)[i] = inc_dtype_float_to_half((float)v);
        break;
    case INCMOE_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case INCMOE_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case INCMOE_BFLOAT16:
        ((uint16_t *)buf)[i] = inc_dtype_float_to_bf16((float)v);
        break;
    default:
        break;
    }
}

/* Reference of reducing values[0..n) in that order, returned as the raw bytes of one element. */
std::vector<unsigned char> reference(incmoe_dtype_t dt, int op, const std::vector<double> &vals)
{
    std::vector<unsigned char> out(8, 0);
    auto fold = [&](auto zero) {
        using T = decltype(zero);
        T acc = (T)(std::is_unsigned<T>::value ? (T)(int64_t)vals[0] : (T)vals[0]);
        for (size_t k = 1; k < vals.size(); k++)
            acc = op_apply<T>(op, acc,
                              (T)(std::is_unsigned<T>::value ? (T)(int64_t)vals[k] : (T)vals[k]));
        memcpy(out.data(), &acc, sizeof(T));
    };
    switch (dt) {
    case INCMOE_INT8:
        fold((int8_t)0);
        break;
    case INCMOE_UINT8:
        fold((uint8_t)0);
        break;
    case INCMOE_INT32:
        fold((int32_t)0);
        break;
    case INCMOE_UINT32:
        fold((uint32_t)0);
        break;
    case INCMOE_INT64:
        fold((int64_t)0);
        break;
    case INCMOE_UINT64:
        fold((uint64_t)0);
        break;
    case INCMOE_FLOAT32:
        fold((float)0);
        break;
    case INCMOE_FLOAT64:
        fold((double)0);
        break;
    case INCMOE_FLOAT16:
    case INCMOE_BFLOAT16: {
        /* fp32 accumulation of the widened values, one rounding at the end. */
        float acc = (float)vals[0];
        for (size_t k = 1; k < vals.size(); k++)
            acc = op_apply<float>(op, acc, (float)vals[k]);
        uint16_t u = dt == INCMOE_FLOAT16 ? inc_dtype_float_to_half((float)acc)
                                          : inc_dtype_float_to_bf16((float)acc);
        memcpy(out.data(), &u, 2);
        break;
    }
    default:
        break;
    }
    return out;
}

TEST_P(Collectives, EveryDatatypeAndOperation)
{
    for (int n : {2, 3, 8}) {
        run(n, [&](incmoe_comm_t *comm, int me, int nr) -> std::string {
            const size_t count = 1001; /* per block: not a multiple of anything */
            for (int d = 0; d < INC_DTYPE_COUNT; d++) {
                incmoe_dtype_t dt = (incmoe_dtype_t)d;
                size_t es = incmoe_dtype_size(dt);
                for (int op = 0; op < INC_REDOP_COUNT; op++) {
                    auto &send = buffer<unsigned char>(count * es * nr);
                    auto &recv = buffer<unsigned char>(count * es);
                    auto &ar = buffer<unsigned char>(count * es * nr);
                    for (int b = 0; b < nr; b++)
                        for (size_t i = 0; i < count; i++)
                            put(dt, send.data(), b * count + i, elem_val(me + b, i, op));
                    for (size_t i = 0; i < count * nr; i++)
                        put(dt, ar.data(), i, elem_val(me, i, op));
                    incmoe_mr_t *ms, *mr, *ma;
                    CHECK_OK(incmoe_mem_register(comm, send.data(), send.size(), &ms));
                    CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size(), &mr));
                    CHECK_OK(incmoe_mem_register(comm, ar.data(), ar.size(), &ma));
                    incmoe_layout_t l = {count * es, 0, count * es, nullptr};
                    incmoe_req_t rs, a;
                    CHECK_OK(
                        incmoe_reducescatter(comm, ms, 0, mr, 0, &l, dt, (incmoe_redop_t)op, &rs));
                    CHECK_OK(incmoe_allreduce(comm, ma, 0, ma, 0, count * nr, dt,
                                              (incmoe_redop_t)op, &a));
                    CHECK_OK(incmoe_wait(comm, &rs));
                    CHECK_OK(incmoe_wait(comm, &a));
                    for (size_t i = 0; i < count; i++) {
                        /* The values are small integers, exact in every type, so any
                           order gives the same bits; the order itself is pinned by
                           BitwiseReproducibleWhateverThePostingOrder. */
                        std::vector<double> vals;
                        for (int r = 0; r < nr; r++)
                            vals.push_back(elem_val(r + me, i, op));
                        auto want = reference(dt, op, vals);
                        if (memcmp(recv.data() + i * es, want.data(), es) != 0)
                            return std::string("reducescatter ") + incmoe_dtype_name(dt) + " " +
                                   incmoe_redop_name((incmoe_redop_t)op) + " element " +
                                   std::to_string(i) + " wrong";
                    }
                    for (size_t i = 0; i < count * nr; i++) {
                        std::vector<double> vals;
                        for (int r = 0; r < nr; r++)
                            vals.push_back(elem_val(r, i, op));
                        auto want = reference(dt, op, vals);
                        if (memcmp(ar.data() + i * es, want.data(), es) != 0)
                            return std::string("allreduce ") + incmoe_dtype_name(dt) + " " +
                                   incmoe_redop_name((incmoe_redop_t)op) + " element " +
                                   std::to_string(i) + " wrong";
                    }
                    CHECK_OK(incmoe_mem_deregister(comm, ms));
                    CHECK_OK(incmoe_mem_deregister(comm, mr));
                    CHECK_OK(incmoe_mem_deregister(comm, ma));
                }
            }
            return "";
        });
    }
}

/* A region named by a collective in flight cannot be deregistered (it stays usable);
   once the collective completed it can.  Rank 1 posts the AllGather only after a
   barrier that rank 0 joins after its deregister attempts, so they meet it in flight. */
TEST_P(Collectives, DeregisterInFlightIsBusyThenSucceeds)
{
    run(2, [](incmoe_comm_t *comm, int me, int n) -> std::string {
        const size_t count = 64 * 1024; /* above the rendezvous threshold */
        auto &own = buffer<float>(count);
        auto &gathered = buffer<float>(count * n, -1.0f);
        for (size_t i = 0; i < count; i++)
            own[i] = ag_val(me, i);
        incmoe_mr_t *m_own, *m_gat;
        CHECK_OK(incmoe_mem_register(comm, own.data(), count * sizeof(float), &m_own));
        CHECK_OK(
            incmoe_mem_register(comm, gathered.data(), gathered.size() * sizeof(float), &m_gat));
        incmoe_layout_t l = {count * sizeof(float), 0, count * sizeof(float), nullptr};
        incmoe_req_t ag, bar;
        if (me == 0) {
            CHECK_OK(incmoe_allgather(comm, m_own, 0, m_gat, 0, &l, &ag));
            incmoe_status_t st = incmoe_mem_deregister(comm, m_own);
            if (st != INCMOE_ERR_BUSY)
                return std::string("deregister of the send region in flight gave ") +
                       incmoe_strerror(st);
            st = incmoe_mem_deregister(comm, m_gat);
            if (st != INCMOE_ERR_BUSY)
                return std::string("deregister of the receive region in flight gave ") +
                       incmoe_strerror(st);
            CHECK_OK(incmoe_barrier(comm, &bar));
            CHECK_OK(incmoe_wait(comm, &bar));
        } else {
            CHECK_OK(incmoe_barrier(comm, &bar));
            CHECK_OK(incmoe_wait(comm, &bar));
            CHECK_OK(incmoe_allgather(comm, m_own, 0, m_gat, 0, &l, &ag));
        }
        CHECK_OK(incmoe_wait(comm, &ag));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                if (gathered[r * count + i] != ag_val(r, i))
                    return "block " + std::to_string(r) + " element " + std::to_string(i) +
                           " wrong after a refused deregister";
        CHECK_OK(incmoe_mem_deregister(comm, m_own));
        CHECK_OK(incmoe_mem_deregister(comm, m_gat));
        return "";
    });
}

TEST_P(Collectives, ThousandBackToBackCollectives)
{
    run(
        4,
        [&](incmoe_comm_t *comm, int me, int n) -> std::string {
            const int iters = 1000;
            auto &send = buffer<int32_t>(iters);
            auto &gat = buffer<int32_t>((size_t)iters * n);
            auto &part = buffer<int32_t>((size_t)iters * n);
            auto &red = buffer<int32_t>(iters);
            for (int k = 0; k < iters; k++) {
                send[k] = me * 100000 + k;
                for (int b = 0; b < n; b++)
                    part[(size_t)k * n + b] = me + b + k;
            }
            incmoe_mr_t *ms, *mg, *mp, *mr;
            CHECK_OK(incmoe_mem_register(comm, send.data(), send.size() * 4, &ms));
            CHECK_OK(incmoe_mem_register(comm, gat.data(), gat.size() * 4, &mg));
            CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &mp));
            CHECK_OK(incmoe_mem_register(comm, red.data(), red.size() * 4, &mr));
            std::vector<incmoe_req_t> reqs;
            /* All posted before any is waited for: the epochs carry them apart. */
            for (int k = 0; k < iters; k++) {
                incmoe_layout_t l = {4, 0, 4, nullptr};
                incmoe_req_t ag, rs, b;
                CHECK_OK(incmoe_allgather(comm, ms, k * 4, mg, (size_t)k * n * 4, &l, &ag));
                CHECK_OK(incmoe_reducescatter(comm, mp, (size_t)k * n * 4, mr, k * 4, &l,
                                              INCMOE_INT32, INCMOE_SUM, &rs));
                if (k % 100 == 0) {
                    CHECK_OK(incmoe_barrier(comm, &b));
                    reqs.push_back(b);
                }
                reqs.push_back(ag);
                reqs.push_back(rs);
            }
            for (auto &r : reqs)
                CHECK_OK(incmoe_wait(comm, &r));
            if (incmoe_stream_completed(comm, INCMOE_STREAM_ALLGATHER) != (uint64_t)iters ||
                incmoe_stream_completed(comm, INCMOE_STREAM_REDUCESCATTER) != (uint64_t)iters ||
                incmoe_stream_completed(comm, INCMOE_STREAM_BARRIER) != 10)
                return "stream counters do not match the collectives posted";
            for (int k = 0; k < iters; k++) {
                for (int b = 0; b < n; b++)
                    if (gat[(size_t)k * n + b] != b * 100000 + k)
                        return "allgather " + std::to_string(k) + " block " + std::to_string(b) +
                               " wrong";
                int32_t want = 0;
                for (int r = 0; r < n; r++)
                    want += r + me + k;
                if (red[k] != want)
                    return "reducescatter " + std::to_string(k) + " wrong";
            }
            return "";
        },
        180);
}

/*
 * More collectives outstanding on one stream than its window, all posted before
 * any is waited for (legal use): posts past the window wait for the oldest
 * instead of running past what the switch keeps open, and everything completes.
 */
TEST_P(Collectives, MoreOutstandingThanTheWindowAllComplete)
{
    run(
        2,
        [&](incmoe_comm_t *comm, int me, int n) -> std::string {
            const int iters = 5000;
            static_assert(iters > 4 * INCMOE_STREAM_WINDOW, "past the switch's open epochs too");
            auto &send = buffer<int32_t>(iters);
            auto &gat = buffer<int32_t>((size_t)iters * n, -1);
            for (int k = 0; k < iters; k++)
                send[k] = me * 100000 + k;
            incmoe_mr_t *ms, *mg;
            CHECK_OK(incmoe_mem_register(comm, send.data(), send.size() * 4, &ms));
            CHECK_OK(incmoe_mem_register(comm, gat.data(), gat.size() * 4, &mg));
            std::vector<incmoe_req_t> reqs(iters);
            incmoe_layout_t l = {4, 0, 4, nullptr};
            for (int k = 0; k < iters; k++)
                CHECK_OK(incmoe_allgather(comm, ms, k * 4, mg, (size_t)k * n * 4, &l, &reqs[k]));
            for (auto &r : reqs)
                CHECK_OK(incmoe_wait(comm, &r));
            if (incmoe_stream_completed(comm, INCMOE_STREAM_ALLGATHER) != (uint64_t)iters)
                return "the stream counter does not match the collectives posted";
            for (int k = 0; k < iters; k++)
                for (int b = 0; b < n; b++)
                    if (gat[(size_t)k * n + b] != b * 100000 + k)
                        return "allgather " + std::to_string(k) + " block " + std::to_string(b) +
                               " wrong";
            char text[256] = "";
            if (incmoe_comm_error(comm, text, sizeof(text)) != INCMOE_OK)
                return std::string("the communicator failed: ") + text;
            return "";
        },
        180);
}

/* The order the ranks of a run post in, recorded by the ranks in memory shared with the test. */
struct PostOrder {
    int posted;   /* how many ranks have posted */
    int order[8]; /* order[k]: the k-th rank to post */
};

/* Rank me waits (at most 30 s) until the ranks before it in want have posted. */
bool await_turn(PostOrder *po, const std::vector<int> &want, int me)
{
    int turn = (int)(std::find(want.begin(), want.end(), me) - want.begin());
    for (int ms = 0; ms < 30000; ms++) {
        if (__atomic_load_n(&po->posted, __ATOMIC_ACQUIRE) == turn)
            return true;
        usleep(1000);
    }
    return false;
}

void passed_turn(PostOrder *po, int me)
{
    int k = __atomic_load_n(&po->posted, __ATOMIC_ACQUIRE);
    po->order[k] = me;
    __atomic_store_n(&po->posted, k + 1, __ATOMIC_RELEASE);
}

/*
 * Random data, posted by the ranks one after another in a different order each
 * run (ascending, descending, interleaved; each rank waits for its turn and
 * records it, and the test checks the recorded order): the results must be
 * bitwise the same every time, and equal to the documented order.  What the
 * switch sees is not observed here: a post returns before its data has left,
 * so the arrival order follows the posting order only loosely.  That the
 * reduction order does not depend on arrival is what the comparison with the
 * documented order pins: random fp32 data summed in another order would differ.
 */
TEST_P(Collectives, BitwiseReproducibleWhateverThePostingOrder)
{
    const int n = 5;
    const size_t count = 300000; /* several chunks per block */
    const std::vector<std::vector<int>> orders = {
        {0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}};
    void *shared =
        mmap(nullptr, sizeof(PostOrder), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    PostOrder *po = static_cast<PostOrder *>(shared);
    std::vector<std::string> digests;
    for (int run_no = 0; run_no < (int)orders.size(); run_no++) {
        const std::vector<int> &want = orders[run_no];
        *po = PostOrder{};
        std::string path =
            "/tmp/incmoe-repro-" + std::to_string(getpid()) + "-" + std::to_string(run_no);
        run(n, [&](incmoe_comm_t *comm, int me, int nr) -> std::string {
            std::mt19937 rng(1234 + me); /* same data every run */
            std::uniform_real_distribution<float> dist(-1, 1);
            auto &part = buffer<float>(count * nr);
            auto &red = buffer<float>(count);
            auto &ar = buffer<float>(count);
            for (auto &x : part)
                x = dist(rng);
            for (auto &x : ar)
                x = dist(rng);
            incmoe_mr_t *mp, *mr, *ma;
            CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &mp));
            CHECK_OK(incmoe_mem_register(comm, red.data(), red.size() * 4, &mr));
            CHECK_OK(incmoe_mem_register(comm, ar.data(), ar.size() * 4, &ma));
            if (!await_turn(po, want, me))
                return "rank " + std::to_string(me) + "'s turn to post never came";
            incmoe_layout_t l = {count * 4, 0, count * 4, nullptr};
            incmoe_req_t rs, a;
            CHECK_OK(incmoe_reducescatter(comm, mp, 0, mr, 0, &l, INCMOE_FLOAT32, INCMOE_SUM, &rs));
            CHECK_OK(incmoe_allreduce(comm, ma, 0, ma, 0, count, INCMOE_FLOAT32, INCMOE_SUM, &a));
            passed_turn(po, me);
            CHECK_OK(incmoe_wait(comm, &rs));
            CHECK_OK(incmoe_wait(comm, &a));
            /* Reference in the documented order, from every rank's regenerated data. */
            std::vector<std::vector<float>> all_part(nr), all_ar(nr);
            for (int r = 0; r < nr; r++) {
                std::mt19937 g(1234 + r);
                all_part[r].resize(count * nr);
                all_ar[r].resize(count);
                for (auto &x : all_part[r])
                    x = dist(g);
                for (auto &x : all_ar[r])
                    x = dist(g);
            }
            /* The documented orders.  Switch: the others in ascending rank order, then the
               root's own partial.  Ring: block b's running sum starts at rank b+1 and each
               next rank adds its partial, the block's owner last. */
            auto ring_sum = [&](auto value_of, int owner) {
                float acc = value_of((owner + 1) % nr);
                for (int k = 2; k <= nr; k++)
                    acc = acc + value_of((owner + k) % nr);
                return acc;
            };
            const size_t ar_base = count / nr, ar_extra = count % nr;
            auto ar_block = [&](size_t i) {
                size_t big = ar_extra * (ar_base + 1);
                return (int)(i < big ? i / (ar_base + 1) : ar_extra + (i - big) / ar_base);
            };
            for (size_t i = 0; i < count; i++) {
                float want_rs, want_ar;
                if (GetParam().algo != INCMOE_ALGO_INC) { /* the ring's, a2a's too */
                    want_rs = ring_sum([&](int r) { return all_part[r][me * count + i]; }, me);
                    want_ar = ring_sum([&](int r) { return all_ar[r][i]; }, ar_block(i));
                } else {
                    float others = 0;
                    bool first = true;
                    for (int r = 0; r < nr; r++) {
                        if (r == me)
                            continue;
                        float v = all_part[r][me * count + i];
                        others = first ? v : others + v;
                        first = false;
                    }
                    want_rs = others + all_part[me][me * count + i];
                    want_ar = all_ar[0][i];
                    for (int r = 1; r < nr; r++)
                        want_ar += all_ar[r][i];
                }
                if (memcmp(&red[i], &want_rs, 4) != 0)
                    return "reducescatter element " + std::to_string(i) +
                           " differs from the "
                           "documented order: " +
                           std::to_string(red[i]) + " vs " + std::to_string(want_rs);
                if (memcmp(&ar[i], &want_ar, 4) != 0)
                    return "allreduce element " + std::to_string(i) +
                           " differs from the "
                           "documented order: " +
                           std::to_string(ar[i]) + " vs " + std::to_string(want_ar);
            }
            if (me == 0) {
                FILE *f = fopen(path.c_str(), "wb");
                fwrite(red.data(), 4, count, f);
                fwrite(ar.data(), 4, count, f);
                fclose(f);
            }
            return "";
        });
        EXPECT_EQ(std::vector<int>(po->order, po->order + n), want)
            << "run " << run_no << ": the ranks did not post in the planned order";
        FILE *f = fopen(path.c_str(), "rb");
        std::string bytes;
        if (f != nullptr) {
            char buf[65536];
            size_t k;
            while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
                bytes.append(buf, k);
            fclose(f);
            unlink(path.c_str());
        }
        digests.push_back(bytes);
    }
    munmap(shared, sizeof(PostOrder));
    ASSERT_EQ(digests[0].size(), count * 8);
    EXPECT_TRUE(digests[0] == digests[1] && digests[1] == digests[2]);
}

/* Four ranks of one job on a switch of its own started with switch_args; body runs on each. */
void on_own_switch(const std::vector<std::string> &switch_args,
                   const std::function<std::string(incmoe_comm_t *, int)> &body)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, switch_args));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(4, [&](int me) -> std::string {
        incmoe_comm_t *comm;
        if (harness::comm_create(sw.addr, job, me, 4, &comm) != INCMOE_OK)
            return "create";
        std::string e = body(comm, me);
        destroy_then_free(comm);
        return e;
    });
    EXPECT_EQ(harness::failures(res), "");
    int status = harness::switch_stop(&sw);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The switch's reduction threads (--threads) give the same bits as reducing inline. */
TEST(SwitchThreads, ReductionThreadsGiveTheSameResults)
{
    on_own_switch({"--threads", "3", "--chunk-size", "65536"}, [](incmoe_comm_t *comm, int me) {
        return agrs_case(comm, me, 4, 40, 3001, 1, 7);
    });
}

/* A collective whose windows sum to the small limit goes in one SMALL per rank, one element
   more goes in chunks (inc_wire_is_small; chunk 4096: AllGather 2048 bytes, ReduceScatter 4096):
   both sides of each limit give exact results.  Rows of 128 floats: both small at the AllGather's
   limit; 129: AllGather chunked, ReduceScatter small; 256: ReduceScatter small at its limit;
   257: both chunked. */
TEST(SmallCollectives, BothSidesOfTheLimitAreExact)
{
    on_own_switch({"--chunk-size", "4096"}, [](incmoe_comm_t *comm, int me) {
        std::string e;
        for (size_t row : {128, 129, 256, 257})
            if (e.empty() && !(e = agrs_case(comm, me, 4, 1, row, 0, 1)).empty())
                e = "rows of " + std::to_string(row) + " floats: " + e;
        return e;
    });
}

/* Every test runs on every algorithm: the switch, the ring baseline between the ranks, and a2a
   (the ring's collectives over the full mesh). */
INSTANTIATE_TEST_SUITE_P(
    Algo, Collectives,
    ::testing::Values(Variant{INCMOE_ALGO_INC, false}, Variant{INCMOE_ALGO_RING, false},
                      Variant{INCMOE_ALGO_A2A, false}, Variant{INCMOE_ALGO_INC, true},
                      Variant{INCMOE_ALGO_RING, true}, Variant{INCMOE_ALGO_A2A, true}),
    [](const ::testing::TestParamInfo<Variant> &info) {
        const char *name = info.param.algo == INCMOE_ALGO_INC    ? "inc"
                           : info.param.algo == INCMOE_ALGO_RING ? "ring"
                                                                 : "a2a";
        return std::string(name) + (info.param.rndv ? "_rndv" : "_eager");
    });

} // namespace
