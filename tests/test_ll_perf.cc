/*
 * test_ll_perf.cc - incmoe-perf --low-latency (tools/perf_dc.c), run as a user runs it: the
 * routed ops in the low-latency form on every algorithm, every result checked by the tool
 * against its own reference, and a corrupted byte (--inject-error) seen by that check.
 */
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"

namespace
{

const std::string kPerf = TOP_BUILDDIR "/tools/incmoe-perf";

/* The tool's run of op on algo, low-latency, a decode-sized step. */
perf_test::RunResult run_ll(const std::string &algo, const std::string &op,
                            std::vector<std::string> more = {})
{
    std::vector<std::string> args = {
        kPerf,      "-N", "4",        "--algo", algo, "--op", op,   "--low-latency",
        "--tokens", "6",  "--hidden", "64",     "-n", "3",    "-w", "1"};
    args.insert(args.end(), more.begin(), more.end());
    return perf_test::run_cmd(args, 120);
}

class LlPerf : public ::testing::TestWithParam<std::string>
{
};

TEST_P(LlPerf, EveryRoutedOpChecksExact)
{
    for (const char *op : {"dispatch", "combine", "dc"}) {
        perf_test::RunResult r = run_ll(GetParam(), op);
        EXPECT_EQ(perf_test::failed_run(r), "") << op;
        EXPECT_NE(r.out.find("(the low-latency form, max_tokens = tokens)"), std::string::npos)
            << op << ": " << r.out;
        EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos)
            << op << ": " << r.out;
    }
}

TEST_P(LlPerf, ACorruptedByteIsCounted)
{
    for (const char *op : {"dispatch", "dc"}) {
        perf_test::RunResult r = run_ll(GetParam(), op, {"--inject-error"});
        EXPECT_NE(r.status, 0) << op;
        EXPECT_NE(r.out.find("# Out of bounds values : 1 FAILED"), std::string::npos)
            << op << ": " << r.out;
    }
}

TEST(LlPerfArgs, TheFlagIsRefusedForTheFullCollectives)
{
    perf_test::RunResult r = perf_test::run_cmd({kPerf, "--op", "agrs", "--low-latency"}, 60);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("--low-latency is a form of dispatch, combine and dc"), std::string::npos)
        << r.err;
}

INSTANTIATE_TEST_SUITE_P(Algos, LlPerf, ::testing::Values("inc", "a2a", "ring"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

} // namespace
