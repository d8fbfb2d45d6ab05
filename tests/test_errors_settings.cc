/*
 * test_errors_settings.cc - the failures of settings: INCMOE_* numbers out of range and unknown
 * algorithms fail incmoe_comm_create naming the variable. Each gets its own error on the job's
 * ranks (or a refused connection), and the switch goes on serving another job (errors_common.h has
 * what the error suites share).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
#include "switch/throttle.h"
}

#include "errors_common.h"

using namespace errtest;

namespace
{

TEST_F(Errors, NumberSettingsOutOfRangeFailCreateNamingTheVariable)
{
    harness::ExpectErrors errors_expected("settings are out of range");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        for (const char *bad : {"abc", "99999999999", "0", "-1", "1e9junk"}) {
            setenv("INCMOE_TIMEOUT_MS", bad, 1);
            incmoe_comm_t *comm;
            std::string log;
            incmoe_status_t st = create_logged(sw.addr, &comm, &log);
            if (st != INCMOE_ERR_INVALID_ARG)
                return std::string("INCMOE_TIMEOUT_MS=") + bad + " gave " + status_text(st);
            if (log.find(std::string("INCMOE_TIMEOUT_MS=") + bad) == std::string::npos ||
                log.find("1..86400000") == std::string::npos)
                return std::string("INCMOE_TIMEOUT_MS=") + bad + " logged: " + log;
        }
        unsetenv("INCMOE_TIMEOUT_MS");
        setenv("INCMOE_RNDV_THRESH", "64X", 1);
        incmoe_comm_t *comm;
        std::string log;
        incmoe_status_t st = create_logged(sw.addr, &comm, &log);
        unsetenv("INCMOE_RNDV_THRESH");
        if (st != INCMOE_ERR_INVALID_ARG || log.find("INCMOE_RNDV_THRESH=64X") == std::string::npos)
            return "INCMOE_RNDV_THRESH=64X gave " + status_text(st) + ", logged: " + log;
        /* The parameter is checked as well: at most a day. */
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 86400001);
        if (st != INCMOE_ERR_INVALID_ARG)
            return "timeout_ms 86400001 gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* The algorithm table's bound: a value that names no algorithm fails create with a reason. */
TEST_F(Errors, UnknownAlgorithmIsRefusedNamingIt)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        for (int bad : {-1, 1000}) {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = sw.addr.c_str();
            p.job_id = harness::unique_job_id();
            p.rank = 0;
            p.nranks = 1;
            p.algo = (incmoe_algo_t)bad;
            incmoe_comm_t *comm;
            incmoe_status_t st = INCMOE_OK;
            std::string path = with_stderr_to_file([&] { st = incmoe_comm_create(&p, &comm); });
            std::string log = file_text(path);
            unlink(path.c_str());
            if (st == INCMOE_OK)
                incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_INVALID_ARG ||
                log.find("unknown algorithm " + std::to_string(bad)) == std::string::npos)
                return "algo " + std::to_string(bad) + " gave " + status_text(st) +
                       ", logged: " + log;
        }
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
