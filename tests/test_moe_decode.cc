/*
 * test_moe_decode.cc - the layer's decode step (incmoe_moe.h, "Decode"): one
 * low-latency dispatch, the local experts, one low-latency combine, with no
 * header exchange.
 *
 * Every output is checked against the fp64 reference of Equation (1)
 * (moe_ref.h) and, in fp32, bitwise against the same forward run as a masked
 * baseline (the bulk dispatch and combine: the same rows, the same reduction
 * order), on N = 1, 2, 4 and 8 ranks, with ranks that have no tokens, counts
 * 1 .. the capacity, and counts over it (which take the bulk path), over the
 * in-network, ring and a2a algorithms.  Back-to-back decode steps with other
 * inputs check that one step's rows never land in the buffers the previous
 * step's output or experts still use.  Arguments refused on one rank fail the
 * forward on every rank and leave the layer usable; the automatic choice
 * measures the decode step where the counts fit and then runs it without an
 * exchange; the switch counts one message up per rank per collective.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"
#include "moe_ref.h"

namespace
{

const int kCapacity = 4;

moeref::Shape shape(int N, incmoe_dtype_t dt = INCMOE_FLOAT32)
{
    moeref::Shape s;
    s.N = N, s.E = 8, s.k = 2, s.H = 16, s.I = 8, s.dtype = dt;
    return s;
}

/* A layer for rank `rank` of p's shape with decode capacity `decode_tokens` (ext; the weights
   are copied at create, so w may go once it returned). */
incmoe_status_t create(incmoe_comm_t *comm, const moeref::Problem &p, int rank, int decode_tokens,
                       incmoe_moe_t **L_p, int max_tokens = 16)
{
    std::vector<uint8_t> g, u, d;
    moeref::local_weights(p, rank, &g, &u, &d);
    incmoe_moe_params_t prm = moeref::layer_params(p.s, comm, g, u, d, max_tokens);
    incmoe_moe_params_ext_t ext;
    memset(&ext, 0, sizeof(ext));
    ext.field_mask = INCMOE_MOE_PARAM_DECODE;
    ext.decode_tokens = decode_tokens;
    return incmoe_moe_create_ex(&prm, &ext, L_p);
}

struct Fwd {
    incmoe_moe_mode_t mode = INCMOE_MOE_DECODE;
    incmoe_moe_routing_t routing = INCMOE_MOE_ROUTING_MASKED;
    const int32_t *ids = nullptr; /* nullptr: the problem's */
    const char *refused = nullptr;
};

/* One forward of p: its status; on success its output copied into *out and timings into *t. */
incmoe_status_t forward(incmoe_moe_t *L, const moeref::Problem &p, int rank, const Fwd &a,
                        std::vector<uint8_t> *out, incmoe_moe_timing_t *t)
{
    incmoe_moe_forward_params_t f = moeref::forward_params(p, rank, a.mode, a.routing);
    if (a.ids != nullptr)
        f.topk_ids = a.ids;
    if (a.refused != nullptr)
        f.field_mask |= INCMOE_MOE_FWD_REFUSED, f.refused = a.refused;
    void *view = nullptr;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &view);
    memset(t, 0xab, sizeof(*t));
    incmoe_moe_last_timing_ex(L, t, sizeof(*t));
    if (st == INCMOE_OK)
        moeref::copy_output(p, rank, view, out);
    return st;
}

std::string counts_str(const std::vector<int> &c)
{
    std::string s;
    for (int v : c)
        s += (s.empty() ? "" : ",") + std::to_string(v);
    return "{" + s + "}";
}

/* p with the experts' weights of `from` (nullptr: its own), so that one layer serves both. */
moeref::Problem same_weights(moeref::Problem p, const moeref::Problem *from)
{
    if (from != nullptr)
        p.wg = from->wg, p.wu = from->wu, p.wd = from->wd;
    return p;
}

/* A decode forward of p (or, over the capacity, the bulk path it takes), checked against the
   reference, against the masked baseline bitwise in fp32, and for the path it reports. */
std::string decode_checked(incmoe_moe_t *L, const moeref::Problem &p, int rank,
                           std::vector<uint8_t> *out)
{
    const int most = *std::max_element(p.counts.begin(), p.counts.end());
    const bool fits = most <= kCapacity;
    std::string tag = counts_str(p.counts) + " " + incmoe_dtype_name(p.s.dtype);
    incmoe_moe_timing_t t;
    incmoe_status_t st = forward(L, p, rank, Fwd(), out, &t);
    if (st != INCMOE_OK)
        return tag + ": decode forward: " + incmoe_strerror(st);
    if (fits && (t.mode != INCMOE_MOE_DECODE || t.routing != INCMOE_MOE_ROUTING_MASKED ||
                 t.exchange_ms != 0 || t.measured != 0 || t.nbands != 1))
        return tag + ": a forward within the capacity ran mode " + incmoe_moe_mode_name(t.mode) +
               " routing " + incmoe_moe_routing_name(t.routing) + ", exchange " +
               std::to_string(t.exchange_ms) + " ms";
    if (!fits && t.mode != INCMOE_MOE_PIPELINED)
        return tag + ": a forward over the capacity ran mode " + incmoe_moe_mode_name(t.mode) +
               ", expected the bulk path (pipelined)";
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    std::string err = moeref::check_against_ref(out->data(), ref, mag, p.counts[rank], p.s.H,
                                                p.s.dtype, "decode");
    if (!err.empty())
        return tag + ": " + err;
    if (p.s.dtype != INCMOE_FLOAT32)
        return "";
    Fwd masked;
    masked.mode = INCMOE_MOE_BASELINE;
    std::vector<uint8_t> bulk;
    if ((st = forward(L, p, rank, masked, &bulk, &t)) != INCMOE_OK)
        return tag + ": masked baseline forward: " + incmoe_strerror(st);
    if (bulk != *out)
        return tag + ": the decode step's output differs from the masked baseline's (fp32)";
    return "";
}

/* On N ranks of algo: for each count vector, a decode forward checked (decode_checked), each
   one right after the previous one's (another problem's) decode step. */
void run_decode_cases(int N, incmoe_algo_t algo, const std::vector<std::vector<int>> &counts,
                      incmoe_dtype_t dt = INCMOE_FLOAT32)
{
    moeref::run_on_ranks(N, algo, [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::vector<moeref::Problem> ps;
        for (size_t i = 0; i < counts.size(); i++)
            ps.push_back(same_weights(moeref::make_problem(shape(N, dt), counts[i], 500 + i),
                                      ps.empty() ? nullptr : &ps[0]));
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = create(comm, ps[0], rank, kCapacity, &L);
        if (st != INCMOE_OK)
            return std::string("create: ") + incmoe_strerror(st);
        std::string err;
        std::vector<uint8_t> first, out;
        for (size_t i = 0; i < ps.size() && err.empty(); i++)
            err = decode_checked(L, ps[i], rank, i == 0 ? &first : &out);
        /* The first problem again, straight after the last one's step: the same bits. */
        incmoe_moe_timing_t t;
        if (err.empty() && (st = forward(L, ps[0], rank, Fwd(), &out, &t)) != INCMOE_OK)
            err = std::string("repeated decode forward: ") + incmoe_strerror(st);
        if (err.empty() && out != first)
            err = "the first problem's decode step gave other bits the second time";
        moeref::destroy_layer(L, &err);
        return err;
    });
}

class MoeDecode : public ::testing::TestWithParam<incmoe_algo_t>
{
};

} // namespace

/* One rank (its rows never leave it) and two: counts 0 .. the capacity and over it. */
TEST_P(MoeDecode, OneAndTwoRanks)
{
    run_decode_cases(1, GetParam(), {{1}, {kCapacity}, {0}, {kCapacity + 3}, {2}});
    run_decode_cases(2, GetParam(), {{1, 1}, {0, 3}, {kCapacity, 2}, {0, 0}, {kCapacity + 1, 1}});
}

/* Four ranks, every datatype: ranks without tokens, every count up to the capacity, and a
   forward over it between decode steps. */
TEST_P(MoeDecode, FourRanks)
{
    const std::vector<std::vector<int>> counts = {
        {1, 0, kCapacity, 2}, {3, 3, 3, 3}, {0, 0, 1, 0}, {kCapacity + 2, 1, 0, 2}, {2, 4, 0, 1}};
    run_decode_cases(4, GetParam(), counts);
    run_decode_cases(4, GetParam(), {counts[0], counts[3]}, INCMOE_BFLOAT16);
    run_decode_cases(4, GetParam(), {counts[1]}, INCMOE_FLOAT16);
}

/* Eight ranks, one expert each: most of a token's experts are remote. */
TEST_P(MoeDecode, EightRanks)
{
    run_decode_cases(8, GetParam(), {{1, 0, 2, 4, 0, 1, 3, 1}, {0, 0, 0, 0, 0, 0, 0, 1}});
}

/* An expert id out of range on one rank, then a caller's refusal on a rank without tokens:
   each fails the forward on every rank with INCMOE_ERR_INVALID_ARG, no timings left, and the
   next decode step succeeds. */
TEST_P(MoeDecode, RefusalOnOneRankFailsEveryRank)
{
    harness::ExpectErrors errors_expected("one rank refuses its forward's arguments");
    const int N = 4;
    moeref::run_on_ranks(N, GetParam(), [&](incmoe_comm_t *comm, int rank) -> std::string {
        moeref::Problem p = moeref::make_problem(shape(N), {2, 0, 3, 1}, 77);
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = create(comm, p, rank, kCapacity, &L);
        if (st != INCMOE_OK)
            return std::string("create: ") + incmoe_strerror(st);
        std::vector<int32_t> bad = p.ids[rank];
        if (rank == 2)
            bad[1] = p.s.E; /* outside 0..E-1 */
        Fwd wrong_id, refused;
        wrong_id.ids = bad.data();
        if (rank == 1)
            refused.refused = "the binding found its hidden states malformed";
        std::string err;
        std::vector<uint8_t> out;
        incmoe_moe_timing_t t;
        for (const Fwd &a : {wrong_id, refused}) {
            st = forward(L, p, rank, a, &out, &t);
            if (st != INCMOE_ERR_INVALID_ARG)
                err = std::string("a refused forward returned ") + incmoe_strerror(st);
            else if (t.total_ms != 0 || t.mode != 0)
                err = "a refused forward left timings";
            if (err.empty())
                err = decode_checked(L, p, rank, &out);
            if (!err.empty())
                break;
        }
        moeref::destroy_layer(L, &err);
        return err;
    });
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeDecode,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_param_name);

namespace
{

/* On algo's communicator, with mode auto and `slow` added on rank 1 to the paths it names
   (INCMOE_MOE_TEST_PATH_MS): the first small forward (routing auto) measures the decode step
   against baseline and pipelined with full and masked routing, the second runs the choice
   without measuring; a forward over the capacity measures the bulk paths only, and so does a
   small one with routing full (it keeps the forward on AllGather and ReduceScatter).
   want_decode: whether the choice is the decode step. */
void expect_auto(incmoe_algo_t algo, const char *slow, bool want_decode)
{
    const int N = 4;
    moeref::run_on_ranks(N, algo, [&](incmoe_comm_t *comm, int rank) -> std::string {
        if (rank == 1)
            setenv("INCMOE_MOE_TEST_PATH_MS", slow, 1);
        moeref::Problem small = moeref::make_problem(shape(N), {2, 1, 0, 3}, 91);
        moeref::Problem big =
            same_weights(moeref::make_problem(shape(N), {9, 6, 0, 12}, 92), &small);
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = create(comm, small, rank, kCapacity, &L);
        if (st != INCMOE_OK)
            return std::string("create: ") + incmoe_strerror(st);
        Fwd a, full;
        a.mode = full.mode = INCMOE_MOE_AUTO;
        a.routing = INCMOE_MOE_ROUTING_AUTO;
        full.routing = INCMOE_MOE_ROUTING_FULL;
        std::string err;
        incmoe_moe_timing_t t[4];
        std::vector<uint8_t> out;
        const moeref::Problem *ps[] = {&small, &small, &big, &small};
        const Fwd *fs[] = {&a, &a, &a, &full};
        for (int i = 0; i < 4 && err.empty(); i++) {
            st = forward(L, *ps[i], rank, *fs[i], &out, &t[i]);
            if (st != INCMOE_OK) {
                err = std::string("forward: ") + incmoe_strerror(st);
                break;
            }
            std::vector<double> mag, ref = moeref::reference(*ps[i], rank, &mag);
            err = moeref::check_against_ref(out.data(), ref, mag, ps[i]->counts[rank], ps[i]->s.H,
                                            ps[i]->s.dtype, "auto");
        }
        moeref::destroy_layer(L, &err);
        if (!err.empty())
            return err;
        bool chose_decode = t[0].mode == INCMOE_MOE_DECODE;
        if (t[0].measured != 5 || chose_decode != want_decode)
            return std::string("first small forward measured ") + std::to_string(t[0].measured) +
                   " paths and chose " + incmoe_moe_mode_name(t[0].mode) + ", expected 5 and " +
                   (want_decode ? "decode" : "a bulk mode");
        if (t[1].measured != 0 || t[1].mode != t[0].mode)
            return std::string("second small forward ran ") + incmoe_moe_mode_name(t[1].mode) +
                   " measuring " + std::to_string(t[1].measured);
        if (want_decode && t[1].exchange_ms != 0)
            return "the kept decode choice ran a header exchange";
        if (t[2].measured != 4 || t[2].mode == INCMOE_MOE_DECODE)
            return std::string("the forward over the capacity measured ") +
                   std::to_string(t[2].measured) + " paths and ran " +
                   incmoe_moe_mode_name(t[2].mode) + ", expected the 4 bulk paths";
        if (t[3].measured != 2 || t[3].mode == INCMOE_MOE_DECODE ||
            t[3].routing != INCMOE_MOE_ROUTING_FULL)
            return std::string("a small forward with routing full measured ") +
                   std::to_string(t[3].measured) + " paths and ran " +
                   incmoe_moe_mode_name(t[3].mode) + ", expected the 2 full ones";
        return "";
    });
}

} // namespace

TEST(MoeDecodeAuto, ChoosesTheDecodeStepWhereItIsFaster)
{
    for (incmoe_algo_t algo : {INCMOE_ALGO_INC, INCMOE_ALGO_RING})
        expect_auto(algo, "baseline=10000,pipelined=10000", true);
}

TEST(MoeDecodeAuto, KeepsTheBulkPathWhereItIsFaster)
{
    for (incmoe_algo_t algo : {INCMOE_ALGO_INC, INCMOE_ALGO_RING})
        expect_auto(algo, "decode=10000", false);
}

/* The capacity is checked at create on every rank: over max_tokens fails every rank's create,
   ranks that disagree fail with INCMOE_ERR_MISMATCH; -1 turns the decode step off, so mode
   decode runs pipelined. */
TEST(MoeDecodeCreate, CapacityCheckedAndAgreed)
{
    harness::ExpectErrors errors_expected("a capacity over max_tokens, and two that disagree");
    const int N = 2;
    moeref::run_on_ranks(N, INCMOE_ALGO_INC, [&](incmoe_comm_t *comm, int rank) -> std::string {
        moeref::Problem p = moeref::make_problem(shape(N), {1, 2}, 5);
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = create(comm, p, rank, rank == 0 ? 17 : 4, &L, 16);
        if (st != INCMOE_ERR_INVALID_ARG)
            return std::string("decode_tokens over max_tokens on rank 0: create returned ") +
                   incmoe_strerror(st);
        st = create(comm, p, rank, rank == 0 ? 2 : 3, &L, 16);
        if (st != INCMOE_ERR_MISMATCH)
            return std::string("decode_tokens 2 and 3: create returned ") + incmoe_strerror(st);
        if ((st = create(comm, p, rank, -1, &L, 16)) != INCMOE_OK)
            return std::string("decode_tokens -1: create: ") + incmoe_strerror(st);
        std::vector<uint8_t> out;
        incmoe_moe_timing_t t;
        std::string err;
        st = forward(L, p, rank, Fwd(), &out, &t);
        if (st != INCMOE_OK)
            err = std::string("forward: ") + incmoe_strerror(st);
        else if (t.mode != INCMOE_MOE_PIPELINED)
            err = std::string("without a decode step mode decode ran ") +
                  incmoe_moe_mode_name(t.mode);
        moeref::destroy_layer(L, &err);
        return err;
    });
}

namespace
{

/* The switch's trips line of job and stream ("in ... out ..."), once the job ended and the
   switch wrote it to log (at most 10 s after), or "(no line)". */
std::string trips_line(const std::string &log, unsigned long long job, const char *stream)
{
    const std::string head = "job " + std::to_string(job) + " trips " + stream + ": ";
    for (int polls = 0; polls < 1000; polls++) {
        std::ifstream f(log);
        std::string line;
        while (std::getline(f, line)) {
            size_t at = line.find(head);
            if (at != std::string::npos)
                return line.substr(at + head.size());
        }
        usleep(10000); /* polling the log for the line, not ordering the test */
    }
    return "(no line)";
}

} // namespace

/* A decode step costs one message up per rank per collective: K decode forwards on N ranks
   send the switch N * K LLs on each of the dispatch and combine streams and nothing else
   there (no POST, no SMALL, no PLAN), and it sends back one LL_FWD per other source of each
   dispatch and one per owner of each combine (base/wire.h, "The low-latency form"). */
TEST(MoeDecodeTrips, OneMessageUpPerRankPerCollective)
{
    const int N = 4, K = 3;
    const std::string log = "/tmp/incmoe-moe-decode-" + std::to_string(harness::unique_job_id());
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, {"--log-level", "info"}, log));
    const unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(N, [&](int rank) -> std::string {
        std::string err;
        incmoe_comm_t *comm = moeref::comm_create(sw.addr, job, rank, N, INCMOE_ALGO_INC, &err);
        if (comm == nullptr)
            return err;
        moeref::Problem p = moeref::make_problem(shape(N), {1, 0, 2, kCapacity}, 61);
        incmoe_moe_t *L = nullptr;
        incmoe_status_t st = create(comm, p, rank, kCapacity, &L);
        if (st != INCMOE_OK)
            err = std::string("create: ") + incmoe_strerror(st);
        std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
        for (int i = 0; i < K && err.empty(); i++) {
            std::vector<uint8_t> out;
            incmoe_moe_timing_t t;
            if ((st = forward(L, p, rank, Fwd(), &out, &t)) != INCMOE_OK)
                err = std::string("forward: ") + incmoe_strerror(st);
            else if (t.mode != INCMOE_MOE_DECODE)
                err = std::string("ran ") + incmoe_moe_mode_name(t.mode);
            else
                err = moeref::check_against_ref(out.data(), ref, mag, p.counts[rank], p.s.H,
                                                p.s.dtype, "decode");
        }
        if (L != nullptr)
            moeref::destroy_layer(L, &err);
        incmoe_comm_destroy(comm);
        return err;
    });
    EXPECT_EQ(harness::failures(res), "");
    const std::string ll = std::to_string(N * K);
    EXPECT_EQ(trips_line(log, job, "dispatch"),
              "in LL=" + ll + " out CREDIT=" + ll + " LL_FWD=" + std::to_string(N * (N - 1) * K));
    EXPECT_EQ(trips_line(log, job, "combine"),
              "in LL=" + ll + " out CREDIT=" + ll + " LL_FWD=" + ll);
    harness::switch_stop(&sw);
    unlink(log.c_str());
}
