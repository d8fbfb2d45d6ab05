/*
 * test_moe_stress.cc - many random shapes, token counts, datatypes and
 * pipeline configurations through one communicator, each pipelined forward
 * checked against the fp64 reference and against the baseline; then a forward
 * with masked or auto routing in either mode against the reference and the
 * pipelined full forward (bitwise in fp32 in-network, with the same bands).
 */
#include <string.h>

#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "moe_ref.h"

namespace
{

std::string one(incmoe_comm_t *comm, int rank, int N, incmoe_algo_t algo, std::mt19937 &rng,
                int iter)
{
    auto rnd = [&](int lo, int hi) { return lo + (int)(rng() % (unsigned)(hi - lo + 1)); };
    moeref::Shape s;
    s.N = N;
    s.E = N * rnd(1, 3);
    s.k = rnd(1, s.E < 4 ? s.E : 4);
    s.H = rnd(1, 40);
    s.I = rnd(1, 24);
    const incmoe_dtype_t d[] = {INCMOE_FLOAT32, INCMOE_FLOAT16, INCMOE_BFLOAT16};
    s.dtype = d[rnd(0, 2)];
    std::vector<int> counts(N);
    int tmax = 0;
    for (auto &c : counts) {
        c = rnd(0, 4) == 0 ? 0 : rnd(1, 24);
        tmax = c > tmax ? c : tmax;
    }
    incmoe_moe_config_t cfg = {rnd(1, tmax + 2), rnd(1, 3), rnd(1, 3), rnd(1, 3), 0};
    cfg.tail_bands = rnd(0, cfg.nbands);
    /* All ranks draw the same numbers (same seed); the problem seed too. */
    moeref::Problem p = moeref::make_problem(s, counts, 5000 + iter, rnd(0, 3));
    std::vector<uint8_t> g, u, dn;
    moeref::local_weights(p, rank, &g, &u, &dn);
    incmoe_moe_params_t prm = moeref::layer_params(s, comm, g, u, dn, 24);
    prm.config = cfg;
    char desc[256];
    char cs[128];
    incmoe_moe_config_str(&cfg, cs, sizeof(cs));
    snprintf(desc, sizeof(desc), "iter %d: E=%d k=%d H=%d I=%d %s Tmax=%d %s", iter, s.E, s.k, s.H,
             s.I, incmoe_dtype_name(s.dtype), tmax, cs);
    incmoe_moe_t *L;
    incmoe_status_t st = incmoe_moe_create(&prm, &L);
    if (st != INCMOE_OK)
        return std::string(desc) + ": create: " + incmoe_strerror(st);
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    std::vector<uint8_t> base, piped;
    std::string err;
    size_t bytes = (size_t)counts[rank] * s.H * incmoe_dtype_size(s.dtype);
    incmoe_moe_routing_t routing =
        rnd(0, 2) == 0 ? INCMOE_MOE_ROUTING_AUTO : INCMOE_MOE_ROUTING_MASKED;
    incmoe_moe_mode_t routed_mode = rnd(0, 3) == 0 ? INCMOE_MOE_BASELINE : INCMOE_MOE_PIPELINED;
    for (int m = 0; m < 2 && err.empty(); m++) {
        incmoe_moe_mode_t mode = m == 0 ? INCMOE_MOE_BASELINE : INCMOE_MOE_PIPELINED;
        void *out;
        st = incmoe_moe_forward(L, mode, p.x[rank].data(), p.ids[rank].data(), p.w[rank].data(),
                                counts.data(), &out);
        if (st != INCMOE_OK) {
            err = std::string(incmoe_moe_mode_name(mode)) + ": " + incmoe_strerror(st);
            break;
        }
        err = moeref::check_against_ref(out, ref, mag, counts[rank], s.H, s.dtype,
                                        incmoe_moe_mode_name(mode));
        if (m == 0)
            base.assign((uint8_t *)out, (uint8_t *)out + bytes);
        else if (err.empty())
            err = moeref::check_cosine(out, base.data(), counts[rank], s.H, s.dtype, 0.99999,
                                       "pipelined vs baseline");
        if (m == 1)
            piped.assign((uint8_t *)out, (uint8_t *)out + bytes);
    }
    if (err.empty()) {
        incmoe_moe_forward_params_t f = {};
        f.field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS |
                       INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS | INCMOE_MOE_FWD_ROUTING;
        f.mode = routed_mode;
        f.x = p.x[rank].data(), f.topk_ids = p.ids[rank].data(), f.topk_weights = p.w[rank].data();
        f.counts = counts.data();
        f.routing = routing;
        void *out;
        incmoe_moe_timing_t tm;
        std::string what =
            std::string(incmoe_moe_routing_name(routing)) + " " + incmoe_moe_mode_name(routed_mode);
        st = incmoe_moe_forward_ex(L, &f, &out);
        incmoe_moe_last_timing_ex(L, &tm, sizeof(tm));
        if (st != INCMOE_OK)
            err = what + ": " + incmoe_strerror(st);
        else
            err =
                moeref::check_against_ref(out, ref, mag, counts[rank], s.H, s.dtype, what.c_str());
        const std::vector<uint8_t> &same = routed_mode == INCMOE_MOE_BASELINE ? base : piped;
        /* bytes > 0: a rank without tokens has nothing to compare (and memcmp takes no NULL). */
        if (err.empty() && bytes > 0 && algo == INCMOE_ALGO_INC && s.dtype == INCMOE_FLOAT32 &&
            memcmp(out, same.data(), bytes) != 0)
            err = what + " differs from full routing with the same bands (fp32, in-network)";
        if (err.empty())
            err = moeref::check_cosine(out, same.data(), counts[rank], s.H, s.dtype, 0.99999,
                                       (what + " vs full").c_str());
    }
    incmoe_moe_destroy(L);
    return err.empty() ? "" : std::string(desc) + ": " + err;
}

class MoeStress : public ::testing::TestWithParam<std::tuple<int, incmoe_algo_t>>
{
};

} // namespace

TEST_P(MoeStress, RandomShapesAndConfigurations)
{
    const int N = std::get<0>(GetParam());
    const incmoe_algo_t algo = std::get<1>(GetParam());
    moeref::run_on_ranks(N, algo, [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::string err;
        std::mt19937 rng(424242 + N);
        for (int it = 0; it < 40 && err.empty(); it++)
            err = one(comm, rank, N, algo, rng, it);
        return err;
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, MoeStress,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING)),
                         [](const ::testing::TestParamInfo<std::tuple<int, incmoe_algo_t>> &i) {
                             return "N" + std::to_string(std::get<0>(i.param)) +
                                    (std::get<1>(i.param) == INCMOE_ALGO_INC ? "_inc" : "_ring");
                         });
