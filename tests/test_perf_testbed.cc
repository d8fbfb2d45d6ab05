/*
 * test_perf_testbed.cc - smoke test of tools/testbed: bring up a small testbed
 * (network namespaces, a bridge, tbf on both ends of every link), run
 * incmoe-perf in it for a few small sizes with both algorithms (and the
 * OpenMPI reference when configure found mpicc), bring it down and check that nothing
 * it created is left; and a two-level tree of switches: its links' rates, its
 * routes through the root, and `run` starting the switches as a tree.  Needs
 * root and working ip/tc: otherwise it SKIPs and says why.
 */
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"
#include "testbed_probe.h"

using perf_test::describe;
using perf_test::run_cmd;
using perf_test::RunResult;
using testbed_probe::cannot_run_testbed;
using testbed_probe::exists;
using testbed_probe::namespaces_with;

static const std::string kTestbed = TOP_SRCDIR "/tools/testbed";
static const std::string kMpiRef = TOP_SRCDIR "/tools/mpi-reference";
static const std::string kPerf = TOP_BUILDDIR "/tools/incmoe-perf";
static const std::string kMpiAgrs = TOP_BUILDDIR "/tools/mpi_agrs";
static const std::string kMpiDc = TOP_BUILDDIR "/tools/mpi_dc";

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
    /* and so does the reference of --op dc, its bound at the testbed's rate */
    RunResult d = run_cmd({kMpiRef, "--id", std::to_string(id_), "--program", kMpiDc, "--timeout",
                           "60", "--", "--tokens", "4", "--hidden", "64", "-n", "2", "-w", "0"},
                          90);
    EXPECT_EQ(d.status, 0) << describe(d);
    rows = perf_test::table_rows(d.out);
    ASSERT_EQ(rows.size(), 1u) << describe(d);
    EXPECT_EQ(rows[0].size() > 7 ? rows[0][7] : "", "0") << describe(d);
    EXPECT_EQ(rows[0].size(), 14u) << "bound and t/bound\n" << describe(d);
    EXPECT_NE(d.out.find("# link 200 Mbit/s per direction"), std::string::npos) << describe(d);
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

/* run --key-file keys the whole tree: the root, the leaves (their links to the
   root prove the same key) and every rank; a rank without the key is refused. */
TEST_F(TestbedSmoke, KeyFileKeysEverySwitchOfATreeAndEveryRank)
{
    char dir_tmpl[] = "/tmp/incmoe-tbkey.XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl, key = dir + "/key";
    std::ofstream(key) << "testbed-tree-key\n";
    RunResult up = tb({"up", "-N", "4", "--leaves", "2", "--rate", "200mbit"}, 60);
    up_ = true;
    ASSERT_EQ(up.status, 0) << describe(up);
    auto perf = [&](const std::vector<std::string> &env) {
        std::vector<std::string> a = {"run", "--switchd", SWITCHD_PATH, "--key-file",
                                      key,   "--timeout", "40",         "--"};
        a.insert(a.end(), env.begin(), env.end());
        for (const char *w : {"--switch", "{switch}", "--rank", "{rank}", "-N", "{nranks}", "--op",
                              "agrs", "-b", "64K", "-e", "64K", "-n", "2", "-w", "0"})
            a.push_back(w);
        return tb(a, 90);
    };
    RunResult keyed = perf({kPerf});
    ASSERT_EQ(keyed.status, 0) << describe(keyed);
    auto rows = perf_test::table_rows(keyed.out);
    ASSERT_EQ(rows.size(), 1u) << describe(keyed);
    EXPECT_EQ(rows[0].size() > 7 ? rows[0][7] : "", "0") << describe(keyed);

    RunResult keyless = perf({"env", "-u", "INCMOE_AUTH_KEY", kPerf});
    EXPECT_NE(keyless.status, 0) << "a keyed tree served ranks without the key: "
                                 << describe(keyless);
    run_cmd({"rm", "-rf", dir}, 20);
    bring_down();
}

/* Rank 0 listens, rank 1 sends it 4 MiB: run inside the testbed with the TCP
   metrics cache turned back on, it leaves an entry in both hosts' caches. */
static const char kPlantTcpMetrics[] = R"(
import socket, sys, time
open('/proc/sys/net/ipv4/tcp_no_metrics_save', 'w').write('0')
rank, peer = int(sys.argv[1]), sys.argv[2]
if rank == 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('', 18600)); s.listen(1); c, _ = s.accept()
    while c.recv(1 << 16): pass
    c.close()
else:
    for _ in range(200):
        try:
            c = socket.create_connection((peer, 18600)); break
        except OSError:
            time.sleep(0.05)
    c.sendall(b'x' * (4 << 20)); c.close()
)";

/* A run starts from hosts that remember nothing of earlier runs' TCP: the
   per-destination cache of RTT and reordering, which Linux keeps and starts new
   connections from, moved eqbw by points for several runs after one under
   other conditions. */
TEST_F(TestbedSmoke, EveryRunStartsWithoutEarlierRunsTcpMetrics)
{
    bring_up();
    auto cache = [&](const char *host) {
        return run_cmd({"ip", "-n", prefix_ + host, "tcp_metrics", "show"}, 20).out;
    };
    auto saves = [&](const char *host) {
        return run_cmd({"ip", "netns", "exec", prefix_ + host, "sysctl", "-n",
                        "net.ipv4.tcp_no_metrics_save"},
                       20)
            .out;
    };
    for (const char *host : {"r0", "r1", "sw"})
        EXPECT_EQ(saves(host), "1\n") << host << ": up leaves the cache on";

    std::string ip0 = "10.213." + std::to_string(id_) + ".1";
    RunResult plant = tb({"run", "--no-switch", "--timeout", "30", "--", "python3", "-c",
                          kPlantTcpMetrics, "{rank}", ip0},
                         60);
    ASSERT_EQ(plant.status, 0) << describe(plant);
    ASSERT_NE(cache("r1"), "") << "the planted connection left no cache entry: the test "
                                  "cannot tell whether run forgets it";
    /* every run says how much CPU it and everything else took, and what TCP lost */
    EXPECT_NE(plant.err.find("CPU while it ran: the run "), std::string::npos) << describe(plant);
    EXPECT_NE(plant.err.find("TCP while it ran: "), std::string::npos) << describe(plant);

    RunResult next = tb({"run", "--no-switch", "--timeout", "30", "--", "true"}, 60);
    ASSERT_EQ(next.status, 0) << describe(next);
    for (const char *host : {"r0", "r1", "sw"}) {
        EXPECT_EQ(cache(host), "") << host << ": the next run kept an earlier run's TCP metrics";
        EXPECT_EQ(saves(host), "1\n") << host;
    }
    bring_down();
}

static std::string slurp(const std::string &path)
{
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

/* 5 ranks under 2 leaves (3 + 2), up-links at half a rank link's rate. */
TEST_F(TestbedSmoke, TreeShapesEveryLinkAndRoutesThroughTheRoot)
{
    RunResult up =
        tb({"up", "-N", "5", "--leaves", "2", "--rate", "100mbit", "--uplink-rate", "50mbit"}, 60);
    up_ = true;
    ASSERT_EQ(up.status, 0) << describe(up);
    EXPECT_NE(up.out.find("under 2 leaf switches"), std::string::npos) << describe(up);
    EXPECT_EQ(namespaces_with(prefix_).size(), 9u) << "5 ranks + 2 leaves + root + hub";

    const std::string net = "10." + std::to_string(100 + id_) + ".";
    RunResult h = tb({"hosts"}, 30);
    ASSERT_EQ(h.status, 0) << describe(h);
    for (const std::string &line :
         {"r2 " + prefix_ + "r2 " + net + "0.3\n", "r3 " + prefix_ + "r3 " + net + "1.4\n",
          "l1 " + prefix_ + "l1 " + net + "1.254 " + net + "255.2\n",
          "sw " + prefix_ + "sw " + net + "255.254\n"})
        EXPECT_NE(h.out.find(line), std::string::npos) << line << describe(h);

    /* both ends of every link: a leaf's rank side at its ranks x rate, each
       up-link at its own rate, the root's port at the sum of the up-links */
    struct {
        const char *host, *dev, *rate;
    } links[] = {{"r0", "tb0", "100Mbit"},   {"hub", "vr0", "100Mbit"}, {"r4", "tb0", "100Mbit"},
                 {"hub", "vr4", "100Mbit"},  {"l0", "tb0", "300Mbit"},  {"hub", "vl0", "300Mbit"},
                 {"l1", "tb0", "200Mbit"},   {"hub", "vl1", "200Mbit"}, {"l0", "tb1", "50Mbit"},
                 {"hub", "vl0up", "50Mbit"}, {"l1", "tb1", "50Mbit"},   {"hub", "vl1up", "50Mbit"},
                 {"sw", "tb0", "100Mbit"},   {"hub", "vsw", "100Mbit"}};
    for (auto &l : links) {
        RunResult q = run_cmd({"tc", "-n", prefix_ + l.host, "qdisc", "show", "dev", l.dev}, 20);
        EXPECT_NE(q.out.find(std::string("tbf")), std::string::npos) << l.host << "/" << l.dev;
        EXPECT_NE(q.out.find(std::string("rate ") + l.rate + " "), std::string::npos)
            << l.host << "/" << l.dev << ": " << q.out;
    }

    /* r0 (leaf 0) reaches r4 (leaf 1) in three forwarding hops: leaf 0, the
       root, leaf 1; a TTL of 3 dies at leaf 1, so nothing goes round the root */
    if (run_cmd({"sh", "-c", "command -v ping"}, 10).status == 0) {
        RunResult p4 =
            tb({"exec", "r0", "--", "ping", "-c", "1", "-W", "5", "-t", "4", net + "1.5"}, 30);
        EXPECT_EQ(p4.status, 0) << describe(p4);
        RunResult p3 =
            tb({"exec", "r0", "--", "ping", "-c", "1", "-W", "5", "-t", "3", net + "1.5"}, 30);
        EXPECT_NE(p3.status, 0) << describe(p3);
        EXPECT_NE(p3.out.find("Time to live exceeded"), std::string::npos) << describe(p3);
    } else {
        std::cout << "[ NOTE     ] no ping here: the route through the root is not probed\n";
    }

    RunResult st = tb({"status"}, 30);
    EXPECT_EQ(st.status, 0) << describe(st);
    EXPECT_NE(st.out.find(prefix_ + "l1 tb1: qdisc tbf"), std::string::npos) << describe(st);
    bring_down();
}

/* run starts the root, then each leaf with --parent the root's address; each
   rank is given its own leaf.  A stand-in switch records how it was started. */
TEST_F(TestbedSmoke, TreeRunStartsTheRootThenEveryLeaf)
{
    char dir_tmpl[] = "/tmp/incmoe-tbtree.XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl, fake = dir + "/switchd";
    {
        std::ofstream f(fake);
        f << "#!/bin/sh\n"
             "echo \"incmoe-switchd listening on $2\"\n"
             "echo \"args: $* devices $UCX_NET_DEVICES\"\n"
             "exec sleep 600\n";
    }
    ASSERT_EQ(chmod(fake.c_str(), 0755), 0);

    RunResult up = tb({"up", "-N", "5", "--leaves", "2", "--rate", "100mbit"}, 60);
    up_ = true;
    ASSERT_EQ(up.status, 0) << describe(up);
    RunResult r =
        tb({"run", "--switchd", fake, "--port", "18700", "--logdir", dir, "--timeout", "30", "--",
            "sh", "-c", "echo {rank} {nranks} {switch} {mbps} {uplink_mbps} $UCX_NET_DEVICES"},
           60);
    EXPECT_EQ(r.status, 0) << describe(r);

    const std::string net = "10." + std::to_string(100 + id_) + ".", root = net + "255.254:18700";
    EXPECT_NE(slurp(dir + "/switch.log").find("args: --listen " + root + " devices tb0\n"),
              std::string::npos)
        << slurp(dir + "/switch.log");
    for (int leaf = 0; leaf < 2; leaf++) {
        std::string log = slurp(dir + "/leaf" + std::to_string(leaf) + ".log");
        EXPECT_NE(log.find("args: --listen " + net + std::to_string(leaf) + ".254:18700 --parent " +
                           root + " devices tb0,tb1\n"),
                  std::string::npos)
            << log;
    }
    /* ranks 0..2 under leaf 0, 3..4 under leaf 1; up-links default to the rate */
    for (int rank = 0; rank < 5; rank++) {
        std::string want = std::to_string(rank) + " 5 " + net + (rank < 3 ? "0" : "1") +
                           ".254:18700 100 100 tb0\n";
        EXPECT_EQ(slurp(dir + "/rank" + std::to_string(rank) + ".log"), want);
    }
    run_cmd({"rm", "-rf", dir}, 20);
    bring_down();
}
