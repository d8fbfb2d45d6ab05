/*
 * test_moe_placement.cc - choosing a placement with replicas (incmoe_moe.h,
 * "Choosing a placement"): the per-token rule the layer shares
 * (moe/replica_choice.c) on worked cases, the rows it and the static split
 * give against a reference written here from the header's words alone, the
 * chooser's output a valid placement within the slots, the chooser against
 * DeepSeek's EPLB greedy (tools/eplb.c) on incmoe-moe-bench's zipf routing
 * over several seeds, and bad inputs refused with their reason.
 */
#include <algorithm>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"

extern "C" {
#include "eplb.h"
#include "moe_bench.h"
#include "replica_choice.h"
}

namespace
{

/* A placement as one vector of ranks per expert, and its flat form. */
struct Placement {
    std::vector<int> offsets, ranks;
    explicit Placement(const std::vector<std::vector<int>> &by_expert)
    {
        offsets.push_back(0);
        for (const auto &rs : by_expert) {
            ranks.insert(ranks.end(), rs.begin(), rs.end());
            offsets.push_back((int)ranks.size());
        }
    }
    incmoe_moe_placement_t view() const
    {
        return {offsets.data(), ranks.data()};
    }
};

/* A routing sample's arrays. */
struct Sample {
    int E, k, N;
    std::vector<int> counts;
    std::vector<int32_t> ids;
    incmoe_moe_routing_sample_t view() const
    {
        return {E, k, N, counts.data(), ids.data()};
    }
};

/* T tokens per rank (counts varied when ragged), k distinct experts each, uniformly. */
Sample random_sample(std::mt19937 &rng, int E, int k, int N, int T, bool ragged)
{
    Sample s{E, k, N, {}, {}};
    for (int r = 0; r < N; r++) {
        int n = ragged ? (int)(rng() % (unsigned)(T + 1)) : T;
        s.counts.push_back(n);
        for (int t = 0; t < n; t++) {
            std::vector<int> all(E);
            for (int e = 0; e < E; e++)
                all[e] = e;
            std::shuffle(all.begin(), all.end(), rng);
            s.ids.insert(s.ids.end(), all.begin(), all.begin() + k);
        }
    }
    return s;
}

/* Every expert on its home rank only (E/N contiguous a rank). */
std::vector<std::vector<int>> home(int E, int N)
{
    std::vector<std::vector<int>> p(E);
    for (int e = 0; e < E; e++)
        p[e] = {e / (E / N)};
    return p;
}

/* Home ranks (contiguous) plus each expert on each other rank with probability 1/3. */
std::vector<std::vector<int>> random_placement(std::mt19937 &rng, int E, int N)
{
    std::vector<std::vector<int>> p(E);
    for (int e = 0; e < E; e++) {
        for (int r = 0; r < N; r++) {
            if (r == e / (E / N) || rng() % 3 == 0)
                p[e].push_back(r);
        }
    }
    return p;
}

/* The rows of the header's description, written from its words: the tokens round-robin
   over the ranks; per token, the one-replica experts' ranks, then each other pair in id
   order on a visited rank (the lowest), else on the least-loaded replica (lowest of equals);
   a token counts once on each rank it visits but its own. */
std::vector<int64_t> reference_per_token(const Sample &s, const std::vector<std::vector<int>> &p)
{
    std::vector<int64_t> rows(s.N, 0);
    std::vector<size_t> first(s.N, 0);
    int most = 0;
    for (int r = 0; r < s.N; r++) {
        first[r] = r == 0 ? 0 : first[r - 1] + (size_t)s.counts[r - 1];
        most = std::max(most, s.counts[r]);
    }
    for (int t = 0; t < most; t++) {
        for (int r = 0; r < s.N; r++) {
            if (t >= s.counts[r])
                continue;
            const int32_t *id = &s.ids[(first[r] + t) * s.k];
            std::set<int> visits = {r};
            auto go = [&](int to) {
                if (visits.insert(to).second)
                    rows[to]++;
            };
            for (int j = 0; j < s.k; j++) {
                if (p[id[j]].size() == 1)
                    go(p[id[j]][0]);
            }
            for (int j = 0; j < s.k; j++) {
                const auto &reps = p[id[j]];
                if (reps.size() == 1)
                    continue;
                int pick = -1;
                for (int x : reps) {
                    if (visits.count(x) && (pick < 0 || !visits.count(pick) || x < pick))
                        pick = x;
                }
                if (pick < 0) {
                    for (int x : reps) {
                        if (pick < 0 || rows[x] < rows[pick] || (rows[x] == rows[pick] && x < pick))
                            pick = x;
                    }
                }
                go(pick);
            }
        }
    }
    return rows;
}

/* The static split from its words: on each rank, its i-th token picking e goes to e's
   replica i mod (e's replicas). */
std::vector<int64_t> reference_static(const Sample &s, const std::vector<std::vector<int>> &p)
{
    std::vector<int64_t> rows(s.N, 0);
    size_t at = 0;
    for (int r = 0; r < s.N; r++) {
        std::vector<int> seen(s.E, 0);
        for (int t = 0; t < s.counts[r]; t++, at++) {
            std::set<int> visits;
            for (int j = 0; j < s.k; j++) {
                int e = s.ids[at * s.k + j];
                visits.insert(p[e][seen[e]++ % p[e].size()]);
            }
            visits.erase(r);
            for (int x : visits)
                rows[x]++;
        }
    }
    return rows;
}

std::vector<int64_t> rows_of(const Sample &s, const Placement &pl, incmoe_moe_split_t split)
{
    std::vector<int64_t> rows(s.N, -1);
    char why[256] = "";
    auto sv = s.view();
    auto pv = pl.view();
    EXPECT_EQ(INCMOE_OK, incmoe_moe_placement_rows(&sv, &pv, split, rows.data(), why, sizeof(why)))
        << why;
    return rows;
}

int64_t busiest(const std::vector<int64_t> &rows)
{
    return *std::max_element(rows.begin(), rows.end());
}

} // namespace

/* Worked by hand: e0 on {0, 1}, e1 on {1}, e2 on {2, 3}, e3 on {3}. */
TEST(MoePlacement, RuleSendsPairsWhereTheTokenAlreadyGoesElseToTheLeastLoaded)
{
    Placement pl({{0, 1}, {1}, {2, 3}, {3}});
    auto p = pl.view();
    int64_t load[4] = {0, 0, 0, 0};
    int32_t out[3];
    /* Rank 2's token: e1 forces rank 1, so e0 rides along there and e2 stays home. */
    int32_t a[3] = {0, 2, 1};
    replica_choose(&p, a, 3, 2, load, out);
    EXPECT_EQ(std::vector<int32_t>({1, 2, 1}), std::vector<int32_t>(out, out + 3));
    EXPECT_EQ(std::vector<int64_t>({0, 1, 0, 0}), std::vector<int64_t>(load, load + 4));
    /* Rank 0's token: e2 goes to the less loaded of 2 and 3 (equal: 2), e0 stays home. */
    int32_t b[2] = {2, 0};
    replica_choose(&p, b, 2, 0, load, out);
    EXPECT_EQ(std::vector<int32_t>({2, 0}), std::vector<int32_t>(out, out + 2));
    EXPECT_EQ(std::vector<int64_t>({0, 1, 1, 0}), std::vector<int64_t>(load, load + 4));
    /* Rank 0's token again: e3 has one replica and is counted first, so e2 rides along on
       rank 3 though rank 2 is listed first. */
    int32_t c[2] = {2, 3};
    replica_choose(&p, c, 2, 0, load, out);
    EXPECT_EQ(std::vector<int32_t>({3, 3}), std::vector<int32_t>(out, out + 2));
    EXPECT_EQ(std::vector<int64_t>({0, 1, 1, 1}), std::vector<int64_t>(load, load + 4));
}

/* Both splits against the reference on random placements and samples, ragged counts and
   empty ranks included. */
TEST(MoePlacement, RowsMatchTheReferenceOnRandomCases)
{
    std::mt19937 rng(29);
    for (int it = 0; it < 300; it++) {
        int N = 1 + (int)(rng() % 6), E = N * (1 + (int)(rng() % 4)), k = 1 + (int)(rng() % E);
        k = std::min(k, 6);
        Sample s = random_sample(rng, E, k, N, (int)(rng() % 12), it % 2 == 1);
        auto p = random_placement(rng, E, N);
        Placement pl(p);
        SCOPED_TRACE("iteration " + std::to_string(it));
        EXPECT_EQ(reference_per_token(s, p), rows_of(s, pl, INCMOE_MOE_SPLIT_PER_TOKEN));
        EXPECT_EQ(reference_static(s, p), rows_of(s, pl, INCMOE_MOE_SPLIT_STATIC));
    }
}

/* The layer's form gives each pair a replica of its expert, the same rows as the
   evaluation, and a token's row on each rank it visits. */
TEST(MoePlacement, ChooseAllServesEveryPairOnAReplica)
{
    std::mt19937 rng(3);
    Sample s = random_sample(rng, 16, 4, 4, 20, true);
    Placement pl(random_placement(rng, 16, 4));
    auto p = pl.view();
    std::vector<int32_t> out(s.ids.size(), -1);
    std::vector<int64_t> load(4, 7);
    replica_choose_all(&p, 4, s.counts.data(), s.ids.data(), 4, load.data(), out.data());
    EXPECT_EQ(rows_of(s, pl, INCMOE_MOE_SPLIT_PER_TOKEN), load);
    for (size_t i = 0; i < out.size(); i++) {
        const int e = s.ids[i];
        auto first = pl.ranks.begin() + pl.offsets[e], last = pl.ranks.begin() + pl.offsets[e + 1];
        EXPECT_NE(last, std::find(first, last, out[i])) << "pair " << i << " expert " << e;
    }
}

namespace
{

/* The chooser's output: a placement (every expert on at least one rank, its ranks in
   [0, N), ascending and distinct) with at most E/N + extra replicas on any rank, and the
   same placement from a second call on the same sample. */
void expect_valid_choice(const Sample &s, int extra)
{
    std::vector<int> offsets(s.E + 1, -1), ranks(s.E + s.N * extra, -1);
    char why[256] = "";
    auto sv = s.view();
    ASSERT_EQ(INCMOE_OK, incmoe_moe_placement_choose(&sv, extra, offsets.data(), ranks.data(), why,
                                                     sizeof(why)))
        << why;
    ASSERT_EQ(0, offsets[0]);
    ASSERT_LE(offsets[s.E], s.E + s.N * extra);
    std::vector<int> per_rank(s.N, 0);
    for (int e = 0; e < s.E; e++) {
        ASSERT_LT(offsets[e], offsets[e + 1]) << "expert " << e << " is nowhere";
        std::vector<int> p(ranks.begin() + offsets[e], ranks.begin() + offsets[e + 1]);
        EXPECT_TRUE(std::is_sorted(p.begin(), p.end())) << "expert " << e;
        EXPECT_EQ(p.size(), std::set<int>(p.begin(), p.end()).size()) << "expert " << e;
        for (int r : p) {
            ASSERT_TRUE(r >= 0 && r < s.N) << "expert " << e << " on rank " << r;
            per_rank[r]++;
        }
    }
    for (int r = 0; r < s.N; r++)
        EXPECT_LE(per_rank[r], s.E / s.N + extra) << "rank " << r;
    std::vector<int> offsets2(s.E + 1, -1), ranks2(s.E + s.N * extra, -1);
    ASSERT_EQ(INCMOE_OK, incmoe_moe_placement_choose(&sv, extra, offsets2.data(), ranks2.data(),
                                                     why, sizeof(why)))
        << why;
    EXPECT_EQ(offsets, offsets2) << "a second call chose otherwise";
    EXPECT_EQ(ranks, ranks2) << "a second call chose otherwise";
}

} // namespace

TEST(MoePlacement, ChosenPlacementHoldsEveryExpertWithinTheSlots)
{
    std::mt19937 rng(11);
    for (int it = 0; it < 40; it++) {
        int N = 1 + (int)(rng() % 8), E = N * (1 + (int)(rng() % 4));
        int k = std::min(E, 1 + (int)(rng() % 6)), extra = (int)(rng() % (E - E / N + 1));
        SCOPED_TRACE("N=" + std::to_string(N) + " E=" + std::to_string(E) +
                     " k=" + std::to_string(k) + " extra=" + std::to_string(extra));
        expect_valid_choice(random_sample(rng, E, k, N, 16, it % 3 == 0), extra);
    }
    /* No tokens at all: nothing to balance, still every expert somewhere. */
    Sample empty{8, 2, 4, {0, 0, 0, 0}, {}};
    expect_valid_choice(empty, 1);
}

namespace
{

/* incmoe-moe-bench's routing (moe_bench_data.c) for N ranks of T tokens, seed seed. */
Sample bench_sample(int E, int k, int N, int T, double zipf, uint64_t seed)
{
    opts_t o = {};
    o.nranks = N;
    o.E = E;
    o.k = k;
    o.H = 1;
    o.dtype = INCMOE_FLOAT32;
    o.zipf = zipf;
    o.seed = seed;
    Sample s{E, k, N, std::vector<int>(N, T), std::vector<int32_t>((size_t)N * T * k)};
    std::vector<float> x(T), w((size_t)T * k);
    for (int r = 0; r < N; r++)
        mb_make_tokens(&o, r, T, x.data(), s.ids.data() + (size_t)r * T * k, w.data());
    return s;
}

/* Arrays for a placement of E experts with room for cap ranks, to be written. */
Placement room(int E, int cap)
{
    Placement p(std::vector<std::vector<int>>(E, std::vector<int>()));
    p.ranks.assign(cap, -1);
    return p;
}

} // namespace

namespace
{

/* incmoe-replica-rows's columns for N ranks, computed here: the busiest rank's rows with no
   replicas, EPLB static and per-token, ours static and per-token; chosen on the sample of
   seed seed, measured on that of seed + 1. */
std::vector<int64_t> columns(int E, int k, int N, int T, int extra, uint64_t seed)
{
    Sample c = bench_sample(E, k, N, T, 1.0, seed), m = bench_sample(E, k, N, T, 1.0, seed + 1);
    auto cv = c.view();
    Placement ours = room(E, E + N * extra), eplb = room(E, E + N * extra);
    char why[256] = "";
    EXPECT_EQ(INCMOE_OK, incmoe_moe_placement_choose(&cv, extra, ours.offsets.data(),
                                                     ours.ranks.data(), why, sizeof(why)))
        << why;
    std::vector<int64_t> load(E);
    eplb_expert_load(&cv, load.data());
    EXPECT_EQ(0, eplb_place(load.data(), E, N, extra, eplb.offsets.data(), eplb.ranks.data()));
    return {busiest(rows_of(m, Placement(home(E, N)), INCMOE_MOE_SPLIT_PER_TOKEN)),
            busiest(rows_of(m, eplb, INCMOE_MOE_SPLIT_STATIC)),
            busiest(rows_of(m, eplb, INCMOE_MOE_SPLIT_PER_TOKEN)),
            busiest(rows_of(m, ours, INCMOE_MOE_SPLIT_STATIC)),
            busiest(rows_of(m, ours, INCMOE_MOE_SPLIT_PER_TOKEN))};
}

} // namespace

/* Issue 29's comparison (tools/replica_rows.c prints it): the chooser with the per-token
   rule receives no more rows on its busiest rank than EPLB's placement with a static split,
   and fewer than no replicas, on several seeds at N=16 (N=8: the tool's test below). */
TEST(MoePlacement, ChooserWithPerTokenRuleBeatsEplbOnZipf)
{
    for (uint64_t seed : {1, 2, 3}) {
        for (int N : {16}) {
            std::vector<int64_t> col = columns(64, 8, N, 256, 1, seed);
            EXPECT_LE(col[4], col[1])
                << "N=" << N << " seed " << seed << ": ours+per-token against EPLB+static";
            EXPECT_LT(col[4], col[0])
                << "N=" << N << " seed " << seed << ": ours+per-token against no replicas";
        }
    }
}

namespace
{

/* incmoe-replica-rows's table rows in out: N, the five columns, the ratio. */
struct ToolRow {
    int N;
    std::vector<int64_t> col;
    double ratio;
    std::string line;
};

std::vector<ToolRow> tool_rows(const std::string &out)
{
    std::vector<ToolRow> rows;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream f(line);
        ToolRow r{0, std::vector<int64_t>(5), 0, line};
        if (f >> r.N >> r.col[0] >> r.col[1] >> r.col[2] >> r.col[3] >> r.col[4] >> r.ratio)
            rows.push_back(r);
    }
    return rows;
}

} // namespace

/* The tool prints what the library and EPLB give for the same samples. */
TEST(MoePlacement, ReplicaRowsToolPrintsTheseFigures)
{
    static const std::string tool = TOP_BUILDDIR "/tools/incmoe-replica-rows";
    perf_test::RunResult r = perf_test::run_cmd(
        {tool, "-N", "4,8", "-E", "32", "-k", "4", "-t", "64", "--extra", "2"}, 120);
    ASSERT_EQ("", perf_test::failed_run(r));
    std::vector<ToolRow> rows = tool_rows(r.out);
    for (const ToolRow &row : rows) {
        std::vector<int64_t> want = columns(32, 4, row.N, 64, 2, 1);
        EXPECT_EQ(want, row.col) << row.line;
        EXPECT_NEAR((double)want[4] / (double)want[1], row.ratio, 0.0005) << row.line;
    }
    EXPECT_EQ(2u, rows.size()) << r.out;
    perf_test::RunResult bad = perf_test::run_cmd({tool, "-N", "5", "-E", "32"}, 60);
    EXPECT_EQ(2, bad.status) << perf_test::describe(bad);
    EXPECT_NE(std::string::npos, bad.err.find("a multiple of N (5)")) << bad.err;
}

/* Issue 29's target row as the tool prints it: at N=8, E=64, k=8, zipf:1, one extra slot,
   ours + per-token over EPLB + static split at most 0.90, and below no replicas, on each of
   seeds 1 .. 3 (BENCHMARKS.md has 1 .. 8). */
TEST(MoePlacement, ReplicaRowsRatioIsAtMostNinetyPercentAtEightRanks)
{
    static const std::string tool = TOP_BUILDDIR "/tools/incmoe-replica-rows";
    for (int seed = 1; seed <= 3; seed++) {
        perf_test::RunResult r =
            perf_test::run_cmd({tool, "-N", "8", "--seed", std::to_string(seed)}, 300);
        ASSERT_EQ("", perf_test::failed_run(r));
        std::vector<ToolRow> rows = tool_rows(r.out);
        for (const ToolRow &row : rows) {
            EXPECT_EQ(8, row.N) << row.line;
            /* In integers: the printed ratio is rounded. */
            EXPECT_LE(row.col[4] * 10, row.col[1] * 9) << "seed " << seed << ": " << row.line;
            EXPECT_LT(row.col[4], row.col[0]) << "seed " << seed << ": no replicas, " << row.line;
            EXPECT_NEAR((double)row.col[4] / (double)row.col[1], row.ratio, 0.0005) << row.line;
        }
        EXPECT_EQ(1u, rows.size()) << r.out;
    }
}

namespace
{

/* The call's status and reason for a sample s (with extra slots) or, with pl, the rows. */
std::string refusal(const incmoe_moe_routing_sample_t *s, int extra,
                    const incmoe_moe_placement_t *pl = nullptr,
                    incmoe_moe_split_t split = INCMOE_MOE_SPLIT_PER_TOKEN)
{
    std::vector<int> offsets(1024, -7), ranks(1024, -7);
    std::vector<int64_t> rows(64, -7);
    char why[256] = "";
    incmoe_status_t st =
        pl != nullptr
            ? incmoe_moe_placement_rows(s, pl, split, rows.data(), why, sizeof(why))
            : incmoe_moe_placement_choose(s, extra, offsets.data(), ranks.data(), why, sizeof(why));
    EXPECT_EQ(INCMOE_ERR_INVALID_ARG, st) << why;
    if (pl == nullptr)
        EXPECT_EQ(-7, offsets[0]) << "written although refused";
    else
        EXPECT_EQ(-7, rows[0]) << "written although refused";
    return why;
}

} // namespace

TEST(MoePlacement, BadInputsAreRefusedWithTheReason)
{
    std::vector<int> counts = {1, 1};
    std::vector<int32_t> ids = {0, 1, 2, 3};
    incmoe_moe_routing_sample_t s = {4, 2, 2, counts.data(), ids.data()};
    auto with = [&](auto change) {
        incmoe_moe_routing_sample_t t = s;
        change(t);
        return t;
    };
    EXPECT_NE(std::string::npos, refusal(nullptr, 1).find("sample is NULL"));
    auto t = with([](auto &x) { x.nranks = 0; });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("nranks 0"));
    t = with([](auto &x) { x.num_experts = 5; });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("num_experts 5"));
    t = with([](auto &x) { x.top_k = 5; });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("top_k 5"));
    t = with([](auto &x) { x.counts = nullptr; });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("counts is NULL"));
    std::vector<int> negative = {1, -1};
    t = with([&](auto &x) { x.counts = negative.data(); });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("counts[1] is -1"));
    t = with([](auto &x) { x.topk_ids = nullptr; });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("topk_ids is NULL"));
    std::vector<int32_t> out_of_range = {0, 1, 2, 4}, twice = {0, 1, 3, 3};
    t = with([&](auto &x) { x.topk_ids = out_of_range.data(); });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("sample token 1: expert id 4"));
    t = with([&](auto &x) { x.topk_ids = twice.data(); });
    EXPECT_NE(std::string::npos, refusal(&t, 1).find("sample token 1: expert 3 picked twice"));
    EXPECT_NE(std::string::npos, refusal(&s, -1).find("extra_slots -1"));
    EXPECT_NE(std::string::npos, refusal(&s, 3).find("extra_slots 3 is not in 0 .. 2"));

    Placement ok({{0}, {0, 1}, {1}, {1}});
    auto bad = [&](std::vector<std::vector<int>> p) { return Placement(p); };
    Placement none_for_one = bad({{0}, {}, {1}, {1}}), outside = bad({{0}, {0, 2}, {1}, {1}});
    Placement descending = bad({{0}, {1, 0}, {1}, {1}}), repeated = bad({{0}, {1, 1}, {1}, {1}});
    auto v = none_for_one.view();
    EXPECT_NE(std::string::npos, refusal(&s, 0, &v).find("expert 1 has no replica"));
    v = outside.view();
    EXPECT_NE(std::string::npos,
              refusal(&s, 0, &v).find("expert 1: replica 1 is rank 2 (ranks[2])"));
    v = descending.view();
    EXPECT_NE(std::string::npos,
              refusal(&s, 0, &v).find("expert 1: ranks 1 then 0 (ranks[2]) are not distinct"));
    v = repeated.view();
    EXPECT_NE(std::string::npos,
              refusal(&s, 0, &v).find("expert 1: ranks 1 then 1 (ranks[2]) are not distinct"));
    std::vector<int> shifted = {1, 2, 4, 5, 6};
    incmoe_moe_placement_t from_one = {shifted.data(), ok.ranks.data()};
    EXPECT_NE(std::string::npos, refusal(&s, 0, &from_one).find("offsets[0] is 1"));
    v = ok.view();
    EXPECT_NE(std::string::npos,
              refusal(&s, 0, &v, (incmoe_moe_split_t)2).find("split 2 is not per-token"));
    incmoe_moe_placement_t no_ranks = {ok.offsets.data(), nullptr};
    EXPECT_NE(std::string::npos, refusal(&s, 0, &no_ranks).find("NULL"));
}
