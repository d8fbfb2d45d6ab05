/*
 * test_errors_liveness.cc - the failures of liveness: dead, stopped and silent ranks and switches
 * found within the job's timeout, the progress timeout, and the heartbeats that keep a busy rank
 * alive. Each gets its own error on the job's ranks (or a refused connection), and the switch goes
 * on serving another job (errors_common.h has what the error suites share).
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

/* The DATA messages of collectives this process's client handed to UCX: plugin/send.c's
   test hook, which only a test program defines. */
static std::atomic<unsigned long long> g_sent_msgs{0};

extern "C" void client_test_sent(int msg, size_t length)
{
    (void)length;
    if (msg == WIRE_MSG_DATA)
        g_sent_msgs++;
}

/*
 * A test hook, a slow receive path: in a rank process that sets g_ring_rx_delay_us before it
 * creates its (one) communicator, handling each ring data message takes that much longer, as on
 * a machine slow enough (a sanitizer build, a loaded host) that ring data keeps arriving faster
 * than the proxy takes it in.  The library installs its message handler with
 * ucp_worker_set_am_recv_handler; this program's own definition of that name comes first in the
 * dynamic lookup, so libincmoe's call lands here, which wraps the handler and calls UCX's.
 * Outside the anonymous namespace: the name must stay external.
 */
static unsigned g_ring_rx_delay_us;

static ucp_am_recv_callback_t g_wrapped_cb;

static void *g_wrapped_arg;

static ucs_status_t slow_ring_rx(void *, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    struct inc_wire_hdr h;
    if (header_length >= sizeof(h)) {
        memcpy(&h, header, sizeof(h));
        if (h.msg == WIRE_MSG_RING_GATHER || h.msg == WIRE_MSG_RING_REDUCE)
            usleep(g_ring_rx_delay_us);
    }
    return g_wrapped_cb(g_wrapped_arg, header, header_length, data, length, param);
}

extern "C" ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                                       const ucp_am_handler_param_t *param)
{
    using set_fn = ucs_status_t (*)(ucp_worker_h, const ucp_am_handler_param_t *);
    static set_fn ucx_set = (set_fn)dlsym(RTLD_NEXT, "ucp_worker_set_am_recv_handler");
    if (g_ring_rx_delay_us == 0 || !(param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_CB))
        return ucx_set(worker, param);
    ucp_am_handler_param_t slow = *param;
    g_wrapped_cb = param->cb;
    g_wrapped_arg = (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_ARG) ? param->arg : nullptr;
    slow.cb = slow_ring_rx;
    return ucx_set(worker, &slow);
}

namespace
{

/* Ranks 0..n-2 wait on a collective (an AllGather, or a dispatch with rows for every rank);
   rank n-1 dies (or hangs) instead of joining it. */
void expect_dead_rank_detected(const std::string &addr, int sig,
                               incmoe_algo_t algo = INCMOE_ALGO_INC, bool dispatch = false)
{
    const int n = 3, bound_ms = 2000;
    harness::ExpectErrors errors_expected("rank n-1 dies or stops");
    unsigned long long job = harness::unique_job_id();
    struct Posted {
        int ranks; /* ranks 0..n-2 that have posted the collective */
    };
    harness::SharedBoard<Posted> shared;
    Posted *posted = shared.get();
    ASSERT_NE(posted, nullptr);
    auto res = run_job(
        addr, job, n,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = INCMOE_OK;
            std::string pidfile = "/tmp/incmoe-stopped-" + std::to_string(job);
            if (rank == n - 1) {
                FILE *f = fopen(pidfile.c_str(), "w");
                fprintf(f, "%d\n", (int)getpid());
                fclose(f);
                /* The others wait in the collective by now (bounded: they may have failed). */
                harness::await_at_least(&posted->ranks, n - 1);
                raise(sig); /* SIGKILL: dead; SIGSTOP: alive but silent */
                pause();
            }
            static float buf[1 << 18];
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            incmoe_layout_t l = {sizeof(buf) / n / 64 * 64, 0, sizeof(buf) / n / 64 * 64, nullptr};
            incmoe_req_t req;
            double t0 = inc_now_s();
            uint64_t sets[4] = {7, 7, 7, 7};
            incmoe_dispatch_params_t dp = {};
            dp.send_mr = mr;
            dp.nrows = 4;
            dp.row_bytes = 4096;
            dp.sets = sets;
            dp.recv_mr = mr;
            dp.recv_offset = sizeof(buf) / 2;
            dp.capacity = 4 * (size_t)n;
            st = dispatch ? incmoe_dispatch(comm, &dp, &req)
                          : incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
            harness::bump(&posted->ranks);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            double waited = inc_now_s() - t0;
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (rank == 0) { /* a stopped rank never ends by itself */
                FILE *f = fopen(pidfile.c_str(), "r");
                int pid = 0;
                if (f != nullptr && fscanf(f, "%d", &pid) == 1 && pid > 0)
                    kill(pid, SIGKILL);
                if (f != nullptr)
                    fclose(f);
                unlink(pidfile.c_str());
            }
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find("rank " + std::to_string(n - 1)) == std::string::npos)
                return "reason does not name the rank: " + text;
            /* The bound, plus slack for a loaded 2-core machine: a hang would be caught here. */
            if (waited > bound_ms / 1000.0 * 2 + 3)
                return "noticed after " + std::to_string(waited) + " s";
            return "";
        },
        60, bound_ms, algo);
    for (int r = 0; r < n - 1; r++)
        EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST_F(Errors, KilledRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGKILL);
}

TEST_F(Errors, SilentRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGSTOP);
}

/* On a2a every rank also holds a connection to the dead one: the first to notice names it. */
TEST_F(Errors, A2aKilledRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_A2A);
}

/* A rank killed while the others dispatch to it point to point: they fail naming it. */
TEST_F(Errors, RankKilledDuringAPointToPointDispatchFailsThePeersNamingIt)
{
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_A2A, true);
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_RING, true);
}

/* An AllGather of 64-byte blocks among n ranks, waited for: its status.  The buffers stay
   registered with the rank's communicator, which owns them after a failure. */
incmoe_status_t allgather_64(incmoe_comm_t *comm, int n)
{
    auto &send = harness::buffer<char>(64);
    auto &recv = harness::buffer<char>(64 * (size_t)n);
    incmoe_mr_t *ms, *mr;
    incmoe_mem_register(comm, send.data(), send.size(), &ms);
    incmoe_mem_register(comm, recv.data(), recv.size(), &mr);
    incmoe_layout_t l = {64, 0, 64, nullptr};
    incmoe_req_t req;
    incmoe_status_t st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
    return st == INCMOE_OK ? incmoe_wait(comm, &req) : st;
}

/* A rank alive but posting nothing: its status once its communicator failed (within 60 s). */
incmoe_status_t idle_until_failed(incmoe_comm_t *comm)
{
    incmoe_status_t st;
    double deadline = inc_now_s() + 60;
    while ((st = incmoe_comm_error(comm, nullptr, 0)) == INCMOE_OK && inc_now_s() < deadline)
        usleep(20000);
    return st;
}

/* The progress timeout's tests: each starts sw with the timeout it needs and runs job on it;
   the switch is stopped when the test ends. */
class ProgressTimeout : public ::testing::Test
{
  protected:
    harness::SwitchProc sw;
    const unsigned long long job = harness::unique_job_id();
    void TearDown() override
    {
        if (sw.pid > 0)
            harness::switch_stop(&sw);
    }
};

/*
 * Rank 2 stays alive but never posts the AllGather ranks 0 and 1 posted: after the
 * switch's progress timeout every rank of the job fails with INCMOE_ERR_TIMEOUT and a
 * reason naming rank 2 and the collective, and the switch serves a new job.
 */
TEST_F(ProgressTimeout, RankThatNeverPostsFailsTheJobNamingIt)
{
    harness::ExpectErrors errors_expected("a rank never posts");
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "1500"}));
    const int n = 3;
    auto res = run_job(
        sw.addr, job, n,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = INCMOE_OK;
            std::string fail;
            if (rank < 2)
                st = allgather_64(comm, n);
            else
                st = idle_until_failed(comm); /* its proxy answers heartbeats */
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_TIMEOUT)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find("rank 2 ") == std::string::npos ||
                text.find("allgather epoch 1") == std::string::npos)
                return "reason does not name rank 2 and the collective: " + text;
            return "";
        },
        90);
    EXPECT_EQ(harness::failures(res), "");
    expect_switch_serves(sw.addr);
}

/*
 * The ranks ask the job's progress timeout (progress_timeout_ms): 1.5 s and 1 s, of a switch
 * whose own is ten minutes.  The job takes the largest asked: the AllGather rank 1 never posts
 * fails both ranks after 1.5 s, and the reason says so.  A value out of range is refused.
 */
TEST_F(ProgressTimeout, TheRanksAskTheJobsProgressTimeout)
{
    harness::ExpectErrors errors_expected("a rank never posts");
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "600000"}));
    const int n = 2;
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_PROGRESS_TIMEOUT;
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            p.progress_timeout_ms = -1;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_ERR_INVALID_ARG)
                return "progress_timeout_ms -1 gave " + status_text(st);
            p.progress_timeout_ms = rank == 0 ? 1500 : 1000;
            st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            if (rank == 0)
                st = allgather_64(comm, n);
            else /* at the switch's own timeout this would still wait */
                st = idle_until_failed(comm);
            return destroy_expecting(comm, st, INCMOE_ERR_TIMEOUT,
                                     "rank 1 did not post within 1.5 s");
        },
        90);
    EXPECT_EQ(harness::failures(res), "");
}

/*
 * Rank 0 posts four barriers at once; rank 1 posts each a while after the previous one
 * completed.  Rank 1 is never late for what it could reach, though the last barrier
 * waits for it longer than the progress timeout: the job must not fail.
 */
TEST_F(ProgressTimeout, PostingAheadDoesNotMakeTheOthersLate)
{
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "3000"}));
    const int n = 2, count = 4;
    auto res = run_job(
        sw.addr, job, n,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = INCMOE_OK;
            incmoe_req_t req[count];
            for (int k = 0; k < count && st == INCMOE_OK; k++) {
                if (rank == 1) {
                    usleep(1200 * 1000);
                    st = incmoe_barrier(comm, &req[k]);
                    if (st == INCMOE_OK)
                        st = incmoe_wait(comm, &req[k]);
                } else {
                    st = incmoe_barrier(comm, &req[k]);
                }
            }
            for (int k = 0; k < count && st == INCMOE_OK && rank == 0; k++)
                st = incmoe_wait(comm, &req[k]);
            std::string text = comm_text(comm);
            incmoe_status_t dst = incmoe_comm_destroy(comm);
            if (st != INCMOE_OK)
                return "got " + status_text(st) + " (" + text + ")";
            if (dst != INCMOE_OK)
                return "destroy: " + status_text(dst);
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, DeadSwitchFailsEveryRank)
{
    harness::ExpectErrors errors_expected("the switch is killed");
    harness::SwitchProc doomed;
    ASSERT_TRUE(harness::switch_start(&doomed));
    unsigned long long job = harness::unique_job_id();
    pid_t victim = doomed.pid;
    /* Shared with the ranks: how many have seen the first barrier complete, and whether the
       switch was killed.  The switch dies only once both have, or a rank whose DONE was still
       in flight fails its first barrier; the second barrier is posted only once it died. */
    struct Events {
        int passed_first;
        int killed;
    };
    harness::SharedBoard<Events> shared;
    Events *ev = shared.get();
    ASSERT_NE(ev, nullptr);
    auto res = run_job(
        doomed.addr, job, 2,
        [&](incmoe_comm_t *comm, int rank) -> std::string {
            incmoe_status_t st = harness::barrier_wait(comm); /* both have joined */
            if (st != INCMOE_OK)
                return "first barrier: " + status_text(st);
            harness::bump(&ev->passed_first);
            if (rank == 0) {
                /* At most 10 s: rank 1 may have failed instead. */
                harness::await_at_least(&ev->passed_first, 2, 10);
                kill(victim, SIGKILL);
                harness::store(&ev->killed, 1);
            } else if (!harness::await_at_least(&ev->killed, 1)) {
                return "rank 0 never killed the switch";
            }
            st = harness::barrier_wait(comm);
            incmoe_comm_destroy(comm);
            return st == INCMOE_ERR_PEER_FAILED ? "" : "got " + status_text(st);
        },
        60, 2000);
    EXPECT_EQ(res[0], "");
    EXPECT_EQ(res[1], "");
    harness::switch_stop(&doomed);
}

/* A collective in flight when the switch stops: every rank's wait fails after the job's
   timeout, and each rank's process is gone shortly after that (its teardown waits are short
   once the communicator failed).  The ends are measured here, in the parent. */
TEST_F(Errors, StoppedSwitchDuringACollectiveEndsEveryRankPromptly)
{
    harness::ExpectErrors errors_expected("the switch is stopped mid-collective");
    const int n = 2, job_ms = 1500;
    harness::SwitchProc stopped;
    /* The switch's floor is below what the ranks ask: the job runs with the ranks' 1.5 s. */
    ASSERT_TRUE(harness::switch_start(&stopped, {"--timeout-ms", "1000"}));
    /* Shared with the ranks: [0] when the switch was stopped, [1 + r] when rank r's wait failed. */
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    volatile double *when = static_cast<double *>(shared);
    /* ... and, past them, how many ranks have completed their first barrier. */
    int *passed_first = reinterpret_cast<int *>(static_cast<char *>(shared) + 2048);
    pid_t victim = stopped.pid;
    unsigned long long job = harness::unique_job_id();
    std::vector<double> ended;
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(stopped.addr, job, rank, n, &comm, job_ms);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            incmoe_req_t req;
            st = harness::barrier_wait(comm); /* both have joined */
            if (st != INCMOE_OK)
                return "first barrier: " + status_text(st);
            harness::bump(passed_first);
            static float buf[1 << 21]; /* 8 MiB: more than the switch takes before it stops */
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            /* Rank 1 posts only once the switch stopped, so the AllReduce cannot finish. */
            if (rank == 1)
                while (when[0] == 0)
                    usleep(1000);
            unsigned long long sent = g_sent_msgs.load();
            st = incmoe_allreduce(comm, mr, 0, mr, 0, 1 << 21, INCMOE_FLOAT32, INCMOE_SUM, &req);
            bool sent_some = true;
            if (rank == 0) {
                /* Stopped once rank 1 has its first barrier's result and some of the
                   AllReduce's data was handed to UCX (bounded: the switch is stopped either
                   way, so rank 1 goes on). */
                harness::await_at_least(passed_first, 2);
                double deadline = inc_now_s() + 20;
                while (st == INCMOE_OK && g_sent_msgs.load() == sent && inc_now_s() < deadline)
                    usleep(1000);
                sent_some = g_sent_msgs.load() != sent;
                when[0] = inc_now_s();
                kill(victim, SIGSTOP);
            }
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            when[1 + rank] = inc_now_s();
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (!sent_some)
                return "the AllReduce sent no data before the switch stopped (" + status_text(st) +
                       ", " + text + ")";
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            return "";
        },
        60, &ended);
    EXPECT_EQ(harness::failures(res), "");
    kill(stopped.pid, SIGCONT);
    harness::switch_stop(&stopped);
    ASSERT_EQ(ended.size(), (size_t)n);
    for (int r = 0; r < n; r++) {
        double failed = when[1 + r] - when[0], exited = ended[r] - when[0];
        fprintf(stderr, "rank %d: failed %.2f s, exited %.2f s after the switch stopped\n", r,
                failed, exited);
        /* Exit within timeout + 0.5 s is the aim; the bound here has slack for a loaded
           machine while still catching a teardown that waits seconds. */
        EXPECT_LT(exited, job_ms / 1000.0 + 1.5) << "rank " << r << " lingered";
    }
    munmap(shared, 4096);
}

/* One rank asks a 250 ms timeout, a quarter of the switch's floor: the switch keeps the job's
   timeout at its floor or above, so neither it nor the ranks give up on a healthy peer that
   heartbeats at the job's pace (400 ms of quiet after each burst of barriers), or that pauses for
   500 ms (rank 0 is stopped that long halfway).  Rank 1 asks its timeout only once the switch has
   rank 0's join, since the ask also bounds its own join: no wait for rank 0 falls under it. */
TEST_F(Errors, ShortTimeoutOnOneRankDoesNotFailTheJob)
{
    const int n = 2;
    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    volatile pid_t *rank0_pid = static_cast<pid_t *>(shared);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            if (rank == 0) {
                *rank0_pid = getpid();
            } else {
                if (!switch_saw_join(log, job, 0))
                    return "the switch did not log rank 0's join";
                setenv("INCMOE_TIMEOUT_MS", "250", 1);
            }
            incmoe_comm_params_t p = {};
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            /* 100 barriers in bursts of 20, with 400 ms of quiet after each (longer than the
               250 ms asked), ~2.5 s in all. */
            for (int i = 0; i < 100 && st == INCMOE_OK; i++) {
                if (rank == 1 && i == 50) {
                    kill(*rank0_pid, SIGSTOP);
                    usleep(500000);
                    kill(*rank0_pid, SIGCONT);
                }
                incmoe_req_t req;
                st = incmoe_barrier(comm, &req);
                if (st == INCMOE_OK)
                    st = incmoe_wait(comm, &req);
                if (i % 20 == 19)
                    usleep(400000);
            }
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_OK)
                return "barrier: " + status_text(st) + " (" + text + ")";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
    munmap(shared, 4096);
    unlink(log.c_str());
}

/* Ring data never passes the switch, so it proves nothing to it: a rank whose proxy is busy
   taking in ring data must still heartbeat.  Each ring message is made slow to handle (the test
   hook above) and there are many (256-byte chunks), so both ranks take in data without a pause
   for twice the job's timeout or longer; the job must not lose either as silent. */
TEST_F(Errors, RankBusyWithRingDataStillHeartbeats)
{
    const int n = 2, job_ms = 1000;
    /* 20000 messages of 256 bytes, each handled in at least 100 us: 2 s, twice the timeout. */
    const size_t block = 20000 * 256;
    harness::switch_stop(&sw);
    ASSERT_TRUE(harness::switch_start(
        &sw, {"--timeout-ms", std::to_string(job_ms), "--chunk-size", "256"}));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            g_ring_rx_delay_us = 100;
            incmoe_comm_t *comm;
            incmoe_status_t st =
                create(sw.addr, job, rank, n, &comm, job_ms, nullptr, INCMOE_ALGO_RING);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            std::vector<unsigned char> send(block), recv(block * n);
            for (size_t i = 0; i < block; i++)
                send[i] = (unsigned char)(rank * 101 + i % 251);
            incmoe_mr_t *ms = nullptr, *mr = nullptr;
            st = incmoe_mem_register(comm, send.data(), send.size(), &ms);
            if (st == INCMOE_OK)
                st = incmoe_mem_register(comm, recv.data(), recv.size(), &mr);
            incmoe_layout_t l = {block, 0, block, nullptr};
            incmoe_req_t req;
            if (st == INCMOE_OK)
                st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm); /* before the buffers go: after a failure they are its */
            if (st != INCMOE_OK)
                return "allgather: " + status_text(st) + " (" + text + ")";
            for (int b = 0; b < n; b++)
                for (size_t i = 0; i < block; i++)
                    if (recv[b * block + i] != (unsigned char)(b * 101 + i % 251))
                        return "block " + std::to_string(b) + " byte " + std::to_string(i) +
                               " wrong";
            return "";
        },
        120);
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
