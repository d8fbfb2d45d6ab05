/*
 * test_moe_replicas.cc - expert replicas (incmoe_moe.h, "Replicas"): a layer
 * whose experts live on several ranks, each (token, expert) pair served by one
 * replica chosen per token.
 *
 * Every output is checked against the fp64 reference of Equation (1)
 * (moe_ref.h: ||out - ref||_2 <= 2e-5 ||m||_2 per token in fp32) and against
 * the same forward of the unreplicated layer (contiguous placement): per-token
 * cosine similarity >= 0.99999, since only the order in which the combine adds
 * a token's partials changes.  Placements: random (one to three replicas per
 * expert), every expert on two ranks, every expert also on a token's own rank,
 * the popular experts' replicas spread out; routings: uniform, skewed (zipf
 * 1.0, the popular experts on rank 0) and empty; on the in-network, ring and
 * a2a algorithms; pipelined and baseline masked, full routing, the decode
 * step and the measured choice among them (mode and routing auto).  Bad
 * placements fail create on every rank with the reason.  The balance check is
 * a count, not a timing: on a zipf:1.0 routing of E=64, k=8, N=8 the busiest
 * rank's received rows with one extra slot per rank are fewer than without
 * replicas.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"
#include "moe_ref.h"

extern "C" {
#include "replica_plan.h"
}

namespace
{

/* A placement as incmoe_moe_placement_t holds it. */
struct Placement {
    std::vector<int> offsets, ranks;
    incmoe_moe_placement_t view() const
    {
        return incmoe_moe_placement_t{offsets.data(), ranks.data()};
    }
};

/* Expert e on the ranks of each[e] (sorted here). */
Placement from_lists(std::vector<std::vector<int>> each)
{
    Placement p;
    p.offsets.push_back(0);
    for (auto &l : each) {
        std::sort(l.begin(), l.end());
        l.erase(std::unique(l.begin(), l.end()), l.end());
        p.ranks.insert(p.ranks.end(), l.begin(), l.end());
        p.offsets.push_back((int)p.ranks.size());
    }
    return p;
}

/* Contiguous E/N per rank, plus extra[e]'s ranks for each expert. */
Placement contiguous_plus(int E, int N, const std::vector<std::vector<int>> &extra = {})
{
    std::vector<std::vector<int>> each((size_t)E);
    for (int e = 0; e < E; e++) {
        each[(size_t)e].push_back(e / (E / N));
        if ((size_t)e < extra.size())
            each[(size_t)e].insert(each[(size_t)e].end(), extra[(size_t)e].begin(),
                                   extra[(size_t)e].end());
    }
    return from_lists(each);
}

/* Each expert on 1..3 random ranks. */
Placement random_placement(int E, int N, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<std::vector<int>> each((size_t)E);
    for (auto &l : each) {
        int n = 1 + (int)(rng() % (uint64_t)std::min(3, N));
        while ((int)l.size() < n) {
            int r = (int)(rng() % (uint64_t)N);
            if (std::find(l.begin(), l.end(), r) == l.end())
                l.push_back(r);
        }
    }
    return from_lists(each);
}

/* The weights of every expert rank holds under P, ascending expert id. */
void placed_weights(const moeref::Problem &p, const Placement &P, int rank,
                    std::vector<uint8_t> w[3])
{
    const size_t m = (size_t)p.s.I * p.s.H * incmoe_dtype_size(p.s.dtype);
    const std::vector<uint8_t> *all[3] = {&p.wg, &p.wu, &p.wd};
    for (int i = 0; i < 3; i++) {
        w[i].clear();
        for (int e = 0; e < p.s.E; e++)
            for (int j = P.offsets[(size_t)e]; j < P.offsets[(size_t)e + 1]; j++)
                if (P.ranks[(size_t)j] == rank)
                    w[i].insert(w[i].end(), all[i]->begin() + (ptrdiff_t)(e * m),
                                all[i]->begin() + (ptrdiff_t)((e + 1) * m));
    }
}

/* k distinct experts of E, expert e drawn with weight 1 / (e + 1)^s: low ids are popular. */
void zipf_ids(int E, int k, double s, size_t T, std::mt19937_64 &rng, int32_t *ids)
{
    std::vector<double> wt((size_t)E);
    for (int e = 0; e < E; e++)
        wt[(size_t)e] = 1.0 / std::pow(e + 1.0, s);
    std::discrete_distribution<int> d(wt.begin(), wt.end());
    for (size_t t = 0; t < T; t++) {
        int32_t *id = ids + t * (size_t)k;
        for (int a = 0; a < k;) {
            int e = d(rng);
            if (std::find(id, id + a, e) == id + a)
                id[a++] = e;
        }
    }
}

/* A layer on comm with the placement P (nullptr: the contiguous, unreplicated layer). */
incmoe_status_t make_layer(incmoe_comm_t *comm, const moeref::Problem &p, int rank,
                           const Placement *P, incmoe_moe_t **L)
{
    std::vector<uint8_t> w[3];
    if (P != nullptr)
        placed_weights(p, *P, rank, w);
    else
        moeref::local_weights(p, rank, &w[0], &w[1], &w[2]);
    incmoe_moe_params_t prm = moeref::layer_params(p.s, comm, w[0], w[1], w[2]);
    incmoe_moe_params_ext_t ext;
    memset(&ext, 0, sizeof(ext));
    incmoe_moe_placement_t view;
    if (P != nullptr) {
        view = P->view();
        ext.field_mask = INCMOE_MOE_PARAM_PLACEMENT;
        ext.placement = &view;
    }
    return incmoe_moe_create_ex(&prm, &ext, L);
}

struct Path {
    incmoe_moe_mode_t mode;
    incmoe_moe_routing_t routing;
};

const Path kPaths[] = {{INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_MASKED},
                       {INCMOE_MOE_BASELINE, INCMOE_MOE_ROUTING_MASKED},
                       {INCMOE_MOE_PIPELINED, INCMOE_MOE_ROUTING_FULL},
                       {INCMOE_MOE_DECODE, INCMOE_MOE_ROUTING_MASKED},
                       {INCMOE_MOE_AUTO, INCMOE_MOE_ROUTING_AUTO}};

std::string path_name(const Path &x)
{
    return std::string(incmoe_moe_mode_name(x.mode)) + " " + incmoe_moe_routing_name(x.routing);
}

/* One forward of p on path x: its output copied; the mode it ran into *ran. */
std::string forward(incmoe_moe_t *L, const moeref::Problem &p, int rank, const Path &x,
                    std::vector<uint8_t> *out, incmoe_moe_mode_t *ran)
{
    incmoe_moe_forward_params_t f = moeref::forward_params(p, rank, x.mode, x.routing);
    void *view = nullptr;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &view);
    if (st != INCMOE_OK)
        return "forward (" + path_name(x) + "): " + incmoe_strerror(st);
    incmoe_moe_timing_t t;
    incmoe_moe_last_timing_ex(L, &t, sizeof(t));
    *ran = t.mode;
    moeref::copy_output(p, rank, view, out);
    return "";
}

/* Every path on the replicated layer against the reference and the unreplicated layer. */
std::string run_replicated(incmoe_comm_t *comm, int rank, const moeref::Problem &p,
                           const Placement &P, const std::string &tag)
{
    incmoe_moe_t *plain = nullptr, *rep = nullptr;
    incmoe_status_t st = make_layer(comm, p, rank, nullptr, &plain);
    if (st != INCMOE_OK)
        return tag + ": create (unreplicated): " + incmoe_strerror(st);
    if ((st = make_layer(comm, p, rank, &P, &rep)) != INCMOE_OK) {
        incmoe_moe_destroy(plain);
        return tag + ": create (replicated): " + incmoe_strerror(st);
    }
    std::vector<double> mag, ref = moeref::reference(p, rank, &mag);
    const int T = p.counts[(size_t)rank], H = p.s.H;
    const bool decode_fits =
        *std::max_element(p.counts.begin(), p.counts.end()) <= INCMOE_MOE_DECODE_TOKENS;
    std::string err;
    for (const Path &x : kPaths) {
        std::vector<uint8_t> a, b;
        incmoe_moe_mode_t ran_a, ran_b;
        std::string what = tag + " " + path_name(x);
        err = forward(plain, p, rank, x, &a, &ran_a);
        if (err.empty())
            err = forward(rep, p, rank, x, &b, &ran_b);
        if (err.empty() && x.mode == INCMOE_MOE_DECODE && decode_fits && ran_b != INCMOE_MOE_DECODE)
            err = "ran " + std::string(incmoe_moe_mode_name(ran_b)) + ", not the decode step";
        if (err.empty())
            err = moeref::check_against_ref(b.data(), ref, mag, T, H, p.s.dtype, "replicated");
        if (err.empty())
            err = moeref::check_cosine(b.data(), a.data(), T, H, p.s.dtype, 0.99999,
                                       "replicated vs unreplicated");
        if (!err.empty()) {
            err = what + ": " + err;
            break;
        }
    }
    moeref::destroy_layer(rep, &err);
    moeref::destroy_layer(plain, &err);
    return err;
}

moeref::Shape shape(int N, int E, int k)
{
    moeref::Shape s;
    s.N = N, s.E = E, s.k = k, s.H = 16, s.I = 8, s.dtype = INCMOE_FLOAT32;
    return s;
}

/* p with zipf:1.0 routing (the popular experts, low ids, on rank 0). */
moeref::Problem skewed(moeref::Problem p, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    for (int r = 0; r < p.s.N; r++)
        zipf_ids(p.s.E, p.s.k, 1.0, (size_t)p.counts[(size_t)r], rng, p.ids[(size_t)r].data());
    return p;
}

class MoeReplicas : public ::testing::TestWithParam<incmoe_algo_t>
{
};

} // namespace

/* Random placements, uniform routing, ranks without tokens. */
TEST_P(MoeReplicas, RandomPlacementsEqualTheUnreplicatedLayer)
{
    const int N = 4, E = 8, k = 3;
    moeref::run_on_ranks(N, GetParam(), [&](incmoe_comm_t *comm, int rank) -> std::string {
        std::string err;
        for (uint64_t seed = 1; seed <= 3 && err.empty(); seed++) {
            moeref::Problem p = moeref::make_problem(shape(N, E, k), {7, 0, 12, 5}, 40 + seed);
            err = run_replicated(comm, rank, p, random_placement(E, N, seed),
                                 "random seed " + std::to_string(seed));
        }
        return err;
    });
}

/* Every expert on two ranks; every expert also on rank 0 (its tokens' own rank, so they take
   the replica at home); skewed routing with the popular experts spread out; no tokens at all;
   a forward too large for the decode step. */
TEST_P(MoeReplicas, CoveringAndSkewedPlacements)
{
    const int N = 4, E = 8, k = 3;
    std::vector<std::vector<int>> two, home, spread = {{1}, {2}, {3}};
    for (int e = 0; e < E; e++) {
        two.push_back({(e / 2 + 1) % N});
        home.push_back({0});
    }
    moeref::run_on_ranks(N, GetParam(), [&](incmoe_comm_t *comm, int rank) -> std::string {
        moeref::Problem p = moeref::make_problem(shape(N, E, k), {9, 3, 0, 6}, 77);
        std::string err = run_replicated(comm, rank, p, contiguous_plus(E, N, two), "two each");
        if (err.empty())
            err = run_replicated(comm, rank, p, contiguous_plus(E, N, home), "all on rank 0");
        moeref::Problem z = skewed(moeref::make_problem(shape(N, E, k), {20, 17, 9, 24}, 78), 5);
        if (err.empty())
            err = run_replicated(comm, rank, z, contiguous_plus(E, N, spread), "zipf spread");
        if (err.empty())
            err = run_replicated(comm, rank, z, contiguous_plus(E, N, two), "zipf two each");
        moeref::Problem none = moeref::make_problem(shape(N, E, k), {0, 0, 0, 0}, 79);
        if (err.empty())
            err = run_replicated(comm, rank, none, contiguous_plus(E, N, two), "empty");
        moeref::Problem big = moeref::make_problem(shape(N, E, k), {40, 3, 35, 0}, 80);
        if (err.empty())
            err = run_replicated(comm, rank, big, contiguous_plus(E, N, two), "over capacity");
        return err;
    });
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeReplicas,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_param_name);

namespace
{

/* Runs create with this rank's placement (and expert_owner where owner is set) and its log
   captured: "" if it fails with want and, where reason is set, logs it. */
std::string create_refused(incmoe_comm_t *comm, int rank, const Placement &P, bool with_owner,
                           incmoe_status_t want, const char *reason)
{
    moeref::Problem p = moeref::make_problem(shape(2, 4, 2), {2, 2}, 3);
    std::vector<uint8_t> w[3];
    moeref::local_weights(p, rank, &w[0], &w[1], &w[2]);
    incmoe_moe_params_t prm = moeref::layer_params(p.s, comm, w[0], w[1], w[2]);
    const int owner[4] = {0, 0, 1, 1};
    if (with_owner)
        prm.expert_owner = owner;
    incmoe_moe_placement_t view = P.view();
    incmoe_moe_params_ext_t ext;
    memset(&ext, 0, sizeof(ext));
    ext.field_mask = INCMOE_MOE_PARAM_PLACEMENT;
    ext.placement = &view;
    char path[] = "/tmp/incmoe-replicas-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    incmoe_moe_t *L = nullptr;
    incmoe_status_t st = incmoe_moe_create_ex(&prm, &ext, &L);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string log;
    char buf[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        log.append(buf, (size_t)n);
    close(fd);
    unlink(path);
    if (st == INCMOE_OK)
        incmoe_moe_destroy(L);
    if (st != want)
        return std::string("create: ") + incmoe_strerror(st) + ", expected " +
               incmoe_strerror(want) + "; log: " + log;
    if (reason != nullptr && log.find(reason) == std::string::npos)
        return std::string("the log does not say \"") + reason + "\": " + log;
    return "";
}

struct BadCase {
    Placement P;        /* rank 1's; rank 0 passes a good one */
    bool with_owner;    /* rank 1 also passes expert_owner */
    const char *reason; /* what rank 1 logs */
};

} // namespace

/* A bad placement on rank 1 fails create on both ranks; rank 1 names the expert and value;
   placements that differ between the ranks fail as a mismatch. */
TEST(MoeReplicasCreate, BadPlacementsRejectedWithTheReason)
{
    harness::ExpectErrors errors_expected("bad placements are refused");
    const Placement good = contiguous_plus(4, 2, {{1}});
    const BadCase cases[] = {
        {good, true, "both expert_owner and the extension's placement are set"},
        {Placement{{1, 1, 2, 3, 4}, {0, 0, 1, 1}}, false, "offsets[0] is 1, expected 0"},
        {Placement{{0, 1, 1, 2, 3}, {0, 1, 1}}, false, "expert 1 has no replica"},
        {Placement{{0, 1, 2, 3, 4}, {0, 0, 5, 1}}, false,
         "expert 2: replica 0 is rank 5 (ranks[2]), expected 0..1"},
        {Placement{{0, 2, 3, 4, 5}, {1, 0, 0, 1, 1}}, false,
         "expert 0: ranks 1 then 0 (ranks[1]) are not distinct and ascending"},
        {Placement{{0, 2, 3, 4, 5}, {1, 1, 0, 1, 1}}, false,
         "expert 0: ranks 1 then 1 (ranks[1]) are not distinct and ascending"},
        {Placement{{0, 3, 4, 5, 6}, {0, 1, 1, 0, 1, 1}}, false, "expert 0 has 3 replicas"},
    };
    moeref::run_on_ranks(2, INCMOE_ALGO_INC, [&](incmoe_comm_t *comm, int rank) -> std::string {
        for (const BadCase &c : cases) {
            std::string err =
                create_refused(comm, rank, rank == 1 ? c.P : good, rank == 1 && c.with_owner,
                               INCMOE_ERR_INVALID_ARG, rank == 1 ? c.reason : "rank 1 rejected");
            if (!err.empty())
                return std::string(c.reason) + ": " + err;
        }
        /* Valid on each rank, not the same table. */
        Placement other = contiguous_plus(4, 2, {{}, {0}});
        return create_refused(comm, rank, rank == 1 ? other : good, false, INCMOE_ERR_MISMATCH,
                              "placement hash");
    });
}

namespace
{

/* The rows each rank receives in one bulk forward of ids (per rank [T][k]) under P, every
   rank choosing as the layer does (replica_plan.h: its own rows, corrected by every rank's
   forced rows from the headers), counted from the wire ids' ranks. */
std::vector<long> received_rows(const Placement &P, int E, int N, int k,
                                const std::vector<std::vector<int32_t>> &ids)
{
    const incmoe_moe_placement_t view = P.view();
    std::vector<std::vector<uint32_t>> forced((size_t)N, std::vector<uint32_t>((size_t)N));
    std::vector<uint64_t> sum((size_t)N, 0);
    for (int s = 0; s < N; s++) {
        replica_forced(&view, N, s, ids[(size_t)s].data(), k, ids[(size_t)s].size() / (size_t)k,
                       forced[(size_t)s].data());
        for (int r = 0; r < N; r++)
            sum[(size_t)r] += forced[(size_t)s][(size_t)r];
    }
    std::vector<long> rows((size_t)N, 0);
    for (int s = 0; s < N; s++) {
        const size_t T = ids[(size_t)s].size() / (size_t)k;
        std::vector<int64_t> load((size_t)N, 0), corr((size_t)N);
        std::vector<int32_t> wire(T * (size_t)k);
        replica_correction(N, sum.data(), forced[(size_t)s].data(), corr.data());
        replica_assign(&view, E, N, s, ids[(size_t)s].data(), k, T, corr.data(), load.data(),
                       wire.data());
        for (size_t t = 0; t < T; t++) {
            std::vector<bool> visits((size_t)N, false);
            for (int a = 0; a < k; a++) {
                int32_t id = wire[t * (size_t)k + (size_t)a], e = id % E, slot = id / E;
                if (e != ids[(size_t)s][t * (size_t)k + (size_t)a] ||
                    slot >= P.offsets[(size_t)e + 1] - P.offsets[(size_t)e])
                    return {}; /* not a replica of the pair's expert */
                visits[(size_t)P.ranks[(size_t)(P.offsets[(size_t)e] + slot)]] = true;
            }
            for (int r = 0; r < N; r++)
                rows[(size_t)r] += visits[(size_t)r] && r != s;
        }
    }
    return rows;
}

} // namespace

/* E=64, k=8, N=8, zipf:1.0 with the popular experts on rank 0 (experts 0..7): one extra slot
   per rank holds a replica of one of rank 0's experts (rank j+1 gets expert j, rank 0 gets
   rank 1's hottest).  The busiest rank receives fewer rows than without replicas. */
TEST(MoeReplicasBalance, ExtraSlotsLowerTheBusiestRanksRows)
{
    const int E = 64, k = 8, N = 8, T = 256;
    std::mt19937_64 rng(29);
    std::vector<std::vector<int32_t>> ids((size_t)N, std::vector<int32_t>((size_t)T * k));
    for (auto &r : ids)
        zipf_ids(E, k, 1.0, (size_t)T, rng, r.data());
    std::vector<std::vector<int>> extra((size_t)E);
    for (int j = 0; j + 1 < N; j++)
        extra[(size_t)j] = {j + 1};
    extra[8] = {0};
    std::vector<long> without = received_rows(contiguous_plus(E, N), E, N, k, ids);
    std::vector<long> with = received_rows(contiguous_plus(E, N, extra), E, N, k, ids);
    ASSERT_EQ(without.size(), (size_t)N);
    ASSERT_EQ(with.size(), (size_t)N) << "a pair was served by a rank without its expert";
    std::string a, b;
    for (int r = 0; r < N; r++) {
        a += " " + std::to_string(without[(size_t)r]);
        b += " " + std::to_string(with[(size_t)r]);
    }
    long most_without = *std::max_element(without.begin(), without.end());
    long most_with = *std::max_element(with.begin(), with.end());
    printf("E=%d k=%d N=%d T=%d zipf:1.0: busiest rank's received rows %ld without replicas "
           "(per rank:%s), %ld with one extra slot per rank (per rank:%s)\n",
           E, k, N, T, most_without, a.c_str(), most_with, b.c_str());
    EXPECT_LT(most_with, most_without);
}
