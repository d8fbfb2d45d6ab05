/*
 * test_moe_routing.cc - the pure functions behind masked routing: a token's
 * destination set, what a rank's tokens need of the others, the bytes of
 * each routing and auto's choice (moe/routing.c), the band count that follows
 * the routing (moe/bandmodel.c), and where the compute roles
 * find a band's received rows by list position (moe/plan.h).  Each against
 * an independent count.
 */
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "bandmodel.h"
#include "plan.h"
#include "routing.h"
}

namespace
{

/* Contiguous placement, E/N experts a rank. */
std::vector<int32_t> contiguous(int E, int N)
{
    std::vector<int32_t> owner(E);
    for (int e = 0; e < E; e++)
        owner[e] = e / (E / N);
    return owner;
}

} // namespace

/* The set holds exactly the owners of the token's experts, across word boundaries. */
TEST(MoeRouting, TokenSetIsTheOwnersOfItsExperts)
{
    const int N = 200, E = 400, k = 6;
    std::vector<int32_t> owner = contiguous(E, N);
    std::mt19937 rng(5);
    const size_t words = INCMOE_SET_WORDS(N);
    for (int it = 0; it < 1000; it++) {
        std::vector<int32_t> ids(k);
        std::set<int> want;
        for (auto &id : ids) {
            id = (int32_t)(rng() % E);
            want.insert(owner[id]);
        }
        std::vector<uint64_t> set(words, ~0ull);
        plan_token_set(owner.data(), ids.data(), k, set.data(), words);
        std::set<int> got;
        for (int r = 0; r < N; r++)
            if ((set[r / 64] >> (r % 64)) & 1)
                got.insert(r);
        ASSERT_EQ(got, want) << "iteration " << it;
    }
}

/* Pairs count the other ranks a token goes to; routed counts tokens with at least one. */
TEST(MoeRouting, CountsWhatTheTokensNeedOfTheOthers)
{
    const int N = 4, E = 8, k = 2;
    std::vector<int32_t> owner = contiguous(E, N); /* rank r: experts 2r, 2r + 1 */
    /* Rank 1's tokens: its own two experts; one remote; two remote ranks; own and remote. */
    std::vector<int32_t> ids = {2, 3, 0, 1, 4, 7, 2, 6};
    uint64_t pairs = 99, routed = 99;
    routing_count(owner.data(), N, 1, ids.data(), k, 4, &pairs, &routed);
    EXPECT_EQ(pairs, 0u + 1u + 2u + 1u);
    EXPECT_EQ(routed, 3u);
    routing_count(owner.data(), N, 1, ids.data(), k, 0, &pairs, &routed);
    EXPECT_EQ(pairs, 0u);
    EXPECT_EQ(routed, 0u);
}

/* With rows of one size and every token needed elsewhere, the bytes per direction are the
   issue's rows: N * T for full, (1 + k-bar) * T for masked (plus the bitmaps). */
TEST(MoeRouting, BytesFollowTheRowsOfEachPath)
{
    routing_load_t l = {8, 8 * 1000, 8 * 4753, 8 * 1000, 4096, 4096};
    double full, masked;
    routing_bytes(&l, &full, &masked);
    EXPECT_DOUBLE_EQ(full, 8.0 * 1000 * 4096);
    /* Up: each row once with its bitmap twice (8 bytes at N = 8), each pair's partial. */
    EXPECT_DOUBLE_EQ(masked, (1000.0 * (4096 + 16) + 4753.0 * 4096));
    EXPECT_NEAR(masked / full, 5.753 / 8, 0.001);
}

/* Masked at or below 90% of full's bytes, full above; full with one rank or no tokens. */
TEST(MoeRouting, AutoChoosesByTheShareOfBytes)
{
    /* N = 4, 400 tokens, rows of 1000 bytes, every token needed elsewhere: full moves
       4 * 400 * 1000 / 4 = 400000 bytes per direction; masked's busier direction is up,
       (400 * (1000 + 2 * 8) + 1000 * pairs) / 4, at most 360000 up to 1033 pairs. */
    routing_load_t at = {4, 400, 1033, 400, 1000, 1000}, over = at;
    over.pairs = 1034;
    EXPECT_EQ(routing_choose(&at), INCMOE_MOE_ROUTING_MASKED);
    EXPECT_EQ(routing_choose(&over), INCMOE_MOE_ROUTING_FULL);
    routing_load_t one = {1, 400, 0, 0, 1000, 1000}, none = {4, 0, 0, 0, 1000, 1000};
    EXPECT_EQ(routing_choose(&one), INCMOE_MOE_ROUTING_FULL);
    EXPECT_EQ(routing_choose(&none), INCMOE_MOE_ROUTING_FULL);
}

namespace
{

/* Issue 27's N=8 layer: E=64 k=8, H=512 fp32 (rows of 2112 bytes with their ids and
   weights, partials of 2048), 1024 tokens a rank, k-bar 4.75, every token needed
   elsewhere; 100 Mbit/s, 20 GFLOP/s, a band's AllGather and ReduceScatter 2 ms, a plan's
   synchronisation 12 ms. */
bandmodel_in_t issue27_n8(int masked)
{
    bandmodel_in_t in = {};
    in.load = {8, 8 * 1024, 38912, 8 * 1024, 2112, 2048};
    in.tmax = 1024;
    in.masked = masked;
    in.k = 8;
    in.row_flops = 6.0 * 512 * 256;
    in.band_s = 2e-3;
    in.sync_s = 12e-3;
    in.byte_s = 8e-8;
    in.flop_s = 1 / 20e9;
    return in;
}

} // namespace

/* Full routing: every other rank's rows, 7 * 1024 * 2112 bytes = 1.2111 s, over the band's
   2 ms: sqrt(2 * 1.2111 / 0.002) = 34.8.  Masked: the busier direction is down, (38912 *
   2112 + 8192 * 2048) / 8 bytes = 0.9896 s, over 2 + 12 ms: sqrt(141.4) = 11.9.  The FFN
   (1024 * 8 * 786432 flops, 0.322 s) is the slower stage of neither. */
TEST(MoeRouting, MaskedRunsFewerBandsThanFullAtTheSameShape)
{
    bandmodel_in_t full = issue27_n8(0), masked = issue27_n8(1);
    EXPECT_NEAR(bandmodel_stage_s(&full, 1), 1.21110528, 1e-9);
    EXPECT_NEAR(bandmodel_stage_s(&masked, 1), 0.9895936, 1e-9);
    EXPECT_DOUBLE_EQ(bandmodel_overhead_s(&full), 2e-3);
    EXPECT_DOUBLE_EQ(bandmodel_overhead_s(&masked), 14e-3);
    EXPECT_EQ(bandmodel_count(&full), 35);
    EXPECT_EQ(bandmodel_count(&masked), 12);
    /* Without the plan's cost the pairs alone give fewer: sqrt(2 * 0.9896 / 0.002) = 31.5. */
    masked.sync_s = 0;
    EXPECT_EQ(bandmodel_count(&masked), 31);
}

/* A masked forward of 34 bands that took 1.6 s shows (1.6 - 36 / 34 * 0.9896) / 34 =
   16.24 ms a band, which then replaces the probes' 14 ms: sqrt(2 * 0.9896 / 0.01624) =
   11.0 bands.  A forward no slower than its stages shows none; full routing ignores it. */
TEST(MoeRouting, AMaskedForwardShowsItsBandCost)
{
    bandmodel_in_t masked = issue27_n8(1), full = issue27_n8(0);
    double seen = bandmodel_seen_s(&masked, 34, 1.6);
    EXPECT_NEAR(seen, (1.6 - 36.0 / 34 * 0.9895936) / 34, 1e-12);
    masked.seen_s = full.seen_s = seen;
    EXPECT_DOUBLE_EQ(bandmodel_overhead_s(&masked), seen);
    EXPECT_EQ(bandmodel_count(&masked), 11);
    EXPECT_EQ(bandmodel_count(&full), 35);
    EXPECT_EQ(bandmodel_seen_s(&masked, 34, 1.0), 0.0);
    EXPECT_EQ(bandmodel_seen_s(&masked, 0, 1.6), 0.0);
}

/* The FFN sets the stage where it is the slower; the count stays within 1 .. tmax / 8
   rounded up (at most 64), and 8 where nothing costs. */
TEST(MoeRouting, BandCountBounds)
{
    bandmodel_in_t in = issue27_n8(1);
    in.flop_s = 1 / 1e9; /* 6.44 s of FFN */
    EXPECT_NEAR(bandmodel_stage_s(&in, 1), 1024.0 * 8 * 786432 / 1e9, 1e-9);
    EXPECT_EQ(bandmodel_count(&in), 30); /* sqrt(2 * 6.4425 / 0.014) = 30.3 */
    in.tmax = 20;                        /* at most 3 bands of 8 rows */
    EXPECT_EQ(bandmodel_count(&in), 3);
    in = issue27_n8(1);
    in.sync_s = 10; /* sqrt(2 * 0.99 / 10.002) rounds to 0 */
    EXPECT_EQ(bandmodel_count(&in), 1);
    in.band_s = in.sync_s = 0;
    EXPECT_EQ(bandmodel_count(&in), 8);
}

namespace
{

/* The prefill bench's MoE block at N=4 with --intermediate 2048 (E=64 k=8 H=512 bf16,
   512 tokens a rank, full routing): rows of 512 * 2 + 64 bytes, 100 Mbit/s, 100 GFLOP/s,
   a band's AllGather and ReduceScatter 2 ms. */
bandmodel_in_t n4_i2048()
{
    bandmodel_in_t in = {};
    in.load = {4, 4 * 512, 0, 0, 1088, 1024};
    in.tmax = 512;
    in.k = 8;
    in.row_flops = 6.0 * 512 * 2048;
    in.band_s = 2e-3;
    in.byte_s = 8e-8;
    in.flop_s = 1 / 100e9;
    return in;
}

/* The least of (nb + 2) / nb * max(link, (rows + nb * pass) * flops) + nb * band over
   1 .. 64, written out apart from the model. */
int least_time_bands(double link, double rows, double pass, double flops, double band)
{
    int best = 0;
    double best_t = 0;
    for (int nb = 1; nb <= 64; nb++) {
        double ffn = (rows + nb * pass) * flops;
        double t = (nb + 2.0) / nb * (link > ffn ? link : ffn) + nb * band;
        if (best == 0 || t < best_t)
            best = nb, best_t = t;
    }
    return best;
}

} // namespace

/* A band's pass over heavy experts' weights (100 rows' worth of FLOPs a band, as
   incmoe-ffn-bench --bands shows at this shape) makes the FFN stage grow with the count:
   0.2577 s of rows' FFN + 6.3 ms a band; the least time is then at 8 bands where the
   weights read for free would give sqrt(2 * 0.2577 / 0.002) = 16. */
TEST(MoeRouting, HeavyExpertsRunFewerBands)
{
    bandmodel_in_t in = n4_i2048();
    const double flops = 6.0 * 512 * 2048 / 100e9, link = 3 * 512 * 1088 * 8e-8;
    EXPECT_NEAR(bandmodel_stage_s(&in, 8), 4096 * flops, 1e-12);
    EXPECT_EQ(bandmodel_count(&in), 16);
    in.pass_rows = 100;
    EXPECT_NEAR(bandmodel_stage_s(&in, 8), (4096 + 800) * flops, 1e-12);
    EXPECT_NEAR(bandmodel_time_s(&in, 8), 10.0 / 8 * (4096 + 800) * flops + 8 * 2e-3, 1e-12);
    EXPECT_EQ(least_time_bands(link, 4096, 100, flops, 2e-3), 8);
    EXPECT_EQ(bandmodel_count(&in), 8);
    /* Heavier still: fewer; and a pass alone, with free collectives, still bounds the count. */
    in.pass_rows = 400;
    EXPECT_EQ(bandmodel_count(&in), least_time_bands(link, 4096, 400, flops, 2e-3));
    EXPECT_LT(bandmodel_count(&in), 8);
    in.band_s = 0;
    EXPECT_EQ(bandmodel_count(&in), least_time_bands(link, 4096, 400, flops, 0));
    EXPECT_LT(bandmodel_count(&in), 64);
}

/* Where the link is the slower stage the pass hides behind it: a 2 s link stage gives
   sqrt(2 * 2 / 0.002) = 44.7, 45 bands, with or without 100 rows a band; and a forward's
   seen band cost leaves the pass to the stage. */
TEST(MoeRouting, APassBehindTheLinkCostsNoBands)
{
    bandmodel_in_t in = n4_i2048();
    in.byte_s = 2.0 / (3 * 512 * 1088);
    EXPECT_EQ(bandmodel_count(&in), 45);
    in.pass_rows = 100;
    EXPECT_EQ(bandmodel_count(&in), 45);
    in.byte_s = 8e-8; /* FFN-bound: 16 bands of 0.2577 + 16 * 6.3 ms took 0.6 s */
    const double stage = (4096 + 1600) * 6.0 * 512 * 2048 / 100e9;
    EXPECT_NEAR(bandmodel_seen_s(&in, 16, 0.6), (0.6 - 18.0 / 16 * stage) / 16, 1e-12);
}

namespace
{

/* A band's received rows as the dispatch lands them: every source's rows whose set holds
   `me`, in (source, row) order, with the source table. */
struct Landed {
    std::vector<size_t> counts;
    std::vector<uint32_t> src;
    std::vector<size_t> pos; /* each received row's list position, counted independently */
    incmoe_fifo_dispatch_t block[1] = {};
    moe_ctx_t x = {};
};

} // namespace

/* plan_recv_lower finds the first received row at or after each list position. */
TEST(MoeRouting, ReceivedRowsByListPosition)
{
    std::mt19937 rng(11);
    for (int it = 0; it < 200; it++) {
        Landed l;
        const int N = 1 + (int)(rng() % 6);
        const size_t tmax = 1 + rng() % 20;
        for (int s = 0; s < N; s++)
            l.counts.push_back(rng() % (tmax + 1));
        l.x.N = N;
        l.x.counts = l.counts.data();
        /* One band covering every row. */
        band_t b = band_get(tmax, 1, 0);
        size_t list = 0;
        l.src.assign(2 * (size_t)N * tmax, 0);
        size_t R = 0;
        for (int s = 0; s < N; s++) {
            for (size_t i = 0; i < l.counts[s]; i++, list++) {
                if (rng() % 3 == 0)
                    continue;
                l.src[2 * R] = (uint32_t)s;
                l.src[2 * R + 1] = (uint32_t)i;
                l.pos.push_back(list);
                R++;
            }
        }
        l.block[0].nrecv = R;
        l.x.src = l.src.data();
        l.x.dcb = l.block;
        for (size_t i = 0; i < R; i++)
            ASSERT_EQ(plan_recv_pos(&l.x, b, i), l.pos[i]);
        for (size_t p = 0; p <= list + 1; p++) {
            size_t want = 0;
            while (want < R && l.pos[want] < p)
                want++;
            ASSERT_EQ(plan_recv_lower(&l.x, 0, b, p), want) << "iteration " << it << " p " << p;
        }
    }
}
