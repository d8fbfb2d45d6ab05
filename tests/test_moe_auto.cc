/*
 * test_moe_auto.cc - the layer's path: the parameters' extension
 * (incmoe_moe_create_ex) and the choice of algorithm, mode and routing the
 * layer measures.  Which path is faster is fed through the layer's test hook
 * INCMOE_MOE_TEST_PATH_MS (moe/choose.c: milliseconds added to one rank's
 * measured time of the paths it names), set on one rank only, so every other
 * rank learns it through the agreement and not by itself.  Every forward's
 * output is checked against the fp64 reference (moe_ref.h).
 */
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "moe_ref.h"

extern "C" {
#include "bandmodel.h"
}

namespace
{

const int kN = 4;

moeref::Shape small_shape()
{
    moeref::Shape s;
    s.N = kN, s.E = 8, s.k = 2, s.H = 16, s.I = 8, s.dtype = INCMOE_FLOAT32;
    return s;
}

/* One rank's communicator, and the parameters it was created with (the path's). */
struct Rank {
    std::string addr;
    incmoe_comm_params_t params;
    incmoe_comm_t *comm = nullptr;
};

std::string rank_join(Rank *r, const std::string &addr, unsigned long long job, int rank)
{
    r->addr = addr;
    memset(&r->params, 0, sizeof(r->params));
    r->params.switch_addr = r->addr.c_str();
    r->params.job_id = job;
    r->params.rank = rank;
    r->params.nranks = kN;
    r->params.field_mask = INCMOE_COMM_PARAM_ALGO;
    r->params.algo = INCMOE_ALGO_INC;
    incmoe_status_t st = incmoe_comm_create(&r->params, &r->comm);
    return st == INCMOE_OK ? "" : std::string("comm_create: ") + incmoe_strerror(st);
}

/* The layer's parameters for rank `rank` of problem p (weights copied at create). */
struct Layer {
    std::vector<uint8_t> g, u, d;
    incmoe_moe_params_t prm;
};

void layer_params(Layer *l, const moeref::Problem &p, incmoe_comm_t *comm, int rank)
{
    moeref::local_weights(p, rank, &l->g, &l->u, &l->d);
    incmoe_moe_params_init(&l->prm);
    l->prm.num_experts = p.s.E;
    l->prm.top_k = p.s.k;
    l->prm.hidden = p.s.H;
    l->prm.intermediate = p.s.I;
    l->prm.dtype = p.s.dtype;
    l->prm.comm = comm;
    l->prm.max_tokens = 64;
    l->prm.w_gate = l->g.data();
    l->prm.w_up = l->u.data();
    l->prm.w_down = l->d.data();
    l->prm.timeout_ms = 20000;
}

incmoe_moe_params_ext_t path_ext(const Rank &r, int algo, incmoe_moe_mode_t mode,
                                 incmoe_moe_routing_t routing)
{
    incmoe_moe_params_ext_t ext;
    memset(&ext, 0, sizeof(ext));
    /* The bulk paths' choice: the decode step's is test_moe_decode's. */
    ext.field_mask = INCMOE_MOE_PARAM_PATH | INCMOE_MOE_PARAM_DECODE;
    ext.decode_tokens = -1;
    ext.path.algo = algo;
    ext.path.mode = mode;
    ext.path.routing = routing;
    ext.path.comm_params = &r.params;
    return ext;
}

/* One forward of p (mode and routing given only where set), checked against the reference;
 *t gets its timings. */
std::string forward_checked(incmoe_moe_t *L, const moeref::Problem &p, int rank,
                            incmoe_moe_timing_t *t, const incmoe_moe_mode_t *mode = nullptr,
                            const incmoe_moe_routing_t *routing = nullptr)
{
    incmoe_moe_forward_params_t f;
    memset(&f, 0, sizeof(f));
    f.field_mask = INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS | INCMOE_MOE_FWD_TOPK_WEIGHTS |
                   INCMOE_MOE_FWD_COUNTS;
    if (mode != nullptr)
        f.field_mask |= INCMOE_MOE_FWD_MODE, f.mode = *mode;
    if (routing != nullptr)
        f.field_mask |= INCMOE_MOE_FWD_ROUTING, f.routing = *routing;
    f.x = p.x[rank].data();
    f.topk_ids = p.ids[rank].data();
    f.topk_weights = p.w[rank].data();
    f.counts = p.counts.data();
    void *out = nullptr;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &out);
    if (st != INCMOE_OK)
        return std::string("forward: ") + incmoe_strerror(st);
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    std::string err =
        moeref::check_against_ref(out, ref, mag, p.counts[rank], p.s.H, p.s.dtype, "forward");
    if (!err.empty())
        return err;
    st = incmoe_moe_last_timing_ex(L, t, sizeof(*t));
    return st == INCMOE_OK ? "" : std::string("last_timing: ") + incmoe_strerror(st);
}

std::string path_str(const incmoe_moe_timing_t &t)
{
    return std::to_string(t.algo) + "/" + incmoe_moe_mode_name(t.mode) + "/" +
           incmoe_moe_routing_name(t.routing) + " measured " + std::to_string(t.measured);
}

/* Runs body(rank, Rank) on kN ranks of one job on a fresh switch. */
void run_job(const std::function<std::string(int, Rank &)> &body)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        kN,
        [&](int rank) -> std::string {
            setenv("OPENBLAS_NUM_THREADS", "1", 1);
            Rank r;
            std::string err = rank_join(&r, sw.addr, job, rank);
            if (err.empty())
                err = body(rank, r);
            if (r.comm != nullptr)
                incmoe_comm_destroy(r.comm);
            return err;
        },
        150);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

/* A layer over p with algorithm, mode and routing all left to it, with `slow` added to the
   paths' times on rank 1 only (INCMOE_MOE_TEST_PATH_MS); "" or why it was not made. l holds
   the layer's buffers and must outlive it. */
std::string create_auto(int rank, Rank &r, const char *slow, const moeref::Problem &p, Layer *l,
                        incmoe_moe_t **L_p)
{
    if (rank == 1)
        setenv("INCMOE_MOE_TEST_PATH_MS", slow, 1);
    layer_params(l, p, r.comm, rank);
    incmoe_moe_params_ext_t ext =
        path_ext(r, INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_AUTO, INCMOE_MOE_ROUTING_AUTO);
    incmoe_status_t st = incmoe_moe_create_ex(&l->prm, &ext, L_p);
    return st == INCMOE_OK ? "" : std::string("create_ex: ") + incmoe_strerror(st);
}

/* The algorithm every rank must choose when `slow` (on rank 1 only) makes the others slower,
   with the mode and routing left to the layer. */
void expect_algo_chosen(const char *slow, int want)
{
    run_job([&](int rank, Rank &r) -> std::string {
        moeref::Problem p = moeref::make_problem(small_shape(), {12, 7, 0, 20}, 31);
        Layer l;
        incmoe_moe_t *L;
        std::string made = create_auto(rank, r, slow, p, &l, &L);
        if (!made.empty())
            return made;
        incmoe_moe_timing_t t1, t2;
        std::string err = forward_checked(L, p, rank, &t1);
        if (err.empty())
            err = forward_checked(L, p, rank, &t2);
        incmoe_moe_destroy(L);
        if (!err.empty())
            return err;
        /* inc, ring and a2a, each in two modes and with both routings (all three have
           dispatch and combine). */
        if (t1.measured != 12)
            return "first forward measured " + path_str(t1) + ", expected 12 paths";
        if (t1.algo != want || t2.algo != want)
            return "chose " + path_str(t1) + " then " + path_str(t2) + ", expected algorithm " +
                   std::to_string(want);
        if (t2.measured != 0 || t2.mode != t1.mode || t2.routing != t1.routing)
            return "second forward ran " + path_str(t2) + " after choosing " + path_str(t1);
        return "";
    });
}

} // namespace

TEST(MoeAuto, PicksTheRingWhereTheRingIsFaster)
{
    expect_algo_chosen("inc=10000,a2a=10000", INCMOE_ALGO_RING);
}

TEST(MoeAuto, PicksInNetworkWhereItIsFaster)
{
    expect_algo_chosen("ring=10000,a2a=10000", INCMOE_ALGO_INC);
}

namespace
{

/* A layer with everything left to it, one forward measured with `slow` on rank 1 only: the
   paths it measured, the forwards that took, and what it chose. */
std::string measure_once(int rank, Rank &r, const char *slow, incmoe_moe_timing_t *t)
{
    moeref::Problem p = moeref::make_problem(small_shape(), {9, 4, 13, 2}, 35);
    Layer l;
    incmoe_moe_t *L;
    std::string made = create_auto(rank, r, slow, p, &l, &L);
    if (!made.empty())
        return made;
    std::string err = forward_checked(L, p, rank, t);
    incmoe_moe_destroy(L);
    return err;
}

} // namespace

/* The paths whose first run took 1.5x the fastest's or more run once and are not chosen;
   only the close ones run three times.  The hook's milliseconds dwarf the real times, so
   which paths are close is known: one (ring/baseline/full) or two (ring with full routing,
   whose 5 s put both within 1.5x of each other and every other path past 25 s). */
TEST(MoeAuto, PathsFarFromTheFastestRunOnce)
{
    run_job([&](int rank, Rank &r) -> std::string {
        incmoe_moe_timing_t t;
        std::string err =
            measure_once(rank, r, "inc=20000,a2a=20000,pipelined=20000,masked=20000", &t);
        if (!err.empty())
            return err;
        if (t.measured != 12 || t.measure_runs != 12 || t.algo != INCMOE_ALGO_RING ||
            t.mode != INCMOE_MOE_BASELINE || t.routing != INCMOE_MOE_ROUTING_FULL)
            return "one close path: ran " + path_str(t) + " in " + std::to_string(t.measure_runs) +
                   " forwards, expected ring/baseline/full measured 12 in 12";
        if ((err = measure_once(rank, r, "ring=5000,inc=25000,a2a=25000,masked=25000", &t)) != "")
            return err;
        if (t.measured != 12 || t.measure_runs != 12 + 2 * 2 || t.algo != INCMOE_ALGO_RING ||
            t.routing != INCMOE_MOE_ROUTING_FULL)
            return "two close paths: ran " + path_str(t) + " in " + std::to_string(t.measure_runs) +
                   " forwards, expected ring with full routing "
                   "measured 12 in 16";
        return "";
    });
}

/* A path forced by the parameters runs as forced and measures nothing; a forward's mode and
   routing force those for that forward, leaving the algorithm to the layer. */
TEST(MoeAuto, ForcingWorks)
{
    run_job([&](int rank, Rank &r) -> std::string {
        if (rank == 2)
            setenv("INCMOE_MOE_TEST_PATH_MS", "inc=10000,ring=10000", 1);
        moeref::Problem p = moeref::make_problem(small_shape(), {5, 9, 3, 1}, 32);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_moe_params_ext_t forced =
            path_ext(r, INCMOE_ALGO_RING, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL);
        incmoe_moe_t *L;
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &forced, &L);
        if (st != INCMOE_OK)
            return std::string("create_ex (forced): ") + incmoe_strerror(st);
        incmoe_moe_timing_t t;
        std::string err = forward_checked(L, p, rank, &t);
        incmoe_moe_destroy(L);
        if (err.empty() && (t.measured != 0 || t.algo != INCMOE_ALGO_RING ||
                            t.mode != INCMOE_MOE_BASELINE || t.routing != INCMOE_MOE_ROUTING_FULL))
            err = "forced ring/baseline/full ran " + path_str(t);
        if (!err.empty())
            return err;

        incmoe_moe_params_ext_t any =
            path_ext(r, INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_AUTO, INCMOE_MOE_ROUTING_AUTO);
        if ((st = incmoe_moe_create_ex(&l.prm, &any, &L)) != INCMOE_OK)
            return std::string("create_ex (auto): ") + incmoe_strerror(st);
        incmoe_moe_mode_t mode = INCMOE_MOE_PIPELINED;
        incmoe_moe_routing_t routing = INCMOE_MOE_ROUTING_MASKED;
        err = forward_checked(L, p, rank, &t, &mode, &routing);
        incmoe_moe_destroy(L);
        /* Three algorithms, the mode and routing as the forward forced them; a2a is the one
           the hook leaves fast. */
        if (err.empty() &&
            (t.measured != 3 || t.algo != INCMOE_ALGO_A2A || t.mode != INCMOE_MOE_PIPELINED ||
             t.routing != INCMOE_MOE_ROUTING_MASKED))
            err = "forward forcing pipelined/masked ran " + path_str(t);
        return err;
    });
}

/* The choice is kept while every rank's count stays within 2x of the one it was made for,
   and measured again (here to a different answer) once one moves further; both choices are
   kept, so going back to the first counts measures nothing (a prefill and a decode step
   each keep theirs). */
TEST(MoeAuto, AChangedTokenCountMeasuresAgain)
{
    run_job([&](int rank, Rank &r) -> std::string {
        if (rank == 3)
            setenv("INCMOE_MOE_TEST_PATH_MS", "ring=10000,a2a=10000", 1);
        /* One seed: the same weights (drawn first), other tokens. */
        moeref::Shape s = small_shape();
        moeref::Problem p0 = moeref::make_problem(s, {8, 8, 8, 8}, 33);
        moeref::Problem p1 = moeref::make_problem(s, {12, 16, 5, 9}, 33); /* within 2x */
        moeref::Problem p2 = moeref::make_problem(s, {8, 8, 8, 17}, 33);  /* rank 3 past 2x */
        moeref::Problem p3 = moeref::make_problem(s, {8, 8, 8, 30}, 33);  /* within 2x of p2's */
        Layer l;
        layer_params(&l, p0, r.comm, rank);
        incmoe_moe_params_ext_t ext =
            path_ext(r, INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_FULL);
        incmoe_moe_t *L;
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L);
        if (st != INCMOE_OK)
            return std::string("create_ex: ") + incmoe_strerror(st);
        incmoe_moe_timing_t t[5];
        std::string err = forward_checked(L, p0, rank, &t[0]);
        if (err.empty())
            err = forward_checked(L, p1, rank, &t[1]);
        /* The hook flips before the counts move: only a new measurement can see it. */
        if (rank == 3)
            setenv("INCMOE_MOE_TEST_PATH_MS", "inc=10000,a2a=10000", 1);
        if (err.empty())
            err = forward_checked(L, p2, rank, &t[2]);
        if (err.empty())
            err = forward_checked(L, p3, rank, &t[3]);
        if (err.empty())
            err = forward_checked(L, p0, rank, &t[4]);
        incmoe_moe_destroy(L);
        if (!err.empty())
            return err;
        const int want_measured[5] = {3, 0, 3, 0, 0};
        const int want_algo[5] = {INCMOE_ALGO_INC, INCMOE_ALGO_INC, INCMOE_ALGO_RING,
                                  INCMOE_ALGO_RING, INCMOE_ALGO_INC};
        for (int i = 0; i < 5; i++)
            if (t[i].measured != want_measured[i] || t[i].algo != want_algo[i])
                return "forward " + std::to_string(i) + " ran " + path_str(t[i]) +
                       ", expected algorithm " + std::to_string(want_algo[i]) + " measured " +
                       std::to_string(want_measured[i]);
        return "";
    });
}

/* Without a path, a forward whose mode is auto measures both modes on the communicator's
   own algorithm (the timings name it -1: the layer was not told which). */
TEST(MoeAuto, ModeAutoWithoutAPath)
{
    run_job([&](int rank, Rank &r) -> std::string {
        if (rank == 0)
            setenv("INCMOE_MOE_TEST_PATH_MS", "pipelined=10000", 1);
        moeref::Problem p = moeref::make_problem(small_shape(), {6, 0, 11, 4}, 37);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_moe_t *L;
        incmoe_moe_params_ext_t no_decode;
        memset(&no_decode, 0, sizeof(no_decode));
        no_decode.field_mask = INCMOE_MOE_PARAM_DECODE;
        no_decode.decode_tokens =
            -1; /* the bulk modes only (test_moe_decode has the decode step) */
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &no_decode, &L);
        if (st != INCMOE_OK)
            return std::string("create: ") + incmoe_strerror(st);
        incmoe_moe_mode_t mode = INCMOE_MOE_AUTO;
        incmoe_moe_routing_t routing = INCMOE_MOE_ROUTING_FULL;
        incmoe_moe_timing_t t;
        std::string err = forward_checked(L, p, rank, &t, &mode, &routing);
        incmoe_moe_destroy(L);
        if (err.empty() && (t.measured != 2 || t.algo != -1 || t.mode != INCMOE_MOE_BASELINE))
            err = "mode auto ran " + path_str(t) + ", expected the communicator's baseline";
        return err;
    });
}

/* A bad extension on one rank fails create on every rank, and the job carries on: an
   unknown bit, a path naming no algorithm, a path that needs the communicator's parameters
   without them; ranks asking for different paths fail it with a mismatch. */
TEST(MoeAuto, BadExtensionsAreRefusedOnEveryRank)
{
    harness::ExpectErrors errors_expected("bad extensions are refused");
    run_job([&](int rank, Rank &r) -> std::string {
        moeref::Problem p = moeref::make_problem(small_shape(), {3, 3, 3, 3}, 38);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        struct Bad {
            const char *what;
            int bad_rank;
            incmoe_status_t want;
        } bad[] = {{"unknown bit", 0, INCMOE_ERR_INVALID_ARG},
                   {"algo 7", 1, INCMOE_ERR_INVALID_ARG},
                   {"no comm_params", 2, INCMOE_ERR_INVALID_ARG},
                   {"routing 9", 3, INCMOE_ERR_INVALID_ARG},
                   {"another path", 1, INCMOE_ERR_MISMATCH}};
        for (const Bad &b : bad) {
            incmoe_moe_params_ext_t ext =
                path_ext(r, INCMOE_MOE_ALGO_COMM, INCMOE_MOE_AUTO, INCMOE_MOE_ROUTING_FULL);
            if (rank == b.bad_rank) {
                std::string w = b.what;
                if (w == "unknown bit")
                    ext.field_mask |= 1ull << 17;
                else if (w == "algo 7")
                    ext.path.algo = 7;
                else if (w == "no comm_params")
                    ext.path.algo = INCMOE_MOE_ALGO_AUTO, ext.path.comm_params = nullptr;
                else if (w == "routing 9")
                    ext.path.routing = (incmoe_moe_routing_t)9;
                else
                    ext.path.mode = INCMOE_MOE_BASELINE;
            }
            incmoe_moe_t *L = nullptr;
            incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L);
            if (st != b.want) {
                if (st == INCMOE_OK)
                    incmoe_moe_destroy(L);
                return std::string(b.what) + " on rank " + std::to_string(b.bad_rank) +
                       ": create_ex gave " + incmoe_strerror(st) + ", expected " +
                       incmoe_strerror(b.want);
            }
        }
        /* The job is intact: a good path still works. */
        incmoe_moe_params_ext_t ext =
            path_ext(r, INCMOE_MOE_ALGO_COMM, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL);
        incmoe_moe_t *L;
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L);
        if (st != INCMOE_OK)
            return std::string("good path after the bad ones: ") + incmoe_strerror(st);
        incmoe_moe_timing_t t;
        std::string err = forward_checked(L, p, rank, &t);
        incmoe_moe_destroy(L);
        return err;
    });
}

/* Layers on one communicator share its other-algorithm communicators (one job per
   algorithm, counted by its layers): destroying the first layer leaves the second's
   running on them. */
TEST(MoeAuto, LayersOnOneCommunicatorShareTheOtherAlgorithms)
{
    run_job([&](int rank, Rank &r) -> std::string {
        if (rank == 1)
            setenv("INCMOE_MOE_TEST_PATH_MS", "inc=10000,a2a=10000", 1);
        moeref::Problem p = moeref::make_problem(small_shape(), {4, 10, 7, 2}, 39);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_moe_params_ext_t ext =
            path_ext(r, INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL);
        incmoe_moe_t *L1, *L2;
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L1);
        if (st != INCMOE_OK)
            return std::string("create_ex 1: ") + incmoe_strerror(st);
        if ((st = incmoe_moe_create_ex(&l.prm, &ext, &L2)) != INCMOE_OK) {
            incmoe_moe_destroy(L1);
            return std::string("create_ex 2: ") + incmoe_strerror(st);
        }
        incmoe_moe_timing_t t1, t2, t3;
        std::string err = forward_checked(L1, p, rank, &t1);
        if (err.empty())
            err = forward_checked(L2, p, rank, &t2);
        incmoe_moe_destroy(L1);
        if (err.empty())
            err = forward_checked(L2, p, rank, &t3);
        incmoe_moe_destroy(L2);
        if (err.empty() && (t1.algo != INCMOE_ALGO_RING || t2.algo != INCMOE_ALGO_RING ||
                            t3.algo != INCMOE_ALGO_RING || t3.measured != 0))
            err = "ran " + path_str(t1) + ", " + path_str(t2) + ", " + path_str(t3);
        return err;
    });
}

/* One rank cannot reach the switch for the other algorithms' communicators (its
   comm_params name a closed port): create fails on every rank, none waits for ever. */
TEST(MoeAuto, AnUnreachableOtherAlgorithmFailsCreateOnEveryRank)
{
    harness::ExpectErrors errors_expected(
        "a rank cannot reach the switch for the other algorithms");
    run_job([&](int rank, Rank &r) -> std::string {
        moeref::Problem p = moeref::make_problem(small_shape(), {3, 3, 3, 3}, 40);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_comm_params_t cp = r.params;
        cp.field_mask |= INCMOE_COMM_PARAM_TIMEOUT;
        cp.timeout_ms = 2000; /* the others' join of the sibling gives up after it */
        if (rank == 2)
            cp.switch_addr = "127.0.0.1:1";
        incmoe_moe_params_ext_t ext =
            path_ext(r, INCMOE_ALGO_RING, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL);
        ext.path.comm_params = &cp;
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L);
        if (st == INCMOE_OK) {
            incmoe_moe_destroy(L);
            return "create_ex succeeded with rank 2's switch unreachable";
        }
        return "";
    });
}

namespace
{

/* Every rank's (token, other rank) pairs and tokens some other rank needs, counted here from
   the problem's ids with the contiguous placement (the layer counts them on each rank and
   sums them through its header exchange). */
routing_load_t problem_load(const moeref::Problem &p, size_t grow, size_t zrow)
{
    routing_load_t load = {p.s.N, 0, 0, 0, grow, zrow};
    const int per = p.s.E / p.s.N;
    for (int s = 0; s < p.s.N; s++) {
        load.tokens += (uint64_t)p.counts[s];
        for (int t = 0; t < p.counts[s]; t++) {
            std::vector<bool> to(p.s.N, false);
            for (int a = 0; a < p.s.k; a++)
                to[p.ids[s][(size_t)t * p.s.k + a] / per] = true;
            int others = 0;
            for (int r = 0; r < p.s.N; r++)
                others += r != s && to[r];
            load.pairs += (uint64_t)others;
            load.routed += others > 0;
        }
    }
    return load;
}

} // namespace

/* The bands a pipelined forward runs follow its routing: with the costs set alike on every
   rank (a 1 Mbit/s link, a band 0.1 ms, a plan's synchronisation 20 ms, the FFN free), full
   routing's bands are the model's for every other rank's rows (8: as many as 64 tokens
   allow) and masked routing's the model's for the pairs of all ranks, which each rank knows
   only through the header exchange; every rank runs the same count, before and after a
   forward showed a band's cost. */
TEST(MoeAuto, MaskedBandsFollowThePairsAlikeOnEveryRank)
{
    run_job([&](int rank, Rank &r) -> std::string {
        setenv("INCMOE_MOE_BAND_US", "100", 1);
        setenv("INCMOE_MOE_SYNC_US", "20000", 1);
        setenv("INCMOE_MOE_LINK_MBPS", "1", 1);
        setenv("INCMOE_MOE_GFLOPS", "1000000", 1);
        moeref::Problem p = moeref::make_problem(small_shape(), {40, 7, 0, 64}, 41);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_moe_t *L;
        incmoe_status_t st = incmoe_moe_create(&l.prm, &L);
        if (st != INCMOE_OK)
            return std::string("create: ") + incmoe_strerror(st);
        incmoe_moe_mode_t mode = INCMOE_MOE_PIPELINED;
        incmoe_moe_routing_t full = INCMOE_MOE_ROUTING_FULL, masked = INCMOE_MOE_ROUTING_MASKED;
        incmoe_moe_timing_t tf, tm, tm2;
        std::string err = forward_checked(L, p, rank, &tf, &mode, &full);
        if (err.empty())
            err = forward_checked(L, p, rank, &tm, &mode, &masked);
        /* The second masked forward takes the band cost the first showed on the slowest
           rank: a count the model cannot know here, but one every rank must run alike, or
           the dispatch's bands would not match and the outputs checked would be wrong. */
        if (err.empty())
            err = forward_checked(L, p, rank, &tm2, &mode, &masked);
        incmoe_moe_destroy(L);
        if (!err.empty())
            return err;
        if (tm2.nbands < 1 || tm2.nbands > 8)
            return "the second masked forward ran " + std::to_string(tm2.nbands) + " bands";
        /* fp32 rows of 16 with 2 ids and weights: 80 bytes gathered, 64 reduced. */
        bandmodel_in_t in = {};
        in.load = problem_load(p, 80, 64);
        in.tmax = 64;
        in.k = p.s.k;
        in.row_flops = 6.0 * p.s.H * p.s.I;
        in.band_s = 100e-6;
        in.sync_s = 20e-3;
        in.byte_s = 8e-6;
        in.flop_s = 1e-15;
        int want_full = bandmodel_count(&in);
        in.masked = 1;
        int want_masked = bandmodel_count(&in);
        if (want_full != 8 || want_masked >= want_full)
            return "the model gives " + std::to_string(want_full) + " full and " +
                   std::to_string(want_masked) + " masked bands, expected 8 and fewer";
        if (tf.nbands != want_full || tm.nbands != want_masked ||
            tm.routing != INCMOE_MOE_ROUTING_MASKED)
            return "ran " + std::to_string(tf.nbands) + " full and " + std::to_string(tm.nbands) +
                   " masked bands (" + path_str(tm) + "), expected " + std::to_string(want_full) +
                   " and " + std::to_string(want_masked);
        return "";
    });
}

/* The layers of one communicator with one shape share their choices: the first layer's
   first forward measures, the second's runs that path without measuring; a layer of
   another shape (more tokens allowed) measures for itself; a layer created after the others
   are destroyed measures again (nothing outlives them). */
TEST(MoeAuto, LayersOfOneShapeChooseOnce)
{
    run_job([&](int rank, Rank &r) -> std::string {
        if (rank == 1)
            setenv("INCMOE_MOE_TEST_PATH_MS", "inc=10000,a2a=10000", 1);
        moeref::Problem p = moeref::make_problem(small_shape(), {9, 3, 12, 5}, 43);
        Layer l;
        layer_params(&l, p, r.comm, rank);
        incmoe_moe_params_ext_t ext =
            path_ext(r, INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_FULL);
        incmoe_moe_params_t wide = l.prm;
        wide.max_tokens = 128;
        incmoe_moe_t *L[3] = {nullptr, nullptr, nullptr};
        incmoe_status_t st = incmoe_moe_create_ex(&l.prm, &ext, &L[0]);
        if (st == INCMOE_OK)
            st = incmoe_moe_create_ex(&l.prm, &ext, &L[1]);
        if (st == INCMOE_OK)
            st = incmoe_moe_create_ex(&wide, &ext, &L[2]);
        std::string err = st == INCMOE_OK ? "" : std::string("create_ex: ") + incmoe_strerror(st);
        incmoe_moe_timing_t t[4];
        for (int i = 0; i < 3 && err.empty(); i++)
            err = forward_checked(L[i], p, rank, &t[i]);
        for (incmoe_moe_t *x : L)
            incmoe_moe_destroy(x);
        if (err.empty() && (st = incmoe_moe_create_ex(&l.prm, &ext, &L[0])) != INCMOE_OK)
            err = std::string("create_ex again: ") + incmoe_strerror(st);
        if (err.empty()) {
            err = forward_checked(L[0], p, rank, &t[3]);
            incmoe_moe_destroy(L[0]);
        }
        if (!err.empty())
            return err;
        for (int i = 0; i < 4; i++)
            if (t[i].algo != INCMOE_ALGO_RING || t[i].measured != (i == 1 ? 0 : 3))
                return "layer " + std::to_string(i) + " ran " + path_str(t[i]) +
                       (i == 1 ? ", expected ring measured 0" : ", expected ring measured 3");
        return "";
    });
}
