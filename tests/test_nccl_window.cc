/* test_nccl_window.cc - the cut of NCCL's CollNet windows into client-API pieces. */
extern "C" {
#include "plugin/nccl/window.h"
}

#include <vector>

#include <gtest/gtest.h>

/* Every window of every small shape: the pieces cover the window exactly once. */
TEST(NcclWindow, PiecesCoverEveryWindowExactlyOnce)
{
    for (int n = 1; n <= 5; n++) {
        for (size_t b = 1; b <= 6; b++) {
            size_t total = n * b;
            for (size_t wo = 0; wo <= total; wo++) {
                for (size_t wb = 0; wo + wb <= total; wb++) {
                    window_piece_t p[WINDOW_MAX_PIECES];
                    int np = window_split(n, b, wo, wb, p);
                    ASSERT_GE(np, 0) << n << " " << b << " " << wo << " " << wb;
                    ASSERT_LE(np, WINDOW_MAX_PIECES);
                    std::vector<int> hits(total, 0);
                    for (int i = 0; i < np; i++) {
                        ASSERT_LE(p[i].first_block, p[i].last_block);
                        ASSERT_GE(p[i].first_block, 0);
                        ASSERT_LT(p[i].last_block, n);
                        ASSERT_GT(p[i].length, 0u);
                        ASSERT_LE(p[i].offset + p[i].length, b);
                        for (int k = p[i].first_block; k <= p[i].last_block; k++)
                            for (size_t x = 0; x < p[i].length; x++)
                                hits[k * b + p[i].offset + x]++;
                    }
                    for (size_t x = 0; x < total; x++)
                        ASSERT_EQ(hits[x], (x >= wo && x < wo + wb) ? 1 : 0)
                            << "n=" << n << " b=" << b << " window [" << wo << ",+" << wb
                            << ") byte " << x;
                    for (int r = 0; r < n; r++) {
                        size_t expect = 0;
                        for (size_t x = r * b; x < (r + 1) * b; x++)
                            expect += (x >= wo && x < wo + wb);
                        ASSERT_EQ(window_block_bytes(b, wo, wb, r), expect);
                    }
                }
            }
        }
    }
}

TEST(NcclWindow, ShapesGiveTheExpectedPieces)
{
    window_piece_t p[WINDOW_MAX_PIECES];
    /* inside one block */
    ASSERT_EQ(window_split(4, 100, 110, 50, p), 1);
    EXPECT_EQ(p[0].first_block, 1);
    EXPECT_EQ(p[0].offset, 10u);
    EXPECT_EQ(p[0].length, 50u);
    /* head + full middle + tail */
    ASSERT_EQ(window_split(4, 100, 50, 280, p), 3);
    EXPECT_EQ(p[0].first_block, 0);
    EXPECT_EQ(p[0].offset, 50u);
    EXPECT_EQ(p[1].first_block, 1);
    EXPECT_EQ(p[1].last_block, 2);
    EXPECT_EQ(p[2].first_block, 3);
    EXPECT_EQ(p[2].length, 30u);
    /* whole buffer: one piece */
    ASSERT_EQ(window_split(4, 100, 0, 400, p), 1);
    EXPECT_EQ(p[0].first_block, 0);
    EXPECT_EQ(p[0].last_block, 3);
}

TEST(NcclWindow, RejectsWindowsOutsideTheBuffer)
{
    window_piece_t p[WINDOW_MAX_PIECES];
    EXPECT_EQ(window_split(4, 100, 350, 51, p), -1);
    EXPECT_EQ(window_split(4, 0, 0, 1, p), -1);
    EXPECT_EQ(window_split(4, 100, SIZE_MAX - 2, 5, p), -1);
    EXPECT_EQ(window_split(0, 100, 0, 1, p), -1);
    EXPECT_EQ(window_split(4, 100, 400, 0, p), 0);
}
