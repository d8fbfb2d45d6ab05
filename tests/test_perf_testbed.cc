/*
 * test_perf_testbed.cc - smoke test of tools/testbed: bring up a small testbed
 * (network namespaces, a bridge, tbf on both ends of every link), run
 * incmoe-perf in it for a few small sizes with both algorithms (and the
 * OpenMPI reference when configure found mpicc), bring it down and check that nothing
 * it created is left.  Needs root and working ip/tc: otherwise it SKIPs and
 * says why.
 */
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "testbed_probe.h"

#include "perf_run.h"

using perf_test::run_cmd;
using perf_test::RunResult;
using testbed_probe::cannot_run_testbed;
using testbed_probe::exists;
using testbed_probe::namespaces_with;

static const std::string kTestbed = TOP_SRCDIR "/tools/testbed";
static const std::string kMpiRef = TOP_SRCDIR "/tools/mpi-reference";
static const std::string kPerf = TOP_BUILDDIR "/tools/incmoe-perf";
static const std::string kMpiAgrs = TOP_BUILDDIR "/tools/mpi_agrs";

static std::string describe(const RunResult &r)
{
    return "exit " + std::to_string(r.status) + (r.timed_out ? " (timed out)" : "") +
           "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

TEST(Testbed, RefusesWithoutRoot)
{
    /* Root drops to nobody for this; a user who is not root already is one. */
    std::vector<std::string> cmd = {kTestbed, "up", "-N", "2", "--rate", "10mbit"};
    if (geteuid() == 0)
        cmd.insert(cmd.begin(),
                   {"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"});
    RunResult r = run_cmd(cmd, 20);
    EXPECT_NE(r.status, 0) << describe(r);
    EXPECT_NE(r.err.find("must run as root"), std::string::npos) << describe(r);
}

class TestbedSmoke : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        std::string why = cannot_run_testbed();
        if (!why.empty())
            GTEST_SKIP() << why;
        id_ = testbed_probe::free_testbed_id(90);
        ASSERT_GE(id_, 0) << "testbed ids 90..99 are all in use";
        prefix_ = "imt" + std::to_string(id_) + "-";
        ASSERT_TRUE(namespaces_with(prefix_).empty()) << "namespaces " << prefix_ << "* exist";
    }
    void TearDown() override
    {
        if (id_ >= 0 && up_)
            tb({"down"}, 60);
    }
    RunResult tb(std::vector<std::string> args, int timeout_s)
    {
        args.insert(args.begin(), {kTestbed, "--id", std::to_string(id_)});
        return run_cmd(args, timeout_s);
    }
    /* incmoe-perf on every rank of the testbed; checks the table. */
    void perf_in_testbed(const std::string &algo)
    {
        RunResult r = tb({"run",      "--switchd", SWITCHD_PATH, "--timeout",   "60",     "--",
                          kPerf,      "--switch",  "{switch}",   "--rank",      "{rank}", "-N",
                          "{nranks}", "--algo",    algo,         "--op",        "agrs",   "-b",
                          "64K",      "-e",        "1M",         "-f",          "4",      "-n",
                          "2",        "-w",        "1",          "--link-mbps", "{mbps}"},
                         120);
        ASSERT_EQ(r.status, 0) << algo << ": " << describe(r);
        auto rows = perf_test::table_rows(r.out);
        ASSERT_EQ(rows.size(), 3u) << describe(r);
        for (auto &row : rows) {
            ASSERT_EQ(row.size(), 10u) << describe(r);
            EXPECT_EQ(row[7], "0") << describe(r);
        }
        EXPECT_NE(r.out.find("algo " + algo + ", nranks 2"), std::string::npos) << describe(r);
        EXPECT_NE(r.out.find("link 200 Mbit/s"), std::string::npos) << describe(r);
        /* every process ran inside the testbed: the run names its shaping */
        EXPECT_NE(r.err.find("MTU 9000"), std::string::npos) << describe(r);
    }
    void bring_up()
    {
        RunResult up = tb({"up", "-N", "2", "--rate", "200mbit", "--mtu", "9000"}, 60);
        up_ = true;
        ASSERT_EQ(up.status, 0) << describe(up);
        /* it states the MTU, the shaper and its burst */
        EXPECT_NE(up.out.find("MTU 9000"), std::string::npos) << describe(up);
        EXPECT_NE(up.out.find("tbf rate 200mbit"), std::string::npos) << describe(up);
        EXPECT_NE(up.out.find("burst"), std::string::npos) << describe(up);
        /* without --cc every host runs cubic, whatever the kernel's default */
        EXPECT_NE(up.out.find("TCP congestion control cubic"), std::string::npos) << describe(up);
    }
    void bring_down()
    {
        RunResult down = tb({"down"}, 60);
        up_ = false;
        EXPECT_EQ(down.status, 0) << describe(down);
        EXPECT_TRUE(namespaces_with(prefix_).empty()) << "down left namespaces behind";
        EXPECT_FALSE(exists("/run/incmoe-testbed/imt" + std::to_string(id_) + ".state"));
    }
    int id_ = -1;
    bool up_ = false;
    std::string prefix_;
};

TEST_F(TestbedSmoke, UpShapesBothEndsAndDownLeavesNothing)
{
    bring_up();
    EXPECT_EQ(namespaces_with(prefix_).size(), 4u) << "2 ranks + switch + hub";

    /* the shaper is on both ends of every link: ranks at the rate, the switch at N x rate */
    for (const char *host : {"r0", "r1"}) {
        RunResult q = run_cmd({"tc", "-n", prefix_ + host, "qdisc", "show", "dev", "tb0"}, 20);
        EXPECT_NE(q.out.find("tbf"), std::string::npos) << host << ": " << q.out;
        EXPECT_NE(q.out.find("rate 200Mbit"), std::string::npos) << host << ": " << q.out;
        RunResult h = run_cmd(
            {"tc", "-n", prefix_ + "hub", "qdisc", "show", "dev", std::string("v") + host}, 20);
        EXPECT_NE(h.out.find("rate 200Mbit"), std::string::npos) << host << ": " << h.out;
    }
    RunResult sw = run_cmd({"tc", "-n", prefix_ + "sw", "qdisc", "show", "dev", "tb0"}, 20);
    EXPECT_NE(sw.out.find("rate 400Mbit"), std::string::npos) << sw.out;

    RunResult st = tb({"status"}, 30);
    EXPECT_EQ(st.status, 0) << describe(st);
    RunResult again = tb({"up", "-N", "2", "--rate", "200mbit"}, 30);
    EXPECT_NE(again.status, 0) << "a second up on the same id must refuse";
    EXPECT_NE(again.err.find("already up"), std::string::npos) << describe(again);

#ifdef PERF_HAVE_MPI
    /* the OpenMPI reference runs across the namespaces and checks its results */
    RunResult m = run_cmd({kMpiRef, "--id", std::to_string(id_), "--mpi-agrs", kMpiAgrs,
                           "--timeout", "60", "--", "-b", "64K", "-e", "1M", "-f", "4", "-n", "2"},
                          90);
    EXPECT_EQ(m.status, 0) << describe(m);
    auto rows = perf_test::table_rows(m.out);
    EXPECT_EQ(rows.size(), 3u) << describe(m);
    for (auto &row : rows)
        EXPECT_EQ(row.size() > 7 ? row[7] : "", "0") << describe(m);
#endif
    bring_down();
}

TEST_F(TestbedSmoke, PerfRunsInTheTestbed)
{
    bring_up();
    perf_in_testbed("inc");
    perf_in_testbed("ring");
    bring_down();
}
