/*
 * test_faultsoak.cc - tools/faultsoak on a small testbed, and a capture of a
 * whole keyed job.  Both need root and working namespaces: otherwise they SKIP
 * and say why.
 *
 * KeyCapture.KeyNeverCrossesTheWire records every frame on the testbed's
 * bridge while a job with a shared key runs, and fails if the key's bytes (or
 * their hex) appear anywhere in the capture.  It holds only when the join
 * proves the key by HMAC over fresh nonces (DESIGN.md, "The public edge"); a
 * join that sends the key in its message fails it.
 */
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"
#include "testbed_probe.h"

using perf_test::describe;
using perf_test::run_cmd;
using perf_test::RunResult;

static const std::string kFaultsoak = TOP_SRCDIR "/tools/faultsoak";
static const std::string kRankProg = TOP_BUILDDIR "/tools/incmoe-soak-rank";

static std::string slurp(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

static std::string hex_of(const std::string &s, const char *digits)
{
    std::string h;
    for (unsigned char c : s) {
        h += digits[c >> 4];
        h += digits[c & 15];
    }
    return h;
}

TEST(Faultsoak, RefusesWithoutRoot)
{
    std::vector<std::string> cmd = {kFaultsoak, "--rounds", "1"};
    if (geteuid() == 0)
        cmd.insert(cmd.begin(),
                   {"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"});
    RunResult r = run_cmd(cmd, 20);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_NE(r.err.find("must run as root"), std::string::npos) << describe(r);
}

TEST(Faultsoak, RefusesBadFlags)
{
    for (auto args : std::vector<std::vector<std::string>>{{"--faults", "kill,melt"},
                                                           {"-N", "1"},
                                                           {"--bytes", "64Q"},
                                                           {"--algo", "tree"},
                                                           {"--frobnicate"}}) {
        args.insert(args.begin(), kFaultsoak);
        RunResult r = run_cmd(args, 20);
        EXPECT_EQ(r.status, 2) << args[1] << ": " << describe(r);
        EXPECT_NE(r.err.find("tools/faultsoak: "), std::string::npos) << describe(r);
    }
}

class FaultsoakTestbed : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        std::string why = testbed_probe::cannot_run_testbed();
        if (!why.empty())
            GTEST_SKIP() << why;
        id_ = testbed_probe::free_testbed_id(80);
        ASSERT_GE(id_, 0) << "testbed ids 80..89 are all in use";
        prefix_ = "imt" + std::to_string(id_) + "-";
        ASSERT_TRUE(testbed_probe::namespaces_with(prefix_).empty());
        char tmpl[] = "/tmp/incmoe-test-faultsoak.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override
    {
        if (id_ >= 0)
            run_cmd({TOP_SRCDIR "/tools/testbed", "--id", std::to_string(id_), "down"}, 60);
        if (!dir_.empty() && !HasFailure())
            run_cmd({"rm", "-rf", dir_}, 20);
    }
    RunResult soak(std::vector<std::string> args, int timeout_s)
    {
        args.insert(args.begin(), {kFaultsoak, "--id", std::to_string(id_), "--rank-prog",
                                   kRankProg, "--switchd", SWITCHD_PATH, "--logdir", dir_});
        RunResult r = run_cmd(args, timeout_s);
        EXPECT_TRUE(testbed_probe::namespaces_with(prefix_).empty())
            << "faultsoak left namespaces behind";
        return r;
    }
    int id_ = -1;
    std::string prefix_, dir_;
};

/* A few rounds of every kind of fault, each round checked by the tool (see
   its --help); any violation makes it exit 1 naming it. */
TEST_F(FaultsoakTestbed, BoundedRunHasNoViolation)
{
    std::vector<std::string> args = {
        "--rounds", "6",       "--seed",   "11",           "-N",   "3",        "--steps",
        "20",       "--bytes", "64K,256K", "--timeout-ms", "1000", "--margin", "10"};
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* A sanitizer's switch keeps freed memory in quarantine and grows its shadow memory, so
       its RSS says nothing about the switch's own use here (leaks are LeakSanitizer's to find,
       in the suites that end the switch normally); descriptors are still checked exactly. */
    args.insert(args.end(), {"--rss-slack-kb", "4194304"});
#endif
    RunResult r = soak(args, 120);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("# OK: no violations"), std::string::npos) << describe(r);
    size_t rounds = 0;
    for (size_t at = 0; (at = r.out.find("\nround ", at)) != std::string::npos; at++)
        rounds++;
    EXPECT_EQ(rounds, 6u) << describe(r);
    EXPECT_NE(r.out.find("# summary: seed 11, 6 rounds"), std::string::npos) << describe(r);
}

/* Kill-then-shrink rounds on every algorithm: the survivors shrink and finish every step with
   every byte right, by the tool's rules (--shrink in its --help). */
TEST_F(FaultsoakTestbed, KillThenShrinkRoundsFinish)
{
    RunResult r =
        soak({"--rounds", "6", "--seed", "5", "-N", "4", "--faults", "kill", "--shrink", "--algo",
              "mix", "--steps", "30", "--bytes", "1M", "--timeout-ms", "1000", "--margin", "10"},
             150);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("# OK: no violations"), std::string::npos) << describe(r);
    size_t shrunk = 0;
    for (size_t at = 0; (at = r.out.find(" shrunk 3,", at)) != std::string::npos; at++)
        shrunk++;
    /* A kill after the job's last step would need no shrink; seed 5 draws none so late. */
    EXPECT_EQ(shrunk, 6u) << "rounds where all three survivors shrank\n" << describe(r);
}

TEST_F(FaultsoakTestbed, KeyNeverCrossesTheWire)
{
    if (!testbed_probe::exists("/usr/bin/tcpdump") && !testbed_probe::exists("/usr/sbin/tcpdump"))
        GTEST_SKIP() << "tcpdump is not installed (tools/quickstart deps installs it)";
    std::string pcap = dir_ + "/job.pcap";
    RunResult r = soak({"--rounds", "1", "--seed", "1", "-N", "2", "--faults", "none", "--steps",
                        "4", "--bytes", "64K", "--capture", pcap},
                       90);
    ASSERT_EQ(r.status, 0) << describe(r);
    std::string key = slurp(dir_ + "/key");
    ASSERT_EQ(key.size(), 32u) << "the run's key file";
    std::string cap = slurp(pcap);
    /* The capture holds the job: the jobs' data crossed the bridge. */
    ASSERT_GT(cap.size(), 64u * 1024) << "capture of " << cap.size() << " bytes";
    for (const std::string &needle :
         {key, hex_of(key, "0123456789abcdef"), hex_of(key, "0123456789ABCDEF")})
        EXPECT_EQ(cap.find(needle), std::string::npos)
            << "the shared key ('" << needle << "') crossed the wire in clear; capture " << pcap;
}
