/*
 * test_moe_errors.cc - bad arguments give a clear error on every rank, never
 * a hang: each case runs under the harness's timeout, every rank must see the
 * stated error, and afterwards a good forward must still work.
 */
#include <string.h>

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "moe_ref.h"

namespace
{

const int N = 4;

struct Ctx {
    int rank;
    incmoe_comm_t *comm;
    moeref::Problem p;
    std::vector<uint8_t> g, u, d;
    incmoe_moe_params_t prm;
};

std::string expect(const char *what, incmoe_status_t got, incmoe_status_t want)
{
    if (got == want)
        return "";
    return std::string(what) + ": got " + incmoe_strerror(got) + ", expected " +
           incmoe_strerror(want);
}

/* A good forward after an error: the layer is still usable and correct. */
std::string good_forward(Ctx &c, incmoe_moe_t *L)
{
    void *out;
    incmoe_status_t st =
        incmoe_moe_forward(L, INCMOE_MOE_PIPELINED, c.p.x[c.rank].data(), c.p.ids[c.rank].data(),
                           c.p.w[c.rank].data(), c.p.counts.data(), &out);
    if (st != INCMOE_OK)
        return std::string("good forward after the error: ") + incmoe_strerror(st);
    std::vector<double> mag, ref = moeref::reference(c.p, c.rank, &mag);
    return moeref::check_against_ref(out, ref, mag, c.p.counts[c.rank], c.p.s.H, c.p.s.dtype,
                                     "good forward after the error");
}

void run(const std::function<std::string(Ctx &)> &body)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        N,
        [&](int rank) -> std::string {
            Ctx c;
            std::string err;
            c.rank = rank;
            c.comm = moeref::comm_create(sw.addr, job, rank, N, INCMOE_ALGO_INC, &err);
            if (c.comm == nullptr)
                return err;
            moeref::Shape s;
            s.N = N, s.E = 8, s.k = 2, s.H = 16, s.I = 8;
            c.p = moeref::make_problem(s, {3, 1, 0, 4}, 77);
            moeref::local_weights(c.p, rank, &c.g, &c.u, &c.d);
            incmoe_moe_params_init(&c.prm);
            c.prm.num_experts = s.E;
            c.prm.top_k = s.k;
            c.prm.hidden = s.H;
            c.prm.intermediate = s.I;
            c.prm.comm = c.comm;
            c.prm.max_tokens = 8;
            c.prm.w_gate = c.g.data();
            c.prm.w_up = c.u.data();
            c.prm.w_down = c.d.data();
            c.prm.config.nbands = 2;
            err = body(c);
            incmoe_comm_destroy(c.comm);
            return err;
        },
        60);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

/* Creates the layer with prm modified on some ranks; expects want everywhere. */
std::string create_case(Ctx &c, const std::function<void(incmoe_moe_params_t &)> &bad,
                        bool only_rank1, incmoe_status_t want)
{
    incmoe_moe_params_t prm = c.prm;
    if (!only_rank1 || c.rank == 1)
        bad(prm);
    incmoe_moe_t *L = nullptr;
    incmoe_status_t st = incmoe_moe_create(&prm, &L);
    if (st == INCMOE_OK)
        incmoe_moe_destroy(L);
    return expect("create", st, want);
}

/* Runs a forward with arguments modified on some ranks; expects want
   everywhere, then a good forward. */
std::string
forward_case(Ctx &c,
             const std::function<void(std::vector<int32_t> &ids, std::vector<int> &counts,
                                      incmoe_moe_mode_t &mode)> &bad,
             incmoe_status_t want, bool good_after = true)
{
    incmoe_moe_t *L;
    incmoe_status_t st = incmoe_moe_create(&c.prm, &L);
    if (st != INCMOE_OK)
        return std::string("create: ") + incmoe_strerror(st);
    std::vector<int32_t> ids = c.p.ids[c.rank];
    std::vector<int> counts = c.p.counts;
    incmoe_moe_mode_t mode = INCMOE_MOE_PIPELINED;
    bad(ids, counts, mode);
    void *out = nullptr;
    st = incmoe_moe_forward(L, mode, c.p.x[c.rank].data(), ids.data(), c.p.w[c.rank].data(),
                            counts.data(), &out);
    std::string err = expect("forward", st, want);
    if (err.empty() && good_after)
        err = good_forward(c, L);
    incmoe_moe_destroy(L);
    return err;
}

} // namespace

TEST(MoeErrors, TopKAboveExpertsOnEveryRank)
{
    harness::ExpectErrors errors_expected("top_k is above the experts");
    run([](Ctx &c) {
        return create_case(
            c, [](incmoe_moe_params_t &p) { p.top_k = 9; }, false, INCMOE_ERR_INVALID_ARG);
    });
}

TEST(MoeErrors, TopKAboveExpertsOnOneRank)
{
    harness::ExpectErrors errors_expected("top_k is above the experts on one rank");
    run([](Ctx &c) {
        return create_case(
            c, [](incmoe_moe_params_t &p) { p.top_k = 9; }, true, INCMOE_ERR_INVALID_ARG);
    });
}

TEST(MoeErrors, ExpertsNotDivisibleByRanks)
{
    harness::ExpectErrors errors_expected("the experts do not divide over the ranks");
    run([](Ctx &c) {
        return create_case(
            c, [](incmoe_moe_params_t &p) { p.num_experts = 6; }, false, INCMOE_ERR_INVALID_ARG);
    });
}

TEST(MoeErrors, ShapeDisagreesAcrossRanks)
{
    harness::ExpectErrors errors_expected("the ranks' shapes disagree");
    run([](Ctx &c) {
        return create_case(
            c, [](incmoe_moe_params_t &p) { p.intermediate = 4; }, true, INCMOE_ERR_MISMATCH);
    });
}

TEST(MoeErrors, SizesOverTheBound)
{
    harness::ExpectErrors errors_expected("sizes are over the bound");
    run([](Ctx &c) {
        std::string e = create_case(
            c, [](incmoe_moe_params_t &p) { p.hidden = 1 << 20; }, false, INCMOE_ERR_INVALID_ARG);
        if (e.empty())
            e = create_case(
                c, [](incmoe_moe_params_t &p) { p.max_tokens = 1 << 30; }, true,
                INCMOE_ERR_INVALID_ARG);
        return e;
    });
}

TEST(MoeErrors, ExpertIdOutOfRangeOnOneRank)
{
    harness::ExpectErrors errors_expected("an expert id is out of range");
    run([](Ctx &c) {
        return forward_case(
            c,
            [&](std::vector<int32_t> &ids, std::vector<int> &, incmoe_moe_mode_t &) {
                if (c.rank == 3)
                    ids[1] = 8;
            },
            INCMOE_ERR_INVALID_ARG);
    });
}

TEST(MoeErrors, NegativeExpertIdAndDuplicateIds)
{
    harness::ExpectErrors errors_expected("expert ids are negative or repeated");
    run([](Ctx &c) {
        std::string e = forward_case(
            c,
            [&](std::vector<int32_t> &ids, std::vector<int> &, incmoe_moe_mode_t &) {
                if (c.rank == 0)
                    ids[0] = -1;
            },
            INCMOE_ERR_INVALID_ARG);
        if (e.empty())
            e = forward_case(
                c,
                [&](std::vector<int32_t> &ids, std::vector<int> &, incmoe_moe_mode_t &) {
                    if (c.rank == 1)
                        ids[1] = ids[0];
                },
                INCMOE_ERR_INVALID_ARG);
        return e;
    });
}

TEST(MoeErrors, CountsDisagreeAcrossRanks)
{
    harness::ExpectErrors errors_expected("the ranks' counts disagree");
    run([](Ctx &c) {
        return forward_case(
            c,
            [&](std::vector<int32_t> &, std::vector<int> &counts, incmoe_moe_mode_t &) {
                if (c.rank == 2)
                    counts[0] = 2;
            },
            INCMOE_ERR_MISMATCH);
    });
}

TEST(MoeErrors, CountOverTheBound)
{
    harness::ExpectErrors errors_expected("a count is over the bound");
    run([](Ctx &c) {
        return forward_case(
            c,
            [&](std::vector<int32_t> &, std::vector<int> &counts, incmoe_moe_mode_t &) {
                counts[2] = 9;
            },
            INCMOE_ERR_INVALID_ARG);
    });
}

TEST(MoeErrors, ModeDisagreesAcrossRanks)
{
    harness::ExpectErrors errors_expected("the ranks' modes disagree");
    run([](Ctx &c) {
        return forward_case(
            c,
            [&](std::vector<int32_t> &, std::vector<int> &, incmoe_moe_mode_t &mode) {
                if (c.rank == 1)
                    mode = INCMOE_MOE_BASELINE;
            },
            INCMOE_ERR_MISMATCH);
    });
}

TEST(MoeErrors, BandCountDisagreesAcrossRanks)
{
    harness::ExpectErrors errors_expected("the ranks' band counts disagree");
    run([](Ctx &c) {
        if (c.rank == 2)
            c.prm.config.nbands = 3;
        /* The layers themselves disagree, so no later forward can succeed either. */
        return forward_case(
            c, [](std::vector<int32_t> &, std::vector<int> &, incmoe_moe_mode_t &) {},
            INCMOE_ERR_MISMATCH, false);
    });
}

namespace
{

/* A forward asking for `routing` (the field when field is set, else INCMOE_MOE_ROUTING as
   set by the caller); its status, and the routing it ran in *used. */
incmoe_status_t routed_forward(Ctx &c, incmoe_moe_t *L, bool field, int routing,
                               incmoe_moe_routing_t *used)
{
    incmoe_moe_forward_params_t f = {};
    f.field_mask = INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS | INCMOE_MOE_FWD_TOPK_WEIGHTS |
                   INCMOE_MOE_FWD_COUNTS | (field ? INCMOE_MOE_FWD_ROUTING : 0);
    f.x = c.p.x[c.rank].data();
    f.topk_ids = c.p.ids[c.rank].data();
    f.topk_weights = c.p.w[c.rank].data();
    f.counts = c.p.counts.data();
    f.routing = (incmoe_moe_routing_t)routing;
    void *out;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &out);
    incmoe_moe_timing_t tm;
    incmoe_moe_last_timing_ex(L, &tm, sizeof(tm));
    *used = tm.routing;
    return st;
}

} // namespace

/* A routing no rank knows, on one rank: refused on every rank; the layer carries on. */
TEST(MoeErrors, RoutingOutOfRangeOnOneRank)
{
    harness::ExpectErrors errors_expected("a routing is out of range");
    run([](Ctx &c) {
        incmoe_moe_t *L;
        if (incmoe_moe_create(&c.prm, &L) != INCMOE_OK)
            return std::string("create failed");
        incmoe_moe_routing_t used;
        std::string e = expect("forward", routed_forward(c, L, true, c.rank == 0 ? 7 : 0, &used),
                               INCMOE_ERR_INVALID_ARG);
        if (e.empty())
            e = good_forward(c, L);
        incmoe_moe_destroy(L);
        return e;
    });
}

/* Ranks asking for different routings (one through the setting, which a forward without the
   field follows): a mismatch on every rank; the layer carries on. */
TEST(MoeErrors, RoutingDisagreesAcrossRanks)
{
    harness::ExpectErrors errors_expected("the ranks' routings disagree");
    run([](Ctx &c) {
        incmoe_moe_t *L;
        if (incmoe_moe_create(&c.prm, &L) != INCMOE_OK)
            return std::string("create failed");
        incmoe_moe_routing_t used;
        if (c.rank == 2)
            setenv("INCMOE_MOE_ROUTING", "masked", 1);
        std::string e =
            expect("forward", routed_forward(c, L, false, 0, &used), INCMOE_ERR_MISMATCH);
        unsetenv("INCMOE_MOE_ROUTING");
        if (e.empty())
            e = good_forward(c, L);
        incmoe_moe_destroy(L);
        return e;
    });
}

/* A setting that names no routing is logged and full routing used. */
TEST(MoeErrors, RoutingSettingThatIsNoRoutingRunsFull)
{
    run([](Ctx &c) {
        incmoe_moe_t *L;
        if (incmoe_moe_create(&c.prm, &L) != INCMOE_OK)
            return std::string("create failed");
        setenv("INCMOE_MOE_ROUTING", "sideways", 1);
        incmoe_moe_routing_t used = INCMOE_MOE_ROUTING_AUTO;
        std::string e = expect("forward", routed_forward(c, L, false, 0, &used), INCMOE_OK);
        unsetenv("INCMOE_MOE_ROUTING");
        if (e.empty() && used != INCMOE_MOE_ROUTING_FULL)
            e = std::string("ran ") + incmoe_moe_routing_name(used);
        incmoe_moe_destroy(L);
        return e;
    });
}

TEST(MoeErrors, NullArgumentsAreRejectedLocally)
{
    EXPECT_EQ(incmoe_moe_create(nullptr, nullptr), INCMOE_ERR_INVALID_ARG);
    incmoe_moe_params_t p;
    incmoe_moe_params_init(&p);
    incmoe_moe_t *L;
    EXPECT_EQ(incmoe_moe_create(&p, &L), INCMOE_ERR_INVALID_ARG); /* no communicator */
    void *out;
    EXPECT_EQ(
        incmoe_moe_forward(nullptr, INCMOE_MOE_BASELINE, nullptr, nullptr, nullptr, nullptr, &out),
        INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(incmoe_moe_destroy(nullptr), INCMOE_OK);
}
