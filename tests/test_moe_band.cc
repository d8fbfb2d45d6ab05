/* test_moe_band.cc - the band arithmetic every role shares (moe/band.h). */
#include <vector>

#include <gtest/gtest.h>

#include "band.h"

/* For every Tmax and band count: bands are ceil(Tmax/nb) rows, consecutive,
   disjoint, cover [0, Tmax) exactly, and the valid rows of any owner count add
   up to that count. */
TEST(MoeBand, BandsTileTheBlockExactly)
{
    for (size_t tmax = 0; tmax <= 70; tmax++) {
        for (size_t nb = 1; nb <= 80; nb++) {
            size_t beta = (tmax + nb - 1) / nb;
            size_t next = 0;
            for (size_t j = 0; j < nb; j++) {
                band_t b = band_get(tmax, nb, j);
                ASSERT_EQ(b.start, next < tmax ? next : tmax) << tmax << " " << nb << " " << j;
                ASSERT_LE(b.rows, beta);
                ASSERT_LE(b.start + b.rows, tmax);
                if (b.rows > 0) {
                    ASSERT_EQ(b.start, j * beta);
                }
                next = b.start + b.rows;
            }
            ASSERT_EQ(next, tmax) << "bands of tmax=" << tmax << " nb=" << nb;
            for (size_t t = 0; t <= tmax; t++) {
                size_t sum = 0;
                for (size_t j = 0; j < nb; j++)
                    sum += band_valid_rows(band_get(tmax, nb, j), t);
                ASSERT_EQ(sum, t) << "owner of " << t << " rows, tmax=" << tmax << " nb=" << nb;
            }
        }
    }
}

TEST(MoeBand, WorkedExample)
{
    /* Tmax 10, 4 bands: beta 3 -> [0,3) [3,6) [6,9) [9,10). */
    size_t start[] = {0, 3, 6, 9}, rows[] = {3, 3, 3, 1};
    for (size_t j = 0; j < 4; j++) {
        band_t b = band_get(10, 4, j);
        EXPECT_EQ(b.start, start[j]);
        EXPECT_EQ(b.rows, rows[j]);
    }
    /* Tmax 3, 5 bands: beta 1, bands 3 and 4 are empty. */
    EXPECT_EQ(band_get(3, 5, 3).rows, 0u);
    EXPECT_EQ(band_get(3, 5, 4).rows, 0u);
    /* An owner of 4 rows in band [3,6) has 1 valid row; of 2 rows, none. */
    EXPECT_EQ(band_valid_rows(band_get(10, 4, 1), 4), 1u);
    EXPECT_EQ(band_valid_rows(band_get(10, 4, 1), 2), 0u);
    EXPECT_EQ(band_get(0, 3, 2).rows, 0u);
}

TEST(MoeBand, SplitCoversTheBandInOrder)
{
    for (size_t rows = 0; rows <= 40; rows++) {
        for (size_t parts = 1; parts <= 9; parts++) {
            band_t b = {5, rows};
            size_t next = 5;
            for (size_t q = 0; q < parts; q++) {
                band_t s = band_split(b, parts, q);
                ASSERT_EQ(s.start, next);
                ASSERT_LE(s.rows, rows / parts + 1);
                ASSERT_GE(s.rows, rows / parts);
                next += s.rows;
            }
            ASSERT_EQ(next, 5 + rows);
        }
    }
}
