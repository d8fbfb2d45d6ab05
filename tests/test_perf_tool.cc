/*
 * test_perf_tool.cc - incmoe-perf as a user runs it: embedded runs (a real
 * switch and N rank processes on loopback) for every --op and every algorithm
 * must check every byte and report #wrong 0; the table must parse, and the
 * routed ops' traffic columns must follow from their rows; a corrupted result
 * must be caught; bad flags must give a clear error and a non-zero exit, and
 * so must the switch's and the other tools' out-of-range numbers.  With
 * replicas (--extra-slots) the routed ops stay exact and the busiest rank's
 * received rows fall on skewed routing.  A run on an
 * algorithm this build does not have yet (or without dispatch and combine) is
 * skipped, saying so.
 */
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "perf_run.h"

using perf_test::describe;
using perf_test::RunResult;

static const std::string kPerf = TOP_BUILDDIR "/tools/incmoe-perf";

static RunResult perf(std::vector<std::string> args, int timeout_s = 90)
{
    args.insert(args.begin(), kPerf);
    return perf_test::run_cmd(args, timeout_s);
}

/* The sizes incmoe-perf must print for -b lo -e hi -f f: lo, lo*f, ... <= hi. */
static std::vector<size_t> sizes(size_t lo, size_t hi, size_t f)
{
    std::vector<size_t> v;
    for (size_t s = lo; s <= hi; s *= f)
        v.push_back(s);
    return v;
}

struct Expect {
    std::string op, algo, dtype, redop;
    size_t esize;
    int nranks;
    bool link; /* --link-mbps given: agrs prints %bound */
};

/* Checks every row against what the arguments imply; returns "" when all fit. */
static std::string check_table(const RunResult &r, const Expect &e, const std::vector<size_t> &want)
{
    auto rows = perf_test::table_rows(r.out);
    if (rows.size() != want.size())
        return "expected " + std::to_string(want.size()) + " rows, got " +
               std::to_string(rows.size());
    size_t ncol = e.op == "agrs" ? (e.link ? 10 : 9) : 8;
    for (size_t i = 0; i < rows.size(); i++) {
        auto &row = rows[i];
        std::string where = "row " + std::to_string(i) + ": ";
        if (row.size() != ncol)
            return where + "expected " + std::to_string(ncol) + " columns, got " +
                   std::to_string(row.size());
        /* size and count: whole elements, and for AG/RS whole blocks of N */
        size_t unit = e.op == "allreduce" ? e.esize : e.esize * e.nranks;
        size_t bytes = want[i] / unit * unit;
        if (std::stoull(row[0]) != bytes)
            return where + "size " + row[0] + ", expected " + std::to_string(bytes);
        if (std::stoull(row[1]) != bytes / e.esize)
            return where + "count " + row[1] + ", expected " + std::to_string(bytes / e.esize);
        if (row[2] != e.dtype)
            return where + "type " + row[2] + ", expected " + e.dtype;
        if (row[3] != (e.op == "allgather" ? "none" : e.redop))
            return where + "redop " + row[3];
        double t = std::stod(row[4]), algbw = std::stod(row[5]), busbw = std::stod(row[6]);
        if (!(t > 0))
            return where + "time " + row[4] + " is not positive";
        double moved = e.op == "agrs" ? 2.0 * bytes : (double)bytes;
        if (std::fabs(algbw - moved / t / 1e3) > 1e-4 + 0.01 * algbw)
            return where + "algbw " + row[5] + " is not size/time";
        double n = e.nranks, factor = e.op == "allreduce" ? 2 * (n - 1) / n : (n - 1) / n;
        if (std::fabs(busbw - algbw * factor) > 2e-4 + 0.01 * busbw)
            return where + "busbw " + row[6] + " does not follow from algbw " + row[5];
        if (row[7] != "0")
            return where + "#wrong " + row[7];
        if (e.op == "agrs") {
            double eq = std::stod(row[8]);
            if (std::fabs(eq - 2.0 * bytes * 8 / t) > 0.1 + 0.01 * eq)
                return where + "eqbw " + row[8] + " is not 2*size/time in Mbit/s";
        }
    }
    if (r.out.find("# Out of bounds values : 0 OK") == std::string::npos)
        return "no '# Out of bounds values : 0 OK' line";
    return "";
}

/* A correct run is a quiet run: the lines of `error` level r printed. */
static std::string error_text(const RunResult &r)
{
    std::string lines;
    for (const std::string &l : harness::error_lines(r.out + r.err))
        lines += l + "\n";
    return lines;
}

/* ---- the demo, as the README's first command runs it ------------------------ */

TEST(Demo, ACorrectRunIsAQuietRun)
{
    RunResult r = perf_test::run_cmd({TOP_BUILDDIR "/tools/incmoe", "demo"}, 120);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("incmoe demo: all results correct"), std::string::npos) << describe(r);
    EXPECT_EQ(error_text(r), "") << describe(r);
}

/* ---- incmoe config ---------------------------------------------------------- */

TEST(Config, AValueASettingDoesNotTakeIsNamedAndTheCommandFails)
{
    RunResult ok = perf_test::run_cmd({TOP_BUILDDIR "/tools/incmoe", "config"}, 30);
    EXPECT_EQ(ok.status, 0) << describe(ok);
    EXPECT_NE(ok.out.find("INCMOE_CREDITS"), std::string::npos) << describe(ok);
    setenv("INCMOE_CREDITS", "abc", 1);
    setenv("INCMOE_LOG_LEVEL", "bogus", 1);
    RunResult bad = perf_test::run_cmd({TOP_BUILDDIR "/tools/incmoe", "config"}, 30);
    unsetenv("INCMOE_CREDITS");
    unsetenv("INCMOE_LOG_LEVEL");
    EXPECT_EQ(bad.status, 1) << describe(bad);
    EXPECT_NE(bad.err.find("INCMOE_CREDITS=abc"), std::string::npos) << describe(bad);
    EXPECT_NE(bad.err.find("INCMOE_LOG_LEVEL=bogus"), std::string::npos) << describe(bad);
    EXPECT_NE(bad.err.find("not a log level"), std::string::npos) << describe(bad);
}

/* ---- every op with every algorithm ------------------------------------------ */

class PerfOps : public ::testing::TestWithParam<std::tuple<const char *, const char *>>
{
};

TEST_P(PerfOps, EmbeddedRunChecksEveryByte)
{
    std::string op = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
    RunResult r = perf({"-N", "4", "--op", op,  "--algo", algo, "-b", "1K", "-e",          "64K",
                        "-f", "8", "-n",   "3", "-w",     "1",  "-c", "1",  "--link-mbps", "1000"});
    ASSERT_EQ(r.status, 0) << describe(r);
    Expect e{op, algo, "float", "sum", 4, 4, true};
    EXPECT_EQ(check_table(r, e, sizes(1024, 65536, 8)), "") << describe(r);
    EXPECT_NE(r.out.find("algo " + algo), std::string::npos) << describe(r);
    EXPECT_EQ(error_text(r), "") << describe(r);
}

INSTANTIATE_TEST_SUITE_P(AllOps, PerfOps,
                         ::testing::Combine(::testing::Values("allgather", "reducescatter",
                                                              "allreduce", "agrs"),
                                            ::testing::Values("inc", "ring", "a2a")),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param)) + "_" +
                                    std::get<1>(info.param);
                         });

/* --tokens and --hidden size a full collective as the gathered buffer of every rank's tokens:
   the AllGather || ReduceScatter that moves the same tokens as a dispatch || combine. */
TEST(PerfOps, TokensAndHiddenSizeTheFullCollectivesOfTheSameTokens)
{
    RunResult r =
        perf({"-N", "2", "--op", "agrs", "--tokens", "6", "--hidden", "16", "-n", "2", "-w", "0"});
    ASSERT_EQ(r.status, 0) << describe(r);
    Expect e{"agrs", "inc", "float", "sum", 4, 2, false};
    EXPECT_EQ(check_table(r, e, {2 * 6 * 16 * 4}), "") << describe(r);
}

/* ---- the routed collectives: dispatch, combine, dc ------------------------------ */

/* One rank's line under a routed row: "#   rank r: sent A rows, B B; received C rows, D B". */
struct RankTraffic {
    unsigned long long rows_up = 0, up = 0, rows_down = 0, down = 0;
};

static std::vector<RankTraffic> rank_lines(const std::string &out)
{
    std::vector<RankTraffic> v;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        RankTraffic t;
        int r;
        if (std::sscanf(line.c_str(),
                        "#   rank %d: sent %llu rows, %llu B; received %llu rows, %llu B", &r,
                        &t.rows_up, &t.up, &t.rows_down, &t.down) == 5) {
            if (r != (int)v.size())
                return {};
            v.push_back(t);
        }
    }
    return v;
}

struct Routed {
    std::string op, algo, dtype, redop;
    size_t esize;
    int nranks, tokens, hidden;
    double link_mbps; /* 0: not given */
};

/* The row and the ranks' lines against what the arguments imply: sizes, bandwidths from the
   time, the maxima of the ranks' traffic, the bytes of the rows each algorithm carries (inc:
   a set of 8 x ceil(N/64) bytes with a row up and, in dispatch, down; the owner's sets again
   up in combine), what p2p sends arriving somewhere, and the bound. */
static std::string check_routed(const RunResult &r, const Routed &e)
{
    auto rows = perf_test::table_rows(r.out);
    if (rows.size() != 1)
        return "expected 1 row, got " + std::to_string(rows.size());
    auto &row = rows[0];
    if (row.size() != (e.link_mbps > 0 ? 14u : 12u))
        return "expected " + std::to_string(e.link_mbps > 0 ? 14 : 12) + " columns, got " +
               std::to_string(row.size());
    const unsigned long long rb = (unsigned long long)e.hidden * e.esize,
                             set = 8 * (((unsigned long long)e.nranks + 63) / 64);
    if (std::stoull(row[0]) != e.tokens * rb || std::stoull(row[1]) != (size_t)e.tokens * e.hidden)
        return "size " + row[0] + " / count " + row[1] + " are not the tokens' rows";
    if (row[2] != e.dtype || row[3] != (e.op == "dispatch" ? "none" : e.redop))
        return "type " + row[2] + " / redop " + row[3];
    double t = std::stod(row[4]), algbw = std::stod(row[5]), busbw = std::stod(row[6]);
    if (!(t > 0))
        return "time " + row[4] + " is not positive";
    if (std::fabs(algbw - e.tokens * rb / t / 1e3) > 1e-4 + 0.01 * algbw)
        return "algbw " + row[5] + " is not size/time";
    if (row[7] != "0")
        return "#wrong " + row[7];
    auto ranks = rank_lines(r.out);
    if (ranks.size() != (size_t)e.nranks)
        return "expected a line for each of " + std::to_string(e.nranks) + " ranks, got " +
               std::to_string(ranks.size());
    RankTraffic most, sum;
    for (size_t k = 0; k < ranks.size(); k++) {
        const RankTraffic &q = ranks[k];
        std::string who = "rank " + std::to_string(k) + ": ";
        most.rows_up = std::max(most.rows_up, q.rows_up);
        most.rows_down = std::max(most.rows_down, q.rows_down);
        most.up = std::max(most.up, q.up);
        most.down = std::max(most.down, q.down);
        sum.rows_up += q.rows_up;
        sum.rows_down += q.rows_down;
        bool inc = e.algo == "inc";
        unsigned long long up_want, down_want;
        if (e.op == "dispatch") {
            up_want = q.rows_up * (rb + (inc ? set : 0));
            down_want = q.rows_down * (rb + (inc ? set : 0));
        } else if (e.op == "combine") {
            up_want = q.rows_up * rb + (inc ? q.rows_down * set : 0);
            down_want = q.rows_down * rb;
        } else {
            /* dc: a step sends as many rows as it receives (dispatch out = combine in and the
               reverse) */
            if (q.rows_up != q.rows_down)
                return who + "dc sends " + std::to_string(q.rows_up) + " rows but receives " +
                       std::to_string(q.rows_down);
            up_want = inc ? q.up : q.rows_up * rb;
            down_want = inc ? q.down : q.rows_down * rb;
        }
        if (q.up != up_want || q.down != down_want)
            return who + "bytes " + std::to_string(q.up) + " up / " + std::to_string(q.down) +
                   " down do not follow from its rows (want " + std::to_string(up_want) + " / " +
                   std::to_string(down_want) + ")";
    }
    if (e.algo != "inc" && sum.rows_up != sum.rows_down)
        return "point to point: " + std::to_string(sum.rows_up) + " rows sent but " +
               std::to_string(sum.rows_down) + " received";
    if (e.algo == "inc" && e.op == "dispatch" && sum.rows_down < sum.rows_up)
        return "in-network dispatch delivers fewer rows than go up";
    if (std::stoull(row[8]) != most.rows_up || std::stoull(row[9]) != most.rows_down ||
        std::stoull(row[10]) != most.up || std::stoull(row[11]) != most.down)
        return "the max columns are not the ranks' maxima";
    double busiest = (double)std::max(most.up, most.down);
    if (std::fabs(busbw - busiest / t / 1e3) > 1e-4 + 0.01 * busbw)
        return "busbw " + row[6] + " is not the busiest direction's bytes / time";
    if (e.link_mbps > 0) {
        double bound = busiest * 8 / e.link_mbps;
        if (std::fabs(std::stod(row[12]) - bound) > 0.1 + 0.001 * bound)
            return "bound " + row[12] + ", expected " + std::to_string(bound) + " us";
        if (bound > 0 && std::fabs(std::stod(row[13]) - t / bound) > 0.002 + 0.001 * t / bound)
            return "t/bound " + row[13] + " is not time / bound";
    }
    if (r.out.find("# Out of bounds values : 0 OK") == std::string::npos)
        return "no '# Out of bounds values : 0 OK' line";
    return "";
}

class PerfRouted : public ::testing::TestWithParam<std::tuple<const char *, const char *>>
{
};

TEST_P(PerfRouted, EmbeddedRunChecksEveryRowAndCountsItsTraffic)
{
    std::string op = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
    RunResult r =
        perf({"-N", "3", "--op", op,  "--algo", algo, "--tokens", "50", "--hidden",    "7",
              "-E", "9", "-k",   "3", "-n",     "3",  "-w",       "1",  "--link-mbps", "100"});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(check_routed(r, {op, algo, "float", "sum", 4, 3, 50, 7, 100}), "") << describe(r);
    EXPECT_NE(r.out.find("# tokens 50, hidden 7, row 28 B, E 9, k 3, route uniform, placement "
                         "contiguous, seed 1"),
              std::string::npos)
        << describe(r);
}

INSTANTIATE_TEST_SUITE_P(AllOps, PerfRouted,
                         ::testing::Combine(::testing::Values("dispatch", "combine", "dc"),
                                            ::testing::Values("inc", "ring", "a2a")),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param)) + "_" +
                                    std::get<1>(info.param);
                         });

/* Other types and reductions, skewed and strided routing, sets that stay home (one expert
   per rank, k = 1: half the tokens' only expert is their owner's) and a bitmap of two words. */
struct RoutedCase {
    std::vector<std::string> args;
    Routed want;
};

class PerfRoutedCases : public ::testing::TestWithParam<std::tuple<RoutedCase, const char *>>
{
};

TEST_P(PerfRoutedCases, ExactResults)
{
    RoutedCase c = std::get<0>(GetParam());
    c.want.algo = std::get<1>(GetParam());
    std::vector<std::string> args = {"--algo", c.want.algo, "-n", "2", "-w", "0"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = perf(args);
    ASSERT_EQ(r.status, 0) << describe(r);
    auto rows = perf_test::table_rows(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    c.want.dtype = rows[0][2]; /* the library's name for -d */
    EXPECT_EQ(check_routed(r, c.want), "") << describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PerfRoutedCases,
    ::testing::Combine(
        ::testing::Values(
            RoutedCase{{"--op", "combine", "-N", "4", "-d", "bfloat16", "-o", "max", "--tokens",
                        "33", "--hidden", "5", "-E", "8", "-k", "2", "--route", "zipf:1"},
                       {"combine", "", "", "max", 2, 4, 33, 5, 0}},
            RoutedCase{{"--op", "dc", "-N", "2", "-d", "int8", "-o", "min", "--tokens", "40",
                        "--hidden", "3", "-E", "2", "-k", "1", "--placement", "strided"},
                       {"dc", "", "", "min", 1, 2, 40, 3, 0}},
            RoutedCase{{"--op", "dc", "-N", "3", "-d", "half", "-o", "prod", "--tokens", "20",
                        "--hidden", "4", "-E", "6", "-k", "6", "--seed", "9"},
                       {"dc", "", "", "prod", 2, 3, 20, 4, 0}},
            RoutedCase{{"--op", "dispatch", "-N", "66", "--tokens", "3", "--hidden", "2", "-E",
                        "66", "-k", "4", "--route", "zipf:0.5", "--placement", "strided"},
                       {"dispatch", "", "", "sum", 4, 66, 3, 2, 0}},
            RoutedCase{{"--op", "dc", "-N", "1", "--tokens", "9", "--hidden", "16", "-E", "4", "-k",
                        "2", "--link-mbps", "10"},
                       {"dc", "", "", "sum", 4, 1, 9, 16, 10}}),
        ::testing::Values("inc", "ring", "a2a")),
    [](const auto &info) {
        const RoutedCase &c = std::get<0>(info.param);
        return c.want.op + "_N" + std::to_string(c.want.nranks) + "_" + c.want.redop + "_" +
               std::get<1>(info.param);
    });

/* ---- data types and reductions ----------------------------------------------- */

struct TypeCase {
    const char *dtype, *redop, *op;
    size_t esize;
};

class PerfTypes : public ::testing::TestWithParam<std::tuple<TypeCase, const char *>>
{
};

TEST_P(PerfTypes, ExactResults)
{
    TypeCase c = std::get<0>(GetParam());
    std::string algo = std::get<1>(GetParam());
    RunResult r = perf({"-N", "3",  "--op", c.op, "--algo", algo, "-d", c.dtype, "-o", c.redop,
                        "-b", "24", "-e",   "6K", "-f",     "16", "-n", "2",     "-w", "0"});
    ASSERT_EQ(r.status, 0) << describe(r);
    /* -d half prints the library's name for the type; take it from the first row */
    auto rows = perf_test::table_rows(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    Expect e{c.op, algo, rows[0][2], c.redop, c.esize, 3, false};
    EXPECT_EQ(check_table(r, e, sizes(24, 6144, 16)), "") << describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    Types, PerfTypes,
    ::testing::Combine(::testing::Values(TypeCase{"half", "sum", "agrs", 2},
                                         TypeCase{"bfloat16", "max", "reducescatter", 2},
                                         TypeCase{"int32", "min", "allreduce", 4},
                                         TypeCase{"float", "prod", "agrs", 4}),
                       ::testing::Values("inc", "ring")),
    [](const auto &info) {
        return std::string(std::get<0>(info.param).dtype) + "_" + std::get<0>(info.param).redop +
               "_" + std::get<1>(info.param);
    });

/* ---- the check catches a wrong byte --------------------------------------- */

TEST(PerfCheck, CorruptedResultIsCountedAndFails)
{
    for (const char *op : {"allgather", "reducescatter"}) {
        RunResult r = perf({"-N", "2", "--op", op, "-b", "4K", "-e", "4K", "-n", "1", "-w", "0",
                            "--inject-error"});
        EXPECT_EQ(r.status, 1) << op << ": " << describe(r);
        auto rows = perf_test::table_rows(r.out);
        ASSERT_EQ(rows.size(), 1u) << describe(r);
        EXPECT_EQ(rows[0][7], "1") << op << ": " << describe(r);
        EXPECT_NE(r.out.find("FAILED"), std::string::npos) << describe(r);
    }
}

/* A routed op's check finds one wrong byte of a received row (dispatch) or of a reduced one
   (combine, dc), on every algorithm. */
TEST(PerfCheck, CorruptedRoutedResultIsCountedAndFails)
{
    for (const char *algo : {"inc", "ring", "a2a"}) {
        for (const char *op : {"dispatch", "combine", "dc"}) {
            RunResult r = perf({"-N", "2", "--op", op, "--algo", algo, "--tokens", "16", "--hidden",
                                "8", "-n", "1", "-w", "0", "--inject-error"});
            EXPECT_EQ(r.status, 1) << op << " " << algo << ": " << describe(r);
            auto rows = perf_test::table_rows(r.out);
            ASSERT_EQ(rows.size(), 1u) << describe(r);
            EXPECT_EQ(rows[0][7], "1") << op << " " << algo << ": " << describe(r);
            EXPECT_NE(r.out.find("FAILED"), std::string::npos) << describe(r);
        }
    }
}

TEST(PerfOutput, HeaderNamesTheColumns)
{
    RunResult r = perf({"-N", "2", "--op", "agrs", "-b", "64", "-e", "64", "-n", "1", "-w", "0",
                        "--link-mbps", "100"});
    ASSERT_EQ(r.status, 0) << describe(r);
    for (const char *col : {"size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong",
                            "eqbw", "%bound", "(us)", "(GB/s)", "(Mbit/s)"})
        EXPECT_NE(r.out.find(col), std::string::npos) << col << "\n" << describe(r);
    /* --link-mbps 100, N=2, inc: bound 2*BW = 200 Mbit/s is stated */
    EXPECT_NE(r.out.find("bound 2*BW = 200.0 Mbit/s"), std::string::npos) << describe(r);
}

/* A routed op's header: what a step is, the routing as incmoe-model reads it, what the
   traffic columns count, the link and bound, and the columns' names. */
TEST(PerfOutput, RoutedHeaderStatesTheRoutingAndTheColumns)
{
    for (const char *algo : {"inc", "ring", "a2a"}) {
        RunResult r =
            perf({"-N",      "2",         "--op",        "dc",          "--algo", algo, "--tokens",
                  "8",       "--hidden",  "2",           "-E",          "4",      "-k", "2",
                  "--route", "zipf:1.50", "--placement", "strided",     "--seed", "12", "-n",
                  "1",       "-w",        "0",           "--link-mbps", "50"});
        ASSERT_EQ(r.status, 0) << describe(r);
        for (const char *line :
             {"# incmoe-perf: op dc, algo ",
              "# dc: the dispatch of step i in flight with the "
              "combine of step i-1, per step",
              "# tokens 8, hidden 2, row 8 B, E 4, k 2, route zipf:1.5, placement strided, "
              "seed 12",
              "as\n# incmoe-model counts it; busbw = the busiest rank and direction's bytes / "
              "time",
              "# link 50 Mbit/s per direction; bound = the busiest rank and direction's bytes / "
              "link rate"})
            EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << describe(r);
        for (const char *col :
             {"size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "rows-out",
              "rows-in", "up", "down", "bound", "t/bound", "(B, max)"})
            EXPECT_NE(r.out.find(col), std::string::npos) << col << "\n" << describe(r);
    }
}

/* ---- replicas (--extra-slots) ------------------------------------------------ */

/* N=4, E=16, k=4, zipf:1: the popular experts sit on rank 0 without replicas. */
static RunResult replicated(const std::string &op, const std::string &algo, int slots)
{
    return perf({"-N",
                 "4",
                 "--op",
                 op,
                 "--algo",
                 algo,
                 "--tokens",
                 "128",
                 "--hidden",
                 "5",
                 "-E",
                 "16",
                 "-k",
                 "4",
                 "--route",
                 "zipf:1",
                 "-n",
                 "2",
                 "-w",
                 "1",
                 "--extra-slots",
                 std::to_string(slots),
                 "--link-mbps",
                 "100"});
}

class PerfReplicas : public ::testing::TestWithParam<std::tuple<const char *, const char *>>
{
};

/* The replicated sets run checked (every row and reduction right: #wrong 0) and their traffic
   columns follow from the ranks' rows as without replicas; the header names the placement. */
TEST_P(PerfReplicas, ReplicatedSetsRunCheckedAndCounted)
{
    std::string op = std::get<0>(GetParam()), algo = std::get<1>(GetParam());
    RunResult r = replicated(op, algo, 1);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(check_routed(r, {op, algo, "float", "sum", 4, 4, 128, 5, 100}), "") << describe(r);
    EXPECT_NE(r.out.find("# replicas: --extra-slots 1, placement chosen by "
                         "incmoe_moe_placement_choose from 256 tokens/rank of seed 2"),
              std::string::npos)
        << describe(r);
    EXPECT_NE(r.out.find("experts per rank: 5 5 5 5"), std::string::npos) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(AllOps, PerfReplicas,
                         ::testing::Combine(::testing::Values("dispatch", "combine", "dc"),
                                            ::testing::Values("inc", "ring", "a2a")),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param)) + "_" +
                                    std::get<1>(info.param);
                         });

/* On zipf:1 one extra slot per rank lowers the busiest rank's received rows (rows-in, max):
   a count of the same tokens, with and without replicas. */
TEST(PerfReplicasRows, OneExtraSlotLowersTheBusiestRanksRowsOnZipf)
{
    RunResult without = replicated("dispatch", "inc", 0), with = replicated("dispatch", "inc", 1);
    ASSERT_EQ(without.status, 0) << describe(without);
    ASSERT_EQ(with.status, 0) << describe(with);
    auto a = perf_test::table_rows(without.out), b = perf_test::table_rows(with.out);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    unsigned long long rows_without = std::stoull(a[0][9]), rows_with = std::stoull(b[0][9]);
    EXPECT_GT(rows_without, 0u);
    EXPECT_LT(rows_with, rows_without) << describe(with) << describe(without);
    EXPECT_EQ(without.out.find("# replicas:"), std::string::npos) << describe(without);
}

/* ---- bad command lines ------------------------------------------------------ */

struct BadArgs {
    std::vector<std::string> args;
    std::string says; /* the message must name what was wrong */
};

class PerfBadFlags : public ::testing::TestWithParam<BadArgs>
{
};

TEST_P(PerfBadFlags, ClearErrorAndNonZeroExit)
{
    RunResult r = perf(GetParam().args, 20);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find(GetParam().says), std::string::npos) << describe(r);
    EXPECT_TRUE(perf_test::table_rows(r.out).empty()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    Flags, PerfBadFlags,
    ::testing::Values(
        BadArgs{{"--bogus"}, "unknown option '--bogus'"},
        BadArgs{{"--op", "alltoall"}, "bad value 'alltoall' for --op"},
        BadArgs{{"--algo", "tree"}, "bad value 'tree' for --algo"},
        BadArgs{{"-d", "float8"}, "bad value 'float8' for -d"},
        BadArgs{{"-o", "avg"}, "bad value 'avg' for -o"},
        BadArgs{{"-b", "1M", "-e", "1K"}, "need 0 < -b <= -e"},
        BadArgs{{"-b", "12Q"}, "bad value '12Q' for -b"},
        BadArgs{{"-n", "0"}, "bad value '0' for -n"}, BadArgs{{"-c", "2"}, "bad value '2' for -c"},
        BadArgs{{"-N", "0"}, "bad value '0' for -N"},
        BadArgs{{"--link-mbps", "-5"}, "bad value '-5' for --link-mbps"},
        BadArgs{{"--rank", "1"}, "--rank needs --switch"},
        BadArgs{{"--switch", "127.0.0.1:1", "--rank", "4", "-N", "4"},
                "--rank 4 is not below -N 4"},
        BadArgs{{"-n"}, "needs a value"},
        BadArgs{{"-n", "99999999999"},
                "bad value '99999999999' for -n: out of range (allowed: 1..1073741824)"},
        BadArgs{{"-N", "257"}, "bad value '257' for -N: out of range (allowed: 1..256)"},
        BadArgs{{"-e", "2T"}, "bad value '2T' for -e: out of range (allowed: 1..1T bytes)"},
        BadArgs{{"-w", "5x"}, "bad value '5x' for -w: not an integer"},
        BadArgs{{"--timeout", "0"}, "bad value '0' for --timeout: out of range"},
        BadArgs{{"--link-mbps", "1e12"},
                "bad value '1e12' for --link-mbps (allowed: 0 < BW <= 1e9 Mbit/s)"},
        BadArgs{{"--job", "-1"}, "bad value '-1' for --job (allowed: 0..2^64-1)"},
        BadArgs{{"--op", "dc", "-b", "1K"},
                "-b, -e and -f size the full collectives; --op dc runs --tokens rows of --hidden "
                "elements"},
        BadArgs{{"--op", "combine", "-f", "4"}, "-b, -e and -f size the full collectives"},
        BadArgs{{"--op", "dc", "-N", "8", "-E", "4"},
                "-N 8 ranks but -E 4 experts: every rank must hold one (N <= E)"},
        BadArgs{{"--op", "dispatch", "-N", "2", "-E", "4", "-k", "5"},
                "-k 5 is more than the -E 4 experts"},
        BadArgs{{"--op", "dc", "--tokens", "16777216", "--hidden", "16777216"},
                "--tokens 16777216 x --hidden 16777216 float is more than 1T bytes"},
        BadArgs{{"--route", "zipf"},
                "bad value 'zipf' for --route (allowed: uniform or zipf:S with 0 <= S <= 100)"},
        BadArgs{{"--route", "zipf:-1"}, "bad value 'zipf:-1' for --route"},
        BadArgs{{"--placement", "random"},
                "bad value 'random' for --placement (allowed: contiguous or strided)"},
        BadArgs{{"--seed", "x"}, "bad value 'x' for --seed (allowed: 0..2^62)"},
        BadArgs{{"--tokens", "0"}, "bad value '0' for --tokens: out of range"},
        BadArgs{{"--hidden", "99999999"}, "bad value '99999999' for --hidden: out of range"},
        BadArgs{{"-k", "0"}, "bad value '0' for -k: out of range (allowed: 1..65536)"},
        BadArgs{{"--op", "agrs", "-E", "8"},
                "-E, -k, --route, --placement, --seed, --extra-slots and --placement-seed route "
                "dispatch, combine and dc, not --op agrs"},
        BadArgs{{"--op", "agrs", "--extra-slots", "1"}, "not --op agrs"},
        BadArgs{{"--op", "dc", "--extra-slots", "-1"},
                "bad value '-1' for --extra-slots: out of range (allowed: 0..65536)"},
        BadArgs{{"--op", "dc", "-N", "4", "-E", "16", "--extra-slots", "13"},
                "--extra-slots 13 is more than E - E/N = 12"},
        BadArgs{{"--op", "dc", "-N", "3", "-E", "16", "--extra-slots", "1"},
                "--extra-slots needs -E (16) a multiple of -N (3)"},
        BadArgs{
            {"--op", "dc", "-N", "4", "-E", "16", "--extra-slots", "1", "--placement", "strided"},
            "--extra-slots chooses the placement; drop --placement"},
        BadArgs{{"--op", "dc", "-N", "4", "-E", "128", "-k", "65", "--extra-slots", "1"},
                "--extra-slots takes -k up to 64, the layer's (got 65)"},
        BadArgs{{"--op", "dc", "--placement-seed", "3"},
                "--placement-seed seeds --extra-slots's sample"},
        BadArgs{{"--op", "dc", "--extra-slots", "1", "--placement-seed", "x"},
                "bad value 'x' for --placement-seed (allowed: 0..2^62)"},
        BadArgs{{"--op", "allgather", "--route", "uniform"}, "not --op allgather"},
        BadArgs{{"--op", "agrs", "--tokens", "8"},
                "--op agrs takes --tokens and --hidden together, instead of -b and -e"},
        BadArgs{{"--op", "agrs", "--tokens", "8", "--hidden", "4", "-b", "1K"},
                "takes --tokens and --hidden together, instead of -b and -e"},
        BadArgs{{"--op", "dc", "-d", "float", "-o", "avg"}, "bad value 'avg' for -o"}));

/* ---- the other tools' numbers: range-checked, exit 2, nothing started -------------------------
 */

struct ToolBadArgs {
    std::string tool; /* path under the build tree */
    std::vector<std::string> args;
    std::vector<std::string> env; /* NAME=VALUE set for the run */
    std::string says;
};

class ToolBadFlags : public ::testing::TestWithParam<ToolBadArgs>
{
};

TEST_P(ToolBadFlags, ClearErrorExitTwoAndNoStart)
{
    const ToolBadArgs &c = GetParam();
    std::string path = TOP_BUILDDIR "/" + c.tool;
    if (access(path.c_str(), X_OK) != 0)
        GTEST_SKIP() << path << " is not built";
    std::vector<std::string> argv{path};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    for (const std::string &e : c.env)
        setenv(e.substr(0, e.find('=')).c_str(), e.substr(e.find('=') + 1).c_str(), 1);
    RunResult r = perf_test::run_cmd(argv, 20);
    for (const std::string &e : c.env)
        unsetenv(e.substr(0, e.find('=')).c_str());
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << describe(r);
    EXPECT_EQ(r.out.find("listening on"), std::string::npos) << describe(r);
}

static const char kSw[] = "switch/incmoe-switchd";

INSTANTIATE_TEST_SUITE_P(
    Flags, ToolBadFlags,
    ::testing::Values(
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--timeout-ms", "2147483648"},
                    {},
                    "bad value '2147483648' for --timeout-ms: out of range (allowed: 1..86400000)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--timeout-ms", "0"},
                    {},
                    "bad value '0' for --timeout-ms: out of range (allowed: 1..86400000)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--timeout-ms", "-1"},
                    {},
                    "bad value '-1' for --timeout-ms: out of range"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--timeout-ms", "1e9junk"},
                    {},
                    "bad value '1e9junk' for --timeout-ms: not an integer (allowed: 1..86400000)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--threads", "65"},
                    {},
                    "bad value '65' for --threads: out of range (allowed: 1..64)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--credits", "4097"},
                    {},
                    "bad value '4097' for --credits: out of range (allowed: 1..4096)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--link-window", "0"},
                    {},
                    "bad value '0' for --link-window: out of range (allowed: 1..4096)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--chunk-size", "2G"},
                    {},
                    "bad value '2G' for --chunk-size: out of range (allowed: 64..1G bytes)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--max-memory", "99999999999G"},
                    {},
                    "bad value '99999999999G' for --max-memory: out of range"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--rndv-thresh", "12Q"},
                    {},
                    "bad value '12Q' for --rndv-thresh: not a size"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--egress-chunks", "0"},
                    {},
                    "bad value '0' for --egress-chunks: out of range (allowed: 1..1024)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0", "--heap-keep", "2G"},
                    {},
                    "bad value '2G' for --heap-keep: out of range (allowed: 0..1G bytes)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:70000"},
                    {},
                    "bad value '70000' for --listen's port: out of range (allowed: 0..65535)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0"},
                    {"INCMOE_TIMEOUT_MS=abc"},
                    "INCMOE_TIMEOUT_MS=abc: not an integer (allowed: 1..86400000)"},
        ToolBadArgs{kSw,
                    {"--listen", "127.0.0.1:0"},
                    {"INCMOE_CREDITS=99999999999"},
                    "INCMOE_CREDITS=99999999999: out of range (allowed: 1..4096)"},
        ToolBadArgs{"tools/incmoe",
                    {"demo", "-N", "0"},
                    {},
                    "bad value '0' for -N: out of range (allowed: 1..64)"},
        ToolBadArgs{"tools/incmoe",
                    {"demo", "-s", "4K,9999999999999G"},
                    {},
                    "bad value '9999999999999G' for -s: out of range"},
        ToolBadArgs{"tools/incmoe-moe-bench",
                    {"-N", "99999999999"},
                    {},
                    "bad value '99999999999' for -N: out of range (allowed: 1..64)"},
        ToolBadArgs{"tools/incmoe-moe-bench", {"-H", "abc"}, {}, "bad value 'abc' for -H"},
        ToolBadArgs{
            "tools/incmoe-moe-bench", {"--link-mbps", "-3"}, {}, "bad value '-3' for --link-mbps"},
        ToolBadArgs{"tools/incmoe-moe-bench",
                    {"--routing", "full,sideways"},
                    {},
                    "--routing takes a list of full, masked and auto"},
        ToolBadArgs{"tools/incmoe-moe-bench",
                    {"--route", "zipf:0"},
                    {},
                    "bad value 'zipf:0' for --route: want uniform or zipf:S with 0 < S <= 100"},
        ToolBadArgs{"tools/incmoe-moe-bench",
                    {"--algo", "inc,mesh"},
                    {},
                    "--algo takes a list of inc, ring and a2a"}));

/* A key file whose first line is past INCMOE_MAX_SECRET: refused, naming the file and the limit. */
TEST(SwitchKey, LongerThanTheLimitIsRefused)
{
    char path[] = "/tmp/incmoe-longkey-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    std::string key = std::string(65, 'k') + "\n";
    ASSERT_EQ(write(fd, key.data(), key.size()), (ssize_t)key.size());
    close(fd);
    RunResult r = perf_test::run_cmd(
        {TOP_BUILDDIR "/switch/incmoe-switchd", "--listen", "127.0.0.1:0", "--auth-key-file", path},
        20);
    unlink(path);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(
        r.err.find(std::string("the key in ") + path + " is too long: it must be 1..64 bytes"),
        std::string::npos)
        << describe(r);
    EXPECT_EQ(r.out.find("listening on"), std::string::npos) << describe(r);
}
