/*
 * test_moe_bench.cc - incmoe-moe-bench as a user runs it: its decode rows, and
 * its placement with replicas (--extra-slots: the outputs still pass the
 * bench's fp64 and cosine checks, the busiest rank's received rows fall on
 * zipf:1, bad values are refused with the reason).
 *
 * The decode rows as a user runs them (an
 * embedded run: a real switch and N rank processes on loopback): each row's
 * bound is the busiest rank's rows at the link rate both ways plus the FFN the
 * row reports, its t/bound the layer time over it; the link rate comes from
 * --link-mbps, else the testbed's TESTBED_MBPS, and without either the bound
 * is left out; a TESTBED_MBPS that is not a rate is a clear error.
 *
 * The reference routing is one the test knows without the bench's draws:
 * with k = E every token goes to every rank, so a rank sends each of its T
 * rows up once and receives (N - 1) T rows: the busiest direction carries
 * (N - 1) T rows.
 */
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"

using perf_test::describe;
using perf_test::RunResult;

static const std::string kBench = TOP_BUILDDIR "/tools/incmoe-moe-bench";

/* A decode row (a line "decode T ..."): tok/rank algo routing mode ms rows ffn_ms bound_ms t/bound.
 */
struct DecodeRow {
    int tokens;
    std::string algo, routing, mode, ms, rows, ffn, bound, ratio;
};

static std::vector<DecodeRow> decode_rows(const std::string &out)
{
    std::vector<DecodeRow> rows;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string tag, tok;
        DecodeRow r;
        if (!(f >> tag >> tok) || tag != "decode" ||
            tok.find_first_not_of("0123456789") != std::string::npos)
            continue; /* not a row: the section's lines, its header */
        r.tokens = std::stoi(tok);
        f >> r.algo >> r.routing >> r.mode >> r.ms >> r.rows >> r.ffn >> r.bound >> r.ratio;
        rows.push_back(r);
    }
    return rows;
}

/* N=4, E=k=4, H=64 fp32 (rows of 256 B), T = 1 and 3, baseline ring and in-network. */
static RunResult run_every_token_everywhere(const std::vector<std::string> &more)
{
    std::vector<std::string> argv{kBench, "-N", "4",  "-E",     "4",        "-k",     "4",
                                  "-H",   "64", "-I", "32",     "-t",       "1,3",    "-n",
                                  "1",    "-w", "0",  "--algo", "ring,inc", "--mode", "baseline"};
    argv.insert(argv.end(), more.begin(), more.end());
    return perf_test::run_cmd(argv, 120);
}

TEST(MoeBenchDecode, TheBoundIsTheBusiestRanksRowsAtTheLinkRateAndTheFfn)
{
    unsetenv("TESTBED_MBPS");
    RunResult r = run_every_token_everywhere({"--link-mbps", "100"});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("link 100 Mbit/s per direction (--link-mbps)"), std::string::npos)
        << r.out;
    std::vector<DecodeRow> rows = decode_rows(r.out);
    ASSERT_EQ(rows.size(), 4u) << r.out; /* 2 token counts x 2 algorithms x 1 mode */
    for (const DecodeRow &d : rows) {
        SCOPED_TRACE(d.algo + " T=" + std::to_string(d.tokens));
        EXPECT_EQ(d.mode, "baseline");
        EXPECT_EQ(std::stod(d.rows), 3.0 * d.tokens); /* (N - 1) T */
        /* Both ways: 2 x rows x 256 B x 8 bits at 100 Mbit/s, in ms; the printed values
           are rounded to the microsecond. */
        double link_ms = 2 * 3.0 * d.tokens * 256 * 8 / 100e3;
        double ffn = std::stod(d.ffn), bound = std::stod(d.bound), ms = std::stod(d.ms);
        EXPECT_GT(ffn, 0);
        EXPECT_NEAR(bound, link_ms + ffn, 0.0015);
        /* t/bound is printed to 0.01 from the unrounded times; ms and bound, each to 0.001,
           move ms / bound by up to (ms / bound) (0.0005 / ms + 0.0005 / bound). */
        const double q = ms / bound;
        EXPECT_NEAR(std::stod(d.ratio), q, 0.005 + q * (0.0005 / ms + 0.0005 / bound) + 1e-9);
    }
}

TEST(MoeBenchDecode, TheTestbedsRateServesWithoutTheFlag)
{
    setenv("TESTBED_MBPS", "50", 1);
    RunResult r = run_every_token_everywhere({});
    unsetenv("TESTBED_MBPS");
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("link 50 Mbit/s per direction (the testbed's"), std::string::npos)
        << r.out;
    std::vector<DecodeRow> rows = decode_rows(r.out);
    ASSERT_FALSE(rows.empty()) << r.out;
    for (const DecodeRow &d : rows)
        EXPECT_NEAR(std::stod(d.bound), 2 * 3.0 * d.tokens * 256 * 8 / 50e3 + std::stod(d.ffn),
                    0.0015);
}

TEST(MoeBenchDecode, NoLinkRateNoBound)
{
    unsetenv("TESTBED_MBPS");
    RunResult r = run_every_token_everywhere({});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("link rate unknown"), std::string::npos) << r.out;
    std::vector<DecodeRow> rows = decode_rows(r.out);
    ASSERT_FALSE(rows.empty()) << r.out;
    for (const DecodeRow &d : rows) {
        EXPECT_EQ(std::stod(d.rows), 3.0 * d.tokens);
        EXPECT_EQ(d.bound, "-");
        EXPECT_EQ(d.ratio, "-");
    }
}

TEST(MoeBenchDecode, ATestbedRateThatIsNoRateIsAClearError)
{
    setenv("TESTBED_MBPS", "fast", 1);
    RunResult r = run_every_token_everywhere({});
    unsetenv("TESTBED_MBPS");
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("TESTBED_MBPS='fast' is not a link rate"), std::string::npos)
        << describe(r);
    EXPECT_TRUE(decode_rows(r.out).empty()) << r.out;
}

/* ---- replicas (--extra-slots) ---- */

/* N=4, E=16, k=4, zipf:1 (the popular experts on rank 0 without replicas), T = 64, in-network
   and a2a, masked and full routing, baseline and pipelined: the pipelined rows are checked
   against fp64 (ref_err) and the baseline's outputs (min_cos). */
static RunResult run_replicated(const std::vector<std::string> &more)
{
    std::vector<std::string> argv{
        kBench,    "-N",        "4",           "-E",      "16",     "-k",
        "4",       "-H",        "32",          "-I",      "16",     "-t",
        "64",      "-n",        "1",           "-w",      "0",      "--algo",
        "inc,a2a", "--routing", "masked,full", "--route", "zipf:1", "--ranks-in-process"};
    argv.insert(argv.end(), more.begin(), more.end());
    return perf_test::run_cmd(argv, 120);
}

TEST(MoeBenchReplicas, OneExtraSlotRunsVerifiedAndLowersTheBusiestRanksRows)
{
    RunResult r = run_replicated({"--extra-slots", "1"});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("experts placed with replicas"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("placement: --extra-slots 1, chosen by incmoe_moe_placement_choose "
                         "from 256 tok/rank of seed 1; experts per rank: 5 5 5 5"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("incmoe-moe-bench: outputs verified"), std::string::npos) << r.out;
    /* Every pipelined row's fp64 error, as the bench's own check bounds it (float: 1e-4). */
    int rows = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string t, algo, routing, c[12];
        if (!(f >> t >> algo >> routing) || t != "64" || (algo != "inc" && algo != "a2a"))
            continue;
        for (std::string &x : c)
            f >> x;
        SCOPED_TRACE(line);
        EXPECT_LE(std::stod(c[11]), 1e-4);    /* ref_err */
        EXPECT_GE(std::stod(c[10]), 0.99999); /* min_cos */
        rows++;
    }
    EXPECT_EQ(rows, 4) << r.out; /* 2 algorithms x 2 routings */
    long long with = -1, without = -1;
    size_t at = r.out.find("busiest rank's received rows per forward at 64 tok/rank: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                          "busiest rank's received rows per forward at 64 tok/rank: %lld with "
                          "replicas, %lld contiguous without",
                          &with, &without),
              2)
        << r.out;
    EXPECT_GT(without, 0);
    EXPECT_LT(with, without);
}

TEST(MoeBenchReplicas, BadExtraSlotsAreRefusedWithTheReason)
{
    RunResult r = run_replicated({"--extra-slots", "-1"});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("bad value '-1' for --extra-slots: out of range (allowed: 0..65536)"),
              std::string::npos)
        << describe(r);
    r = run_replicated({"--extra-slots", "13"});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("--extra-slots 13 is more than E - E/N = 12"), std::string::npos)
        << describe(r);
    r = run_replicated({"--placement-seed", "3"});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("--placement-seed seeds --extra-slots's sample"), std::string::npos)
        << describe(r);
    r = run_replicated({"--extra-slots", "1", "--placement-tokens", "0"});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("bad value '0' for --placement-tokens"), std::string::npos) << describe(r);
}
