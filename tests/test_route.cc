/*
 * test_route.cc - an MoE benchmark's routing (tools/route.h): the placements
 * are incmoe-model's, each token's experts are k distinct ones drawn as the
 * model draws them (checked against the exact probabilities of successive
 * sampling, enumerated here), and any rank computes any rank's sets alike.
 */
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "route.h"
}

namespace
{

inc_route_spec_t spec(int n, int e, int k, double skew, inc_placement_t place, uint64_t seed)
{
    inc_route_spec_t s = {};
    s.nranks = n;
    s.experts = e;
    s.k = k;
    s.skew = skew;
    s.zipf = skew > 0;
    s.placement = place;
    s.seed = seed;
    return s;
}

struct Route {
    inc_route_t r;
    Route(const inc_route_spec_t &s, size_t tokens)
    {
        EXPECT_EQ(inc_route_make(&s, tokens, &r), 0);
    }
    ~Route()
    {
        inc_route_free(&r);
    }
    /* The share of every rank's tokens whose set holds rank d. */
    double share(int d) const
    {
        size_t hits = 0;
        for (int s = 0; s < r.spec.nranks; s++)
            for (size_t i = 0; i < r.tokens; i++)
                hits += inc_route_has(inc_route_set(&r, s, i), d);
        return (double)hits / (double)(r.spec.nranks * r.tokens);
    }
};

int popcount(const uint64_t *set, size_t words)
{
    int n = 0;
    for (size_t w = 0; w < words; w++)
        n += __builtin_popcountll(set[w]);
    return n;
}

TEST(Route, PlacementsAreIncmoeModels)
{
    Route c(spec(4, 10, 1, 0, INC_PLACE_CONTIGUOUS, 1), 1);
    EXPECT_EQ(std::vector<int>(c.r.owner, c.r.owner + 10),
              (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
    Route s(spec(4, 10, 1, 0, INC_PLACE_STRIDED, 1), 1);
    EXPECT_EQ(std::vector<int>(s.r.owner, s.r.owner + 10),
              (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
}

/* With one expert per rank a set's ranks are its experts: k distinct ones, every token. */
TEST(Route, EachTokenHasKDistinctExperts)
{
    for (double skew : {0.0, 1.0, 3.0}) {
        Route r(spec(70, 70, 9, skew, INC_PLACE_STRIDED, 5), 300);
        ASSERT_EQ(r.r.words, 2u);
        for (int s = 0; s < 70; s++)
            for (size_t i = 0; i < 300; i++)
                ASSERT_EQ(popcount(inc_route_set(&r.r, s, i), 2), 9) << s << " " << i;
    }
}

/* The sets depend on (seed, rank, token) only: another computation gives the same, another
   seed other ones, and two ranks' tokens differ. */
TEST(Route, SetsAreTheSameWhoeverComputesThem)
{
    inc_route_spec_t a = spec(8, 64, 8, 1.0, INC_PLACE_CONTIGUOUS, 7);
    Route x(a, 100), y(a, 100);
    size_t n = 8 * 100 * x.r.words;
    EXPECT_EQ(std::vector<uint64_t>(x.r.sets, x.r.sets + n),
              std::vector<uint64_t>(y.r.sets, y.r.sets + n));
    a.seed = 8;
    Route z(a, 100);
    EXPECT_NE(std::vector<uint64_t>(x.r.sets, x.r.sets + n),
              std::vector<uint64_t>(z.r.sets, z.r.sets + n));
    EXPECT_NE(std::vector<uint64_t>(x.r.sets, x.r.sets + 100),
              std::vector<uint64_t>(x.r.sets + 100, x.r.sets + 200));
}

/* Uniform: a rank holding E/N experts is in a token's set with probability
   1 - C(E - E/N, k) / C(E, k) (issue 18's k-bar / (N-1)). */
TEST(Route, UniformReachesARankAsTheClosedFormSays)
{
    Route r(spec(8, 64, 8, 0, INC_PLACE_CONTIGUOUS, 1), 20000);
    double miss = 1;
    for (int j = 0; j < 8; j++)
        miss *= (double)(64 - 8 - j) / (64 - j);
    for (int d = 0; d < 8; d++)
        EXPECT_NEAR(r.share(d), 1 - miss, 0.01) << "rank " << d;
}

/* zipf:S with k = 2: the probability that rank r is in a set, enumerated over the ordered
   pairs of successive sampling (the first in proportion to the weights, the second among the
   rest), against the share drawn; rank 0 holds the most popular experts. */
TEST(Route, ZipfFollowsSuccessiveSamplingExactly)
{
    const int n = 4, e = 16;
    const double skew = 1.2;
    Route r(spec(n, e, 2, skew, INC_PLACE_CONTIGUOUS, 3), 40000);
    std::vector<double> w(e);
    double total = 0;
    for (int x = 0; x < e; x++)
        total += w[x] = std::pow(x + 1.0, -skew);
    std::vector<double> p(n, 0.0);
    for (int a = 0; a < e; a++)
        for (int b = 0; b < e; b++)
            if (a != b) {
                double pr = w[a] / total * w[b] / (total - w[a]);
                int ra = r.r.owner[a], rb = r.r.owner[b];
                p[ra] += pr;
                if (rb != ra)
                    p[rb] += pr;
            }
    for (int d = 0; d < n; d++)
        EXPECT_NEAR(r.share(d), p[d], 0.01) << "rank " << d;
    EXPECT_GT(r.share(0), r.share(n - 1) + 0.2);
}

/* A skew so strong that redrawing the chosen experts stops paying, with k = E: the draw
   among the rest still ends, with every expert. */
TEST(Route, StrongSkewWithKEqualToEEnds)
{
    Route r(spec(4, 8, 8, 100, INC_PLACE_STRIDED, 2), 50);
    for (int s = 0; s < 4; s++)
        for (size_t i = 0; i < 50; i++)
            ASSERT_EQ(inc_route_set(&r.r, s, i)[0], 0xfu);
}

TEST(Route, RoutesAndPlacementsParseAsIncmoeModelWritesThem)
{
    inc_route_spec_t s = {};
    char text[64];
    ASSERT_EQ(inc_route_parse("uniform", &s), 0);
    inc_route_text(&s, text, sizeof(text));
    EXPECT_STREQ(text, "uniform");
    for (auto [in, out] :
         std::vector<std::pair<const char *, const char *>>{{"zipf:1.0", "zipf:1"},
                                                            {"zipf:0.25", "zipf:0.25"},
                                                            {"zipf:0", "zipf:0"},
                                                            {"zipf:100", "zipf:100"}}) {
        ASSERT_EQ(inc_route_parse(in, &s), 0) << in;
        inc_route_text(&s, text, sizeof(text));
        EXPECT_STREQ(text, out);
    }
    for (const char *bad : {"zipf", "zipf:", "zipf:-1", "zipf:1x", "zipf:101", "Uniform", ""})
        EXPECT_EQ(inc_route_parse(bad, &s), -1) << bad;
    inc_placement_t p;
    EXPECT_EQ(inc_placement_parse("strided", &p), 0);
    EXPECT_EQ(p, INC_PLACE_STRIDED);
    EXPECT_EQ(inc_placement_parse("contiguous", &p), 0);
    EXPECT_EQ(p, INC_PLACE_CONTIGUOUS);
    EXPECT_EQ(inc_placement_parse("random", &p), -1);
}

} // namespace
