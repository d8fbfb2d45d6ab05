/*
 * test_probes.cc - the reliability probes of tools/, at a size the suite can
 * afford: ranks SIGKILLed mid-collective never take the switch down and every
 * survivor gets an error, junk on the public port leaves the switch serving,
 * and so do a key holder's handshakes carrying mutated UCX worker addresses
 * and junk at the TCP ports UCX itself opens.  The full-size runs (1,000 of
 * each) and their figures are in RELIABILITY.md; deadlines here are generous
 * bounds against a hang, not speed checks.
 */
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"

using perf_test::failed_run;
using perf_test::run_cmd;

/* tools/NAME ARGS... of this build, bounded at 300 s. */
static perf_test::RunResult probe(std::vector<std::string> argv)
{
    argv[0] = TOP_SRCDIR "/tools/" + argv[0];
    argv.insert(argv.begin(), "python3");
    argv.push_back("--build");
    argv.push_back(TOP_BUILDDIR);
    return run_cmd(argv, 300);
}

TEST(Probes, KilledRanksNeverTakeTheSwitchDown)
{
    auto r = probe({"probe-killloop", "--kills", "20", "--seed", "5", "--deadline-ms", "10000",
                    "--settle-s", "20"});
    ASSERT_EQ(failed_run(r), "");
    EXPECT_NE(r.out.find("switch crashes               0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("survivors with no error      0"), std::string::npos) << r.out;
}

/* Ranks SIGSTOPped past the job's timeout and resumed: the others fail with an error, and the
   resumed rank exits with one of its own, never by UCX's assertion. */
TEST(Probes, RanksResumedAfterALongStopExitWithAnError)
{
    auto r = probe({"probe-killloop", "--fault", "stop", "--kills", "10", "--seed", "5",
                    "--deadline-ms", "10000", "--settle-s", "20"});
    ASSERT_EQ(failed_run(r), "");
    EXPECT_NE(r.out.find("victims dead by a signal     0"), std::string::npos) << r.out;
}

TEST(Probes, JunkConnectionsLeaveTheSwitchServing)
{
    /* Idle CPU is measured by the probe; the bound here is loose (a spin uses ~100%). */
    auto r =
        probe({"probe-junk", "--conns", "100", "--seed", "5", "--hold-s", "10", "--cpu-max", "50"});
    ASSERT_EQ(failed_run(r), "");
}

/* A key holder's handshakes whose PROOF carries a mutated copy of the switch's own worker
   address: each is refused with a reason or handed to UCX, and the switch serves on with its
   descriptors and memory back at the baseline (the probe checks both and a job after). */
TEST(Probes, MutatedWorkerAddressesLeaveTheSwitchServing)
{
    auto r =
        probe({"probe-junk", "--case", "addr", "--conns", "100", "--seed", "5", "--cpu-max", "50"});
    ASSERT_EQ(failed_run(r), "");
    EXPECT_NE(r.out.find("100 handshakes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("reject"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("welcome"), std::string::npos) << r.out;
}

/* Junk at the TCP port UCX itself opens in the switch (found from its listening sockets): the
   switch serves on, descriptors back at the baseline, and UCX listens on loopback alone for a
   switch told 127.0.0.1. */
TEST(Probes, JunkAtUcxsOwnPortLeavesTheSwitchServing)
{
    auto r = probe({"probe-junk", "--case", "ucx-ports", "--conns", "100", "--seed", "5",
                    "--hold-s", "5", "--cpu-max", "50"});
    ASSERT_EQ(failed_run(r), "");
    EXPECT_NE(r.out.find("the switch's UCX ports: 127.0.0.1:"), std::string::npos) << r.out;
}

/* The same at each rank's UCX port while the job's collectives run: every byte of the job is
   right, and the ranks listen on loopback alone (the interface toward the switch). */
TEST(Probes, JunkAtARanksUcxPortLeavesItsJobCorrect)
{
    auto r = probe({"probe-junk", "--case", "ucx-ports", "--target", "rank", "--conns", "100",
                    "--seed", "5", "--hold-s", "5", "--cpu-max", "50"});
    ASSERT_EQ(failed_run(r), "");
    EXPECT_NE(r.out.find("the job under the junk"), std::string::npos) << r.out;
}
