/*
 * test_mpi_dc.cc - tools/mpi_dc, the OpenMPI reference of incmoe-perf --op dc,
 * run as tools/mpi-reference runs it but on loopback (mpirun, btl tcp,self):
 * every element of its received and reduced rows is exact (#wrong 0, exit 0),
 * and its traffic columns (rows and bytes of the busiest rank, per step) equal
 * incmoe-perf --op dc --algo a2a's for the same routing, which counts them
 * from the routing on its own: the two programs move the same rows.  A bad
 * option is an error, said once, with a non-zero exit.
 */
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perf_run.h"

using perf_test::describe;
using perf_test::RunResult;

static const std::string kMpiDc = TOP_BUILDDIR "/tools/mpi_dc";
static const std::string kPerf = TOP_BUILDDIR "/tools/incmoe-perf";

static RunResult mpi_dc(int n, const std::vector<std::string> &args)
{
    /* mpirun refuses root unless told; the tests run as whoever builds. */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    std::vector<std::string> argv{"mpirun", "--oversubscribe", "-np", std::to_string(n), "--mca",
                                  "btl",    "tcp,self",        kMpiDc};
    argv.insert(argv.end(), args.begin(), args.end());
    return perf_test::run_cmd(argv, 120);
}

/* The only table row of a dc output, split on blanks. */
static std::vector<std::string> only_row(const RunResult &r)
{
    std::vector<std::vector<std::string>> rows = perf_test::table_rows(r.out);
    return rows.size() == 1 ? rows[0] : std::vector<std::string>{};
}

class MpiDc : public ::testing::TestWithParam<std::vector<std::string>>
{
};

TEST_P(MpiDc, ExactAndMovesWhatIncmoePerfsA2aMoves)
{
    std::vector<std::string> routing = GetParam();
    std::vector<std::string> args{"--tokens", "12", "--hidden", "40", "-n", "3", "-w", "1"};
    args.insert(args.end(), routing.begin(), routing.end());
    RunResult m = mpi_dc(4, args);
    ASSERT_EQ(m.status, 0) << describe(m);
    std::vector<std::string> row = only_row(m);
    ASSERT_EQ(row.size(), 12u) << describe(m); /* no --link-mbps: no bound columns */
    EXPECT_EQ(row[7], "0") << "#wrong\n" << describe(m);
    EXPECT_NE(m.out.find("# errors: 0"), std::string::npos) << describe(m);

    std::vector<std::string> pargv{kPerf, "-N", "4", "--op", "dc", "--algo", "a2a", "-n", "1"};
    pargv.insert(pargv.end(), args.begin(), args.end() - 4); /* tokens and hidden */
    pargv.insert(pargv.end(), routing.begin(), routing.end());
    RunResult p = perf_test::run_cmd(pargv, 120);
    ASSERT_EQ(p.status, 0) << describe(p);
    std::vector<std::string> prow = only_row(p);
    ASSERT_GE(prow.size(), 12u) << describe(p);
    for (int c : {0, 1, 8, 9, 10, 11}) /* size, count, rows-out, rows-in, up, down */
        EXPECT_EQ(row[c], prow[c]) << "column " << c << "\n" << describe(m) << describe(p);
    /* The routing line is incmoe-perf's, so tools/incmoe-model reads both alike. */
    size_t at = p.out.find("# tokens ");
    ASSERT_NE(at, std::string::npos) << describe(p);
    std::string line = p.out.substr(at, p.out.find('\n', at) - at);
    EXPECT_NE(m.out.find(line), std::string::npos) << line << "\n" << describe(m);
}

INSTANTIATE_TEST_SUITE_P(
    Routings, MpiDc,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"--route", "zipf:1.2", "--seed", "7"},
                      std::vector<std::string>{"-E", "4", "-k", "1", "--placement", "strided"}));

TEST(MpiDcArgs, ABadOptionIsSaidOnceAndFails)
{
    RunResult m = mpi_dc(2, {"--tokens", "many"});
    EXPECT_NE(m.status, 0) << describe(m);
    std::string says = "mpi_dc: bad or missing value for --tokens: 'many'";
    size_t at = m.err.find(says);
    ASSERT_NE(at, std::string::npos) << describe(m);
    EXPECT_EQ(m.err.find(says, at + 1), std::string::npos) << "said twice\n" << describe(m);
    EXPECT_TRUE(perf_test::table_rows(m.out).empty()) << describe(m);
}
