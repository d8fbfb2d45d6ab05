/*
 * test_moe_layer.cc - the INC-MoE layer against an fp64 reference of
 * Equation (1) over all ranks' tokens, in both modes, over both collective
 * algorithms, for N in {1, 2, 4, 8}, every datatype, unequal token counts
 * (including ranks without tokens), tokens whose experts are all remote,
 * bands that are empty on some ranks, band counts from 1 to Tmax and several
 * worker splits with and without tail assistance.
 *
 * Bounds: per token, ||out - ref||_2 <= b * ||m||_2 where m is the sum of the
 * magnitudes of the token's expert contributions and b = 2e-5 (fp32), 4e-3
 * (fp16), 2.5e-2 (bf16) (see moe_ref.cc); pipelined against baseline,
 * per-token cosine similarity >= 0.99999.
 *
 * Routing: masked forwards (dispatch and combine) against the same reference
 * and against full routing's outputs, bitwise in fp32 in-network with the same
 * band plan, on every algorithm that has dispatch and combine (the others
 * refuse masked alike on every rank and fall back to full with auto).
 */
#include <stddef.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"
#include "moe_ref.h"

namespace
{

struct Case {
    moeref::Shape shape;
    std::vector<int> counts;
    std::vector<incmoe_moe_config_t> configs; /* pipelined configurations to run */
};

incmoe_moe_config_t cfg(int nb, int g = 1, int c = 1, int r = 1, int tail = 0)
{
    incmoe_moe_config_t x = {nb, g, c, r, tail};
    return x;
}

/* Runs one forward; copies the output (a view valid until the next forward). */
std::string forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, const moeref::Problem &p, int rank,
                    std::vector<uint8_t> *out)
{
    void *view = nullptr;
    incmoe_status_t st = incmoe_moe_forward(L, mode, p.x[rank].data(), p.ids[rank].data(),
                                            p.w[rank].data(), p.counts.data(), &view);
    if (st != INCMOE_OK)
        return std::string("forward (") + incmoe_moe_mode_name(mode) + "): " + incmoe_strerror(st);
    size_t bytes = (size_t)p.counts[rank] * p.s.H * incmoe_dtype_size(p.s.dtype);
    out->assign(static_cast<uint8_t *>(view), static_cast<uint8_t *>(view) + bytes);
    return "";
}

std::string run_case(incmoe_comm_t *comm, int rank, const Case &c, uint64_t seed)
{
    moeref::Problem p = moeref::make_problem(c.shape, c.counts, seed);
    std::vector<uint8_t> g, u, d;
    moeref::local_weights(p, rank, &g, &u, &d);
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    int T = c.counts[rank];
    std::string tag = std::string(incmoe_dtype_name(c.shape.dtype)) +
                      " N=" + std::to_string(c.shape.N) + " seed=" + std::to_string(seed);

    std::vector<uint8_t> base;
    for (size_t i = 0; i <= c.configs.size(); i++) {
        incmoe_moe_params_t prm = moeref::layer_params(c.shape, comm, g, u, d);
        if (i > 0)
            prm.config = c.configs[i - 1];
        incmoe_moe_t *L;
        incmoe_status_t st = incmoe_moe_create(&prm, &L);
        if (st != INCMOE_OK)
            return tag + ": create: " + incmoe_strerror(st);
        std::vector<uint8_t> out;
        std::string err;
        char cs[128] = "baseline";
        if (i == 0) {
            err = forward(L, INCMOE_MOE_BASELINE, p, rank, &out);
            if (err.empty())
                err = moeref::check_against_ref(out.data(), ref, mag, T, c.shape.H, c.shape.dtype,
                                                "baseline");
            base = out;
        } else {
            incmoe_moe_config_t used;
            incmoe_moe_config_for(L, p.counts.data(), &used);
            incmoe_moe_config_str(&used, cs, sizeof(cs));
            /* Twice: the second forward checks the never-reset counters carry over. */
            for (int rep = 0; rep < 2 && err.empty(); rep++) {
                err = forward(L, INCMOE_MOE_PIPELINED, p, rank, &out);
                if (err.empty())
                    err = moeref::check_against_ref(out.data(), ref, mag, T, c.shape.H,
                                                    c.shape.dtype, "pipelined");
                if (err.empty())
                    err = moeref::check_cosine(out.data(), base.data(), T, c.shape.H, c.shape.dtype,
                                               0.99999, "pipelined vs baseline");
            }
        }
        moeref::destroy_layer(L, &err);
        if (!err.empty())
            return tag + " [" + cs + "]: " + err;
    }
    return "";
}

void run_cases(int N, incmoe_algo_t algo, const std::vector<Case> &cases)
{
    moeref::run_on_ranks(N, algo, [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::string err;
        for (size_t i = 0; i < cases.size() && err.empty(); i++)
            err = run_case(comm, rank, cases[i], 1000 + i);
        return err;
    });
}

const incmoe_dtype_t kDtypes[] = {INCMOE_FLOAT32, INCMOE_FLOAT16, INCMOE_BFLOAT16};

moeref::Shape shape(int N, int E, int k, incmoe_dtype_t dt, int H = 16, int I = 8)
{
    moeref::Shape s;
    s.N = N, s.E = E, s.k = k, s.H = H, s.I = I, s.dtype = dt;
    return s;
}

class MoeLayer : public ::testing::TestWithParam<incmoe_algo_t>
{
};

} // namespace

/* One rank: every band count from 1 to Tmax (and beyond). */
TEST_P(MoeLayer, OneRankEveryBandCount)
{
    std::vector<Case> cases;
    for (auto dt : kDtypes) {
        Case c{shape(1, 4, 2, dt), {9}, {}};
        for (int nb = 1; nb <= 10; nb++)
            c.configs.push_back(cfg(nb));
        cases.push_back(c);
    }
    run_cases(1, GetParam(), cases);
}

/* Two ranks, one without tokens; then none at all; worker splits and tail. */
TEST_P(MoeLayer, TwoRanksUnequalAndEmpty)
{
    std::vector<Case> cases;
    for (auto dt : kDtypes)
        cases.push_back(Case{shape(2, 4, 2, dt), {6, 0}, {cfg(1), cfg(3), cfg(6)}});
    cases.push_back(Case{shape(2, 4, 2, INCMOE_FLOAT32),
                         {5, 3},
                         {cfg(2, 2, 2, 2, 1), cfg(4, 1, 2, 3, 2), cfg(5, 2, 1, 1, 5)}});
    cases.push_back(Case{shape(2, 4, 2, INCMOE_FLOAT32), {0, 0}, {cfg(1), cfg(3)}});
    run_cases(2, GetParam(), cases);
}

/* Four ranks: every band count from 1 to Tmax in fp32; bands beyond some
   ranks' tokens; 16-bit types with tail assistance. */
TEST_P(MoeLayer, FourRanksBandSweep)
{
    std::vector<Case> cases;
    Case c{shape(4, 8, 3, INCMOE_FLOAT32), {5, 0, 3, 7}, {}};
    for (int nb = 1; nb <= 7; nb++)
        c.configs.push_back(cfg(nb));
    c.configs.push_back(cfg(4, 2, 2, 2, 2));
    cases.push_back(c);
    cases.push_back(Case{shape(4, 8, 3, INCMOE_FLOAT16), {5, 0, 3, 7}, {cfg(3, 1, 2, 1, 1)}});
    cases.push_back(Case{shape(4, 8, 3, INCMOE_BFLOAT16), {5, 0, 3, 7}, {cfg(2, 2, 1, 2, 2)}});
    run_cases(4, GetParam(), cases);
}

/* Eight ranks, one expert each: most experts of any token are remote. */
TEST_P(MoeLayer, EightRanks)
{
    std::vector<Case> cases;
    cases.push_back(Case{shape(8, 8, 2, INCMOE_FLOAT32),
                         {3, 0, 1, 4, 0, 2, 5, 1},
                         {cfg(1), cfg(2), cfg(5, 1, 1, 2, 2)}});
    cases.push_back(Case{shape(8, 16, 3, INCMOE_BFLOAT16), {2, 2, 0, 3, 1, 0, 4, 2}, {cfg(3)}});
    run_cases(8, GetParam(), cases);
}

/* The automatic configuration, with a printable choice. */
TEST_P(MoeLayer, AutomaticConfiguration)
{
    std::vector<Case> cases;
    incmoe_moe_config_t automatic = {0, 0, 0, 0, -1};
    cases.push_back(Case{shape(2, 4, 2, INCMOE_FLOAT32, 32, 16), {40, 33}, {automatic}});
    run_cases(2, GetParam(), cases);
}

/* More parts than half the switch's epoch window in one forward, most of them
   in bands past every rank's tokens (they complete on a rank without the
   others): the band barriers that remain keep a fast rank inside the window. */
TEST_P(MoeLayer, ManyPartsStayInEpochWindow)
{
    std::vector<Case> cases;
    cases.push_back(Case{shape(2, 4, 2, INCMOE_FLOAT32), {9, 4}, {cfg(256, 16, 1, 16, 256)}});
    run_cases(2, GetParam(), cases);
}

namespace
{

/* One layer of `c`'s first configuration, a pipelined forward at each depth: every output
   bitwise equal to depth 1's. */
std::string run_depths(incmoe_comm_t *comm, int rank, const Case &c, uint64_t seed)
{
    moeref::Problem p = moeref::make_problem(c.shape, c.counts, seed);
    std::vector<uint8_t> g, u, d;
    moeref::local_weights(p, rank, &g, &u, &d);
    incmoe_moe_params_t prm = moeref::layer_params(c.shape, comm, g, u, d);
    prm.config = c.configs[0];
    incmoe_moe_t *L;
    if (incmoe_moe_create(&prm, &L) != INCMOE_OK)
        return "create failed";
    std::string err;
    std::vector<uint8_t> first;
    for (const char *depth : {"1", "2", "3", "8", "1"}) {
        setenv("INCMOE_MOE_DEPTH", depth, 1);
        std::vector<uint8_t> out;
        err = forward(L, INCMOE_MOE_PIPELINED, p, rank, &out);
        if (!err.empty())
            break;
        if (first.empty())
            first = out;
        else if (out != first) {
            err = std::string("depth ") + depth + ": output differs from depth 1's";
            break;
        }
    }
    unsetenv("INCMOE_MOE_DEPTH");
    incmoe_moe_destroy(L);
    return err;
}

} // namespace

/* The depth of the posting queues changes no result. */
TEST_P(MoeLayer, DepthKeepsResultsBitwise)
{
    const Case cases[] = {
        {shape(3, 6, 3, INCMOE_FLOAT32), {23, 0, 17}, {cfg(7, 2, 2, 2, 2)}},
        {shape(3, 6, 3, INCMOE_BFLOAT16), {5, 11, 9}, {cfg(11, 1, 1, 3, 0)}},
    };
    moeref::run_on_ranks(3, GetParam(), [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::string err;
        for (size_t i = 0; i < 2 && err.empty(); i++)
            err = run_depths(comm, rank, cases[i], 7 + i);
        return err;
    });
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeLayer, ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING),
                         algo_param_name);

namespace
{

/* One forward with a routing; the output copied, the timings (all of them) into *tm. */
std::string forward_routed(incmoe_moe_t *L, incmoe_moe_mode_t mode, incmoe_moe_routing_t routing,
                           const moeref::Problem &p, int rank, std::vector<uint8_t> *out,
                           incmoe_moe_timing_t *tm)
{
    incmoe_moe_forward_params_t f = {};
    f.field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS |
                   INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS | INCMOE_MOE_FWD_ROUTING;
    f.mode = mode;
    f.x = p.x[rank].data();
    f.topk_ids = p.ids[rank].data();
    f.topk_weights = p.w[rank].data();
    f.counts = p.counts.data();
    f.routing = routing;
    void *view = nullptr;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &view);
    std::string what =
        std::string(incmoe_moe_mode_name(mode)) + " " + incmoe_moe_routing_name(routing);
    if (st != INCMOE_OK)
        return "forward (" + what + "): " + incmoe_strerror(st);
    size_t bytes = (size_t)p.counts[rank] * p.s.H * incmoe_dtype_size(p.s.dtype);
    out->assign(static_cast<uint8_t *>(view), static_cast<uint8_t *>(view) + bytes);
    if (incmoe_moe_last_timing_ex(L, tm, sizeof(*tm)) != INCMOE_OK)
        return "last_timing_ex failed";
    return "";
}

incmoe_moe_t *layer_for(incmoe_comm_t *comm, const moeref::Shape &s, const moeref::Problem &p,
                        int rank, incmoe_moe_config_t config, std::vector<uint8_t> w[3])
{
    moeref::local_weights(p, rank, &w[0], &w[1], &w[2]);
    int most = *std::max_element(p.counts.begin(), p.counts.end());
    incmoe_moe_params_t prm =
        moeref::layer_params(s, comm, w[0], w[1], w[2], most > 64 ? most : 64);
    prm.config = config;
    incmoe_moe_t *L = nullptr;
    if (incmoe_moe_create(&prm, &L) != INCMOE_OK)
        return nullptr;
    return L;
}

/* A case run with both routings: "" (passed) or a reason. */
std::string run_routing_case(incmoe_comm_t *comm, int rank, incmoe_algo_t algo, const Case &c,
                             uint64_t seed)
{
    moeref::Problem p = moeref::make_problem(c.shape, c.counts, seed);
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    const int T = c.counts[rank], H = c.shape.H;
    const incmoe_dtype_t dt = c.shape.dtype;
    std::string tag = std::string(incmoe_dtype_name(dt)) + " N=" + std::to_string(c.shape.N) +
                      " seed=" + std::to_string(seed);
    for (const incmoe_moe_config_t &config : c.configs) {
        std::vector<uint8_t> w[3];
        incmoe_moe_t *L = layer_for(comm, c.shape, p, rank, config, w);
        if (L == nullptr)
            return tag + ": create failed";
        char cs[128];
        incmoe_moe_config_str(&config, cs, sizeof(cs));
        std::string err;
        std::vector<uint8_t> full, full_base, masked, out;
        incmoe_moe_timing_t tm;
        err = forward_routed(L, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL, p, rank, &full_base,
                             &tm);
        if (err.empty())
            err = forward_routed(L, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_FULL, p, rank, &full,
                                 &tm);
        if (err.empty())
            err = forward_routed(L, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_MASKED, p, rank,
                                 &masked, &tm);
        if (err.empty() && tm.routing != INCMOE_MOE_ROUTING_MASKED)
            err = "a masked forward reports routing " +
                  std::string(incmoe_moe_routing_name(tm.routing));
        if (err.empty())
            err = moeref::check_against_ref(masked.data(), ref, mag, T, H, dt, "masked");
        /* In the network both routings add the same partials in the same order, and every
           expert's GEMM sees the same rows (plan.h): bitwise alike with the same band plan. */
        if (err.empty() && algo == INCMOE_ALGO_INC && dt == INCMOE_FLOAT32 && masked != full)
            err = "masked output differs from full routing's (fp32, in-network, same band plan)";
        if (err.empty())
            err = moeref::check_cosine(masked.data(), full.data(), T, H, dt, 0.99999,
                                       "masked vs full");
        /* The baseline: dispatch, FFN, combine in sequence, timed as such. */
        if (err.empty())
            err = forward_routed(L, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_MASKED, p, rank, &out,
                                 &tm);
        if (err.empty())
            err = moeref::check_against_ref(out.data(), ref, mag, T, H, dt, "masked baseline");
        if (err.empty() && algo == INCMOE_ALGO_INC && dt == INCMOE_FLOAT32 && out != full_base)
            err = "masked baseline differs from full routing's baseline (fp32, in-network)";
        if (err.empty() && (tm.routing != INCMOE_MOE_ROUTING_MASKED || tm.allgather_ms != 0 ||
                            tm.reducescatter_ms != 0 || tm.dispatch_ms <= 0 || tm.combine_ms <= 0))
            err = "masked baseline timings: dispatch " + std::to_string(tm.dispatch_ms) +
                  " combine " + std::to_string(tm.combine_ms) + " allgather " +
                  std::to_string(tm.allgather_ms);
        /* Masked again, after a full forward: the FIFO's tickets carry over. */
        if (err.empty())
            err = forward_routed(L, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_MASKED, p, rank, &out,
                                 &tm);
        if (err.empty() && out != masked)
            err = "a second masked forward differs from the first";
        moeref::destroy_layer(L, &err);
        if (!err.empty())
            return tag + " [" + cs + "]: " + err;
    }
    return "";
}

/* Runs cases on N ranks with both routings; skipped (saying so) where the algorithm has no
   dispatch and combine. */
void run_routing_cases(int N, incmoe_algo_t algo, const std::vector<Case> &cases)
{
    moeref::run_on_ranks(N, algo, [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::string err;
        for (size_t i = 0; i < cases.size() && err.empty(); i++)
            err = run_routing_case(comm, rank, algo, cases[i], 2000 + i);
        return err;
    });
}

class MoeLayerRouting : public ::testing::TestWithParam<incmoe_algo_t>
{
};

} // namespace

/* Masked routing against the reference and full routing: every datatype, ranks without
   tokens, tokens whose experts are all remote (all_remote_every), bands empty on some ranks,
   several band counts and worker splits (tail assistance asked for is dropped). */
TEST_P(MoeLayerRouting, MaskedEqualsFull)
{
    std::vector<Case> cases;
    for (auto dt : kDtypes)
        cases.push_back(Case{
            shape(4, 8, 3, dt), {5, 0, 3, 7}, {cfg(1), cfg(3, 1, 1, 1, 1), cfg(3, 1, 2, 1, 1)}});
    cases.push_back(Case{shape(4, 8, 2, INCMOE_FLOAT32),
                         {9, 4, 0, 6},
                         {cfg(2, 2, 2, 2, 2), cfg(4, 1, 1, 3, 0), cfg(9, 2, 3, 1, 4)}});
    cases.push_back(Case{shape(2, 4, 2, INCMOE_FLOAT32), {0, 0}, {cfg(1), cfg(3)}});
    run_routing_cases(4, GetParam(), std::vector<Case>(cases.begin(), cases.end() - 1));
    run_routing_cases(2, GetParam(), {cases.back()});
}

/* Bands of hundreds of rows: a row's result is its own whatever rows share its GEMM
   (tests/test_moe_ffn.cc), so the outputs stay bitwise alike whatever the worker split. */
TEST_P(MoeLayerRouting, BandsLongerThanATile)
{
    run_routing_cases(2, GetParam(),
                      {Case{shape(2, 4, 2, INCMOE_FLOAT32, 8, 4),
                            {300, 280},
                            {cfg(1), cfg(1, 1, 3, 1, 0), cfg(2, 2, 2, 1, 0)}}});
}

/* One rank (every row its own, copied locally) and eight (one expert each: most of a token's
   experts are remote). */
TEST_P(MoeLayerRouting, OneAndEightRanks)
{
    run_routing_cases(1, GetParam(), {Case{shape(1, 4, 2, INCMOE_FLOAT32), {9}, {cfg(1), cfg(4)}}});
    run_routing_cases(8, GetParam(),
                      {Case{shape(8, 8, 2, INCMOE_FLOAT32),
                            {3, 0, 1, 4, 0, 2, 5, 1},
                            {cfg(1), cfg(2), cfg(5, 1, 1, 2, 2)}},
                       Case{shape(8, 16, 3, INCMOE_BFLOAT16), {2, 2, 0, 3, 1, 0, 4, 2}, {cfg(3)}}});
}

/* Auto picks masked where it moves far fewer bytes (one expert a token: each token to at most
   one other rank) and full where every token goes to every rank (k = E), the same on every
   rank, with the chosen routing's outputs; the pre-routing timing call writes only the fields
   it had. */
TEST_P(MoeLayerRouting, AutoPicksByBytes)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    const incmoe_algo_t algo = GetParam();
    const int N = 4;
    auto res = harness::run_ranks(N, [&](int rank) -> std::string {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        std::string err;
        incmoe_comm_t *comm = moeref::comm_create(sw.addr, job, rank, N, algo, &err);
        if (comm == nullptr)
            return err;
        for (int k : {1, 8}) {
            moeref::Problem p =
                moeref::make_problem(shape(N, 8, k, INCMOE_FLOAT32), {7, 5, 0, 9}, 31 + k, 0);
            std::vector<uint8_t> w[3], a, b;
            incmoe_moe_t *L = layer_for(comm, p.s, p, rank, cfg(2), w);
            if (L == nullptr) {
                err = "create failed";
                break;
            }
            incmoe_moe_timing_t tm;
            err =
                forward_routed(L, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_AUTO, p, rank, &a, &tm);
            incmoe_moe_routing_t chose = tm.routing;
            if (err.empty())
                err = forward_routed(L, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_MASKED, p, rank,
                                     &b, &tm);
            incmoe_moe_routing_t want =
                k == 1 ? INCMOE_MOE_ROUTING_MASKED : INCMOE_MOE_ROUTING_FULL;
            if (err.empty() && chose != want)
                err = "k=" + std::to_string(k) + ": auto chose " + incmoe_moe_routing_name(chose);
            if (err.empty() && chose == INCMOE_MOE_ROUTING_MASKED && a != b)
                err = "auto's masked forward differs from masked";
            /* The call from before routing fills the first five fields only. */
            incmoe_moe_timing_t old;
            memset(&old, 0xab, sizeof(old));
            incmoe_moe_timing_t guard = old;
            if (err.empty() && (incmoe_moe_last_timing(L, &old) != INCMOE_OK ||
                                memcmp(&old.dispatch_ms, &guard.dispatch_ms,
                                       sizeof(old) - offsetof(incmoe_moe_timing_t, dispatch_ms))))
                err = "incmoe_moe_last_timing wrote past the fields it had";
            incmoe_moe_destroy(L);
            if (!err.empty())
                break;
        }
        incmoe_comm_destroy(comm);
        return err;
    });
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeLayerRouting,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_param_name);

/* The automatic choice follows the token count, obeys the settings and the
   parameters (parameters first), and prints every field. */
TEST(MoeConfig, ChoiceOverridesAndPrint)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(1, [&](int rank) -> std::string {
        std::string err;
        incmoe_comm_t *comm = moeref::comm_create(sw.addr, job, rank, 1, INCMOE_ALGO_INC, &err);
        if (comm == nullptr)
            return err;
        moeref::Problem p = moeref::make_problem(shape(1, 4, 2, INCMOE_FLOAT32), {1}, 1);
        std::vector<uint8_t> g, u, d;
        moeref::local_weights(p, 0, &g, &u, &d);
        incmoe_moe_params_t prm;
        incmoe_moe_params_init(&prm);
        prm.num_experts = 4, prm.top_k = 2, prm.hidden = 16, prm.intermediate = 8;
        prm.comm = comm, prm.max_tokens = 4096;
        prm.w_gate = g.data(), prm.w_up = u.data(), prm.w_down = d.data();
        unsetenv("INCMOE_MOE_BANDS");
        unsetenv("INCMOE_MOE_WORKERS");
        unsetenv("INCMOE_MOE_TAIL");
        /* The model's costs are fixed when the layer is created. */
        setenv("INCMOE_MOE_GFLOPS", "1", 1);
        setenv("INCMOE_MOE_BAND_US", "10", 1);
        incmoe_moe_t *L;
        if (incmoe_moe_create(&prm, &L) != INCMOE_OK)
            return "create failed";
        incmoe_moe_config_t c;
        int small[1] = {3}, big[1] = {4096};
        incmoe_moe_config_for(L, small, &c);
        if (c.nbands != 1 || c.tail_bands != 0 || c.gather_workers != 1 || c.reduce_workers != 1 ||
            c.compute_workers < 1)
            err = "3 tokens: expected one band, no tail, 1/x/1 workers";
        /* One rank has no communication: the FFN is the stage, 4096 tokens of this
           shape take 6.3 ms at 1 GFLOP/s; with 10 us per band the model wants
           sqrt(2 * 6.3 ms / 10 us) = 35 bands. */
        incmoe_moe_config_for(L, big, &c);
        if (err.empty() && (c.nbands < 30 || c.nbands > 40 || c.tail_bands != 1))
            err = "4096 tokens: expected about 35 bands with one tail band, got nb=" +
                  std::to_string(c.nbands) + " tail=" + std::to_string(c.tail_bands);
        setenv("INCMOE_MOE_BANDS", "5", 1);
        setenv("INCMOE_MOE_WORKERS", "2,3,1", 1);
        setenv("INCMOE_MOE_TAIL", "2", 1);
        incmoe_moe_config_for(L, big, &c);
        char text[128];
        incmoe_moe_config_str(&c, text, sizeof(text));
        if (err.empty() && std::string(text) != "nb=5 workers(gather/compute/reduce)=2/3/1 tail=2")
            err = std::string("settings not obeyed or printed: ") + text;
        incmoe_moe_destroy(L);
        prm.config = {7, 1, 0, 2, 0}; /* compute workers left to the settings */
        if (err.empty() && incmoe_moe_create(&prm, &L) != INCMOE_OK)
            err = "create with overrides failed";
        else if (err.empty()) {
            incmoe_moe_config_for(L, big, &c);
            incmoe_moe_config_str(&c, text, sizeof(text));
            if (std::string(text) != "nb=7 workers(gather/compute/reduce)=1/3/2 tail=0")
                err = std::string("parameters should win over settings (compute from the "
                                  "setting): ") +
                      text;
            incmoe_moe_destroy(L);
        }
        incmoe_comm_destroy(comm);
        return err;
    });
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

/* Ranks whose model costs differ (set differently here; measured, they differ by
   themselves) choose alike: the slowest rank's costs, as if every rank had them. */
TEST(MoeConfig, RanksAgreeOnTheModel)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    const int N = 3;
    auto res = harness::run_ranks(N, [&](int rank) -> std::string {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        unsetenv("INCMOE_MOE_BANDS");
        std::string err;
        incmoe_comm_t *comm = moeref::comm_create(sw.addr, job, rank, N, INCMOE_ALGO_INC, &err);
        if (comm == nullptr)
            return err;
        moeref::Problem p = moeref::make_problem(shape(N, 6, 2, INCMOE_FLOAT32), {40, 33, 20}, 3);
        std::vector<uint8_t> g, u, d;
        moeref::local_weights(p, rank, &g, &u, &d);
        incmoe_moe_params_t prm;
        incmoe_moe_params_init(&prm);
        prm.num_experts = 6, prm.top_k = 2, prm.hidden = 16, prm.intermediate = 8;
        prm.comm = comm, prm.max_tokens = 64, prm.timeout_ms = 20000;
        prm.w_gate = g.data(), prm.w_up = u.data(), prm.w_down = d.data();
        /* Each rank is the slowest in one cost. */
        const char *band_us[] = {"10", "40", "160"}, *gflops[] = {"1", "4", "2"},
                   *mbps[] = {"1000", "100", "10000"};
        setenv("INCMOE_MOE_BAND_US", band_us[rank], 1);
        setenv("INCMOE_MOE_GFLOPS", gflops[rank], 1);
        setenv("INCMOE_MOE_LINK_MBPS", mbps[rank], 1);
        incmoe_moe_t *L, *M;
        if (incmoe_moe_create(&prm, &L) != INCMOE_OK)
            return "create with differing costs failed";
        setenv("INCMOE_MOE_BAND_US", "160", 1);
        setenv("INCMOE_MOE_GFLOPS", "1", 1);
        setenv("INCMOE_MOE_LINK_MBPS", "100", 1);
        if (incmoe_moe_create(&prm, &M) != INCMOE_OK)
            return "create with the slowest costs failed";
        const int sizes[][N] = {{4096, 4096, 4096}, {1000, 200, 3000}, {64, 0, 9}};
        for (const auto &counts : sizes) {
            incmoe_moe_config_t a, b;
            incmoe_moe_config_for(L, counts, &a);
            incmoe_moe_config_for(M, counts, &b);
            char ta[128], tb[128];
            incmoe_moe_config_str(&a, ta, sizeof(ta));
            incmoe_moe_config_str(&b, tb, sizeof(tb));
            if (err.empty() && std::string(ta) != tb)
                err = std::string("differing costs chose ") + ta + ", the slowest's " + tb;
        }
        /* The forward's exchange fails on a rank that chose otherwise. */
        std::vector<uint8_t> out;
        if (err.empty())
            err = forward(L, INCMOE_MOE_PIPELINED, p, rank, &out);
        incmoe_moe_destroy(M);
        incmoe_moe_destroy(L);
        incmoe_comm_destroy(comm);
        return err;
    });
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}
