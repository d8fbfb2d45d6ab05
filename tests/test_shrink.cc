/*
 * test_shrink.cc - incmoe_comm_shrink (incmoe.h, "Shrink") across real processes, on inc, ring
 * and a2a: survivors of one lost rank (N=4) and of two (N=6) get a communicator of their own,
 * renumbered densely in ascending old rank order, and run AllReduce, AllGather and a dispatch
 * with its combine on it, each checked exactly against a reference computed here from the old
 * ranks alone; a shrink on request with nobody lost; a lost rank that comes back is refused; a
 * survivor lost after it asked to shrink fails the shrink on each of the others with a reason,
 * within a bound, and so does one that never asks, after the job's timeout.  Each case also prints
 * the survivors' first result's time from the kill.
 */
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dc_ref.h"
#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/clock.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
}

/* SHRINK messages this process handed to UCX: plugin/send.c's test hook, which only a test
   program defines, counts them on a board counter set by the test that needs it; a process
   that sets g_stop_after_shrink stops itself right after its SHRINK went (alive but silent,
   its socket open, so the switch reads the SHRINK and then finds it silent). */
static int *g_shrinks_sent;
static bool g_stop_after_shrink;

extern "C" void client_test_sent(int msg, size_t length)
{
    (void)length;
    if (msg == WIRE_MSG_SHRINK && g_shrinks_sent != nullptr)
        harness::bump(g_shrinks_sent);
    if (msg == WIRE_MSG_SHRINK && g_stop_after_shrink)
        raise(SIGSTOP);
}

namespace
{

using harness::why;

const int kTimeoutMs = 2000; /* the jobs' liveness timeout */

/* ------------------------------------------------------------------------ */
/* the work on the new communicator, against a reference                     */

/* Rank k of the shrunk job was rank olds[k] of the old one. */
struct Shrunk {
    int me, n;
    std::vector<int> olds;
};

/* AllReduce of small integers in fp32 (exact): element e of rank k is (olds[k] + 1) * 1000 + e. */
std::string check_allreduce(incmoe_comm_t *comm, const Shrunk &s)
{
    const size_t count = 1024;
    auto &v = harness::buffer<float>(count);
    for (size_t e = 0; e < count; e++)
        v[e] = (float)((s.olds[s.me] + 1) * 1000 + (int)e);
    incmoe_mr_t *mr;
    CHECK_OK(incmoe_mem_register(comm, v.data(), v.size() * sizeof(float), &mr));
    incmoe_req_t req;
    CHECK_OK(incmoe_allreduce(comm, mr, 0, mr, 0, count, INCMOE_FLOAT32, INCMOE_SUM, &req));
    CHECK_OK(incmoe_wait(comm, &req));
    for (size_t e = 0; e < count; e++) {
        long want = 0;
        for (int k = 0; k < s.n; k++)
            want += (s.olds[k] + 1) * 1000 + (long)e;
        if (v[e] != (float)want)
            return "allreduce element " + std::to_string(e) + ": " + std::to_string(v[e]) +
                   ", want " + std::to_string(want);
    }
    return "";
}

unsigned char gather_byte(int old, size_t j)
{
    return (unsigned char)(old * 31 + (int)j * 7 + 1);
}

/* AllGather of 256-byte blocks, each made from its rank's old number. */
std::string check_allgather(incmoe_comm_t *comm, const Shrunk &s)
{
    const size_t block = 256;
    auto &send = harness::buffer<unsigned char>(block);
    auto &recv = harness::buffer<unsigned char>(block * (size_t)s.n, 0xee);
    for (size_t j = 0; j < block; j++)
        send[j] = gather_byte(s.olds[s.me], j);
    incmoe_mr_t *ms, *mr;
    CHECK_OK(incmoe_mem_register(comm, send.data(), send.size(), &ms));
    CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size(), &mr));
    incmoe_layout_t l = {block, 0, block, nullptr};
    incmoe_req_t req;
    CHECK_OK(incmoe_allgather(comm, ms, 0, mr, 0, &l, &req));
    CHECK_OK(incmoe_wait(comm, &req));
    for (int k = 0; k < s.n; k++)
        for (size_t j = 0; j < block; j++)
            if (recv[(size_t)k * block + j] != gather_byte(s.olds[k], j))
                return "allgather block " + std::to_string(k) + " byte " + std::to_string(j);
    return "";
}

/* The dispatch: each rank sends kRows rows of kCount floats; row i of rank k goes to ranks
   (k + i) % n and (k + 2 i + 1) % n; element e is the old rank's number, the row and e. */
const size_t kRows = 5, kCount = 8;

bool dc_in_set(int k, size_t i, int d, int n)
{
    return d == (k + (int)i) % n || d == (k + 2 * (int)i + 1) % n;
}

float dc_val(const Shrunk &s, int k, size_t i, size_t e)
{
    return (float)(s.olds[k] * 100 + (int)i * 10 + (int)e);
}

/* What rank d receives, in order: ascending source rank, then row. */
std::vector<std::pair<int, size_t>> dc_received(const Shrunk &s, int d)
{
    std::vector<std::pair<int, size_t>> out;
    for (int k = 0; k < s.n; k++)
        for (size_t i = 0; i < kRows; i++)
            if (dc_in_set(k, i, d, s.n))
                out.push_back({k, i});
    return out;
}

std::string check_received(incmoe_comm_t *comm, const Shrunk &s, const incmoe_req_t *req,
                           const std::vector<float> &recv)
{
    auto want = dc_received(s, s.me);
    size_t nrecv = 0;
    std::vector<uint32_t> src(2 * want.size() + 2);
    CHECK_OK(incmoe_dispatch_result(comm, req, &nrecv, src.data(), want.size()));
    if (nrecv != want.size())
        return "received " + std::to_string(nrecv) + " rows, want " + std::to_string(want.size());
    for (size_t r = 0; r < want.size(); r++) {
        if ((int)src[2 * r] != want[r].first || src[2 * r + 1] != want[r].second)
            return "received row " + std::to_string(r) + " from the wrong source";
        for (size_t e = 0; e < kCount; e++)
            if (recv[r * kCount + e] != dc_val(s, want[r].first, want[r].second, e))
                return "received row " + std::to_string(r) + " differs";
    }
    return "";
}

/* Combine: rank d's partial of a row is the row times d + 1; the result, their sum. */
std::string check_combine(incmoe_comm_t *comm, const Shrunk &s, const incmoe_req_t *dispatch,
                          const std::vector<float> &recv)
{
    auto got = dc_received(s, s.me);
    auto &part = harness::buffer<float>(std::max<size_t>(1, got.size()) * kCount);
    auto &out = harness::buffer<float>(kRows * kCount, -1.0f);
    for (size_t r = 0; r < got.size() * kCount; r++)
        part[r] = recv[r] * (float)(s.me + 1);
    incmoe_mr_t *mp, *mo;
    CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * sizeof(float), &mp));
    CHECK_OK(incmoe_mem_register(comm, out.data(), out.size() * sizeof(float), &mo));
    incmoe_combine_params_t p = dc_ref::combine_params(*dispatch, mp, mo, kCount);
    incmoe_req_t req;
    CHECK_OK(incmoe_combine(comm, &p, &req));
    CHECK_OK(incmoe_wait(comm, &req));
    for (size_t i = 0; i < kRows; i++)
        for (size_t e = 0; e < kCount; e++) {
            float want = 0;
            for (int d = 0; d < s.n; d++)
                if (dc_in_set(s.me, i, d, s.n))
                    want += dc_val(s, s.me, i, e) * (float)(d + 1);
            if (out[i * kCount + e] != want)
                return "combined row " + std::to_string(i) + " element " + std::to_string(e) +
                       ": " + std::to_string(out[i * kCount + e]) + ", want " +
                       std::to_string(want);
        }
    return "";
}

std::string check_dispatch_combine(incmoe_comm_t *comm, const Shrunk &s)
{
    const size_t words = INCMOE_SET_WORDS(s.n), nrecv = dc_received(s, s.me).size();
    auto &send = harness::buffer<float>(kRows * kCount);
    auto &recv = harness::buffer<float>(std::max<size_t>(1, nrecv) * kCount);
    std::vector<uint64_t> sets(kRows * words, 0);
    for (size_t i = 0; i < kRows; i++) {
        for (size_t e = 0; e < kCount; e++)
            send[i * kCount + e] = dc_val(s, s.me, i, e);
        for (int d = 0; d < s.n; d++)
            if (dc_in_set(s.me, i, d, s.n))
                sets[i * words + (size_t)d / 64] |= 1ull << (d % 64);
    }
    incmoe_mr_t *ms, *mr;
    CHECK_OK(incmoe_mem_register(comm, send.data(), send.size() * sizeof(float), &ms));
    CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size() * sizeof(float), &mr));
    incmoe_dispatch_params_t p = {};
    p.send_mr = ms;
    p.nrows = kRows;
    p.row_bytes = kCount * sizeof(float);
    p.sets = sets.data();
    p.recv_mr = mr;
    p.capacity = nrecv;
    incmoe_req_t req;
    CHECK_OK(incmoe_dispatch(comm, &p, &req));
    CHECK_OK(incmoe_wait(comm, &req));
    std::string err = check_received(comm, s, &req, recv);
    return err.empty() ? check_combine(comm, s, &req, recv) : err;
}

/* Every check on the shrunk communicator; "" when all hold. */
std::string work_on(incmoe_comm_t *comm, const Shrunk &s)
{
    std::string err = check_allreduce(comm, s);
    if (err.empty())
        err = check_allgather(comm, s);
    if (err.empty())
        err = check_dispatch_combine(comm, s);
    return err;
}

/* ------------------------------------------------------------------------ */
/* processes                                                                 */

/* Waits (at most 20 s) until process pid has ended, its sockets closed. */
bool await_gone(int pid)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return errno == ESRCH;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, 20000);
    close(fd);
    return r == 1;
}

/* What the ranks of one case share. */
struct Board {
    int pid[8];
    int victims_ready;
    int shrunk;       /* survivors whose shrink succeeded */
    int shrinks_sent; /* SHRINK messages handed to UCX (the hook) */
    double killed_at; /* inc_now_s() just before the first victim's _exit */
    double first_result[8];
};

class Shrink : public ::testing::TestWithParam<incmoe_algo_t>
{
  public:
    harness::SwitchProc sw;
    /* Each test's board, shared by its rank processes, and its job. */
    harness::SharedBoard<Board> shared;
    Board *b = shared.get();
    const unsigned long long job = harness::unique_job_id();
    void SetUp() override
    {
        ASSERT_TRUE(harness::switch_start(&sw, {"--timeout-ms", "1000"}));
    }
    void TearDown() override
    {
        int status = harness::switch_stop(&sw);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the switch crashed";
    }
    incmoe_status_t create(unsigned long long job, int rank, int n, incmoe_comm_t **comm)
    {
        harness::CommOptions opt;
        opt.algo = GetParam();
        opt.timeout_ms = kTimeoutMs;
        return harness::comm_create(sw.addr, job, rank, n, comm, opt);
    }
};

/* The survivors' ranks, ascending, of n without the victims. */
std::vector<int> survivors(int n, const std::vector<int> &victims)
{
    std::vector<int> out;
    for (int r = 0; r < n; r++)
        if (std::find(victims.begin(), victims.end(), r) == victims.end())
            out.push_back(r);
    return out;
}

/* A survivor once its old communicator failed (or at once, on request): shrink, check the new
   numbers, work on the new communicator; the time of its first result goes on the board. */
std::string shrink_and_work(incmoe_comm_t *comm, int rank, const std::vector<int> &olds, Board *b)
{
    incmoe_comm_t *fresh = nullptr;
    incmoe_status_t st = incmoe_comm_shrink(comm, &fresh);
    if (st != INCMOE_OK)
        return why(comm, st, "incmoe_comm_shrink");
    Shrunk s;
    s.olds = olds;
    s.n = (int)olds.size();
    s.me = (int)(std::find(olds.begin(), olds.end(), rank) - olds.begin());
    std::string err;
    if (incmoe_comm_rank(fresh) != s.me || incmoe_comm_nranks(fresh) != s.n)
        err = "shrunk to rank " + std::to_string(incmoe_comm_rank(fresh)) + " of " +
              std::to_string(incmoe_comm_nranks(fresh)) + ", want " + std::to_string(s.me) +
              " of " + std::to_string(s.n);
    if (err.empty())
        err = check_allreduce(fresh, s);
    b->first_result[rank] = inc_now_s();
    harness::bump(&b->shrunk);
    if (err.empty())
        err = work_on(fresh, s);
    if (err.empty())
        err = work_on(fresh, s); /* again: the new job's epochs go on */
    st = incmoe_comm_destroy(fresh);
    if (err.empty() && st != INCMOE_OK)
        err = "destroying the shrunk communicator: " + std::string(incmoe_strerror(st));
    harness::destroy_then_free(comm);
    return err;
}

/* Rank `rank` of n joins t's job and records its pid; the victims leave together after a first
   barrier, and the others' second barrier must fail for them: "" then, with *comm_p theirs,
   else why not. */
std::string join_then_lose(Shrink *t, int rank, int n, const std::vector<int> &victims,
                           incmoe_comm_t **comm_p)
{
    Board *b = t->b;
    harness::store(&b->pid[rank], (int)getpid());
    incmoe_comm_t *comm;
    incmoe_status_t st = t->create(t->job, rank, n, &comm);
    if (st != INCMOE_OK)
        return "create: " + std::string(incmoe_strerror(st));
    *comm_p = comm;
    CHECK_OK(harness::barrier_wait(comm));
    if (std::find(victims.begin(), victims.end(), rank) != victims.end()) {
        if (harness::bump(&b->victims_ready) == (int)victims.size())
            b->killed_at = inc_now_s();
        harness::await_at_least(&b->victims_ready, (int)victims.size());
        _exit(0);
    }
    st = harness::barrier_wait(comm);
    if (st != INCMOE_ERR_PEER_FAILED)
        return why(comm, st, "the barrier without the victims");
    return "";
}

/* The victims die together once the job formed; the survivors see their barrier fail, wait
   until the victims are gone, shrink and work. */
std::vector<std::string> lose_ranks(Shrink *t, int n, const std::vector<int> &victims)
{
    const std::vector<int> olds = survivors(n, victims);
    return harness::run_ranks(n, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        std::string err = join_then_lose(t, rank, n, victims, &comm);
        if (!err.empty())
            return err;
        for (int v : victims)
            if (!await_gone(harness::load(&t->b->pid[v])))
                return "victim " + std::to_string(v) + " never ended";
        return shrink_and_work(comm, rank, olds, t->b);
    });
}

/* The survivors' first results after the kill: printed, and bounded (a hang is caught); each
   survivor's result is "". */
void report(const char *what, int n, const std::vector<int> &olds, const Board *b,
            const std::vector<std::string> &res)
{
    for (int r : olds)
        EXPECT_EQ(res[r], "") << "rank " << r;
    double worst = 0;
    for (int r : olds)
        worst = std::max(worst, b->first_result[r] - b->killed_at);
    std::printf("[ shrink ] %s N=%d %s: survivors' first result %.0f ms after the kill\n", what, n,
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), worst * 1000);
    EXPECT_LT(worst, 2 * kTimeoutMs / 1000.0 + 5) << "the shrink took too long";
}

/* Ranks lost of n killed, the survivors shrink and work; their results and times reported. */
void lose_and_report(Shrink *t, const char *what, int n, const std::vector<int> &lost)
{
    auto res = lose_ranks(t, n, lost);
    report(what, n, survivors(n, lost), t->b, res);
}

TEST_P(Shrink, OneLostRankAtFour)
{
    harness::ExpectErrors errors_expected("rank 1 is killed");
    lose_and_report(this, "one lost", 4, {1});
}

/* The same at N=8, rank 5 lost (RELIABILITY.md's figure takes both sizes' printed times). */
TEST_P(Shrink, OneLostRankAtEight)
{
    harness::ExpectErrors errors_expected("rank 5 is killed");
    lose_and_report(this, "one lost", 8, {5});
}

TEST_P(Shrink, TwoLostRanksAtSix)
{
    harness::ExpectErrors errors_expected("ranks 0 and 3 are killed");
    lose_and_report(this, "two lost", 6, {0, 3});
}

/* Nobody lost: every rank asks, and keeps its number in the new job. */
TEST_P(Shrink, OnRequestWithNoFailure)
{
    const int n = 4;
    auto res = harness::run_ranks(n, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(job, rank, n, &comm);
        if (st != INCMOE_OK)
            return "create: " + std::string(incmoe_strerror(st));
        CHECK_OK(harness::barrier_wait(comm));
        b->killed_at = inc_now_s();
        return shrink_and_work(comm, rank, survivors(n, {}), b);
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* Rank 2 is lost; once the others shrank, a process comes back as rank 2 of the old job and
   is refused, with a reason. */
TEST_P(Shrink, LostRankThatComesBackIsRefused)
{
    harness::ExpectErrors errors_expected("rank 2 is killed, then comes back");
    const int n = 4;
    const std::vector<int> olds = survivors(n, {2});
    auto res = harness::run_ranks(n + 1, [&](int rank) -> std::string {
        if (rank == n) { /* the lost rank 2, back */
            if (!harness::await_at_least(&b->shrunk, n - 1))
                return "the survivors never shrank";
            incmoe_comm_t *comm = nullptr;
            incmoe_status_t st = create(job, 2, n, &comm);
            if (st == INCMOE_OK) {
                incmoe_comm_destroy(comm);
                return "the lost rank joined its old job again";
            }
            return st == INCMOE_ERR_JOB ? "" : "refused with " + std::string(incmoe_strerror(st));
        }
        harness::store(&b->pid[rank], (int)getpid());
        incmoe_comm_t *comm;
        incmoe_status_t st = create(job, rank, n, &comm);
        if (st != INCMOE_OK)
            return "create: " + std::string(incmoe_strerror(st));
        CHECK_OK(harness::barrier_wait(comm));
        if (rank == 2) {
            b->killed_at = inc_now_s();
            _exit(0);
        }
        st = harness::barrier_wait(comm);
        if (st != INCMOE_ERR_PEER_FAILED)
            return why(comm, st, "the barrier without rank 2");
        if (!await_gone(harness::load(&b->pid[2])))
            return "rank 2 never ended";
        return shrink_and_work(comm, rank, olds, b);
    });
    for (int r : {0, 1, 3, 4})
        EXPECT_EQ(res[r], "") << (r == 4 ? "the lost rank, back" : "rank " + std::to_string(r));
}

/* A shrink that must fail: "" when it failed with want, its reason containing names, within
   the bound; comm is destroyed. */
std::string expect_shrink_fails(incmoe_comm_t *comm, incmoe_status_t want, const std::string &names)
{
    double t0 = inc_now_s();
    incmoe_comm_t *fresh = nullptr;
    incmoe_status_t st = incmoe_comm_shrink(comm, &fresh);
    double took = inc_now_s() - t0;
    std::string text = harness::comm_text(comm);
    harness::destroy_then_free(comm);
    if (st == INCMOE_OK) {
        incmoe_comm_destroy(fresh);
        return "the shrink succeeded";
    }
    if (st != want || text.find(names) == std::string::npos)
        return "failed with " + std::string(incmoe_strerror(st)) + ": " + text;
    if (took > 2 * kTimeoutMs / 1000.0 + 3)
        return "failed only after " + std::to_string(took) + " s";
    return "";
}

/* Four ranks join t's job and lose rank 3 (join_then_lose); each survivor then runs body with
   its communicator.  Each rank's result. */
std::vector<std::string>
after_losing_rank3(Shrink *t, const std::function<std::string(int rank, incmoe_comm_t *comm)> &body)
{
    return harness::run_ranks(4, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        std::string err = join_then_lose(t, rank, 4, {3}, &comm);
        return err.empty() ? body(rank, comm) : err;
    });
}

/* Rank 3 is lost.  Rank 2 asks to shrink and is lost before the answer (it stops once its
   SHRINK went: the switch reads it, then finds rank 2 silent), while rank 1 has asked too and
   rank 0 not yet: the shrink fails on rank 1 with a reason naming rank 2, and on rank 0, which
   asks once rank 1's ended, with the same reason.  Rank 0 then kills rank 2. */
TEST_P(Shrink, SecondFailureDuringTheShrinkFailsItOnEverySurvivor)
{
    harness::ExpectErrors errors_expected("rank 3 is killed, then rank 2 during the shrink");
    g_shrinks_sent = &b->shrinks_sent;
    auto res = after_losing_rank3(this, [&](int rank, incmoe_comm_t *comm) -> std::string {
        if (rank == 2) {
            g_stop_after_shrink = true;
            incmoe_comm_t *fresh = nullptr;
            incmoe_comm_shrink(comm, &fresh); /* stopped inside, killed by rank 0 */
            return "rank 2 was not stopped";
        }
        if (rank == 1) {
            harness::await_at_least(&b->shrinks_sent, 1); /* rank 2's */
            std::string err = expect_shrink_fails(comm, INCMOE_ERR_PEER_FAILED, "rank 2 ");
            harness::bump(&b->shrunk);
            return err;
        }
        harness::await_at_least(&b->shrunk, 1, 4 * kTimeoutMs / 1000.0 + 10);
        std::string err = expect_shrink_fails(comm, INCMOE_ERR_PEER_FAILED, "rank 2 ");
        kill(harness::load(&b->pid[2]), SIGKILL);
        return err;
    });
    g_shrinks_sent = nullptr;
    for (int r = 0; r < 2; r++)
        EXPECT_EQ(res[r], "") << "rank " << r;
}

/* Rank 3 is lost; ranks 0 and 1 ask to shrink, rank 2 lives on but never asks: after the
   job's timeout the shrink fails on ranks 0 and 1 with INCMOE_ERR_TIMEOUT naming rank 2. */
TEST_P(Shrink, MemberThatNeverAsksFailsTheShrinkAfterTheTimeout)
{
    harness::ExpectErrors errors_expected("rank 3 is killed, rank 2 never asks to shrink");
    auto res = after_losing_rank3(this, [&](int rank, incmoe_comm_t *comm) -> std::string {
        if (rank == 2) { /* alive (its communicator heartbeats), until the others are done */
            harness::await_at_least(&b->shrunk, 2, 4 * kTimeoutMs / 1000.0 + 10);
            harness::destroy_then_free(comm);
            return "";
        }
        std::string err = expect_shrink_fails(comm, INCMOE_ERR_TIMEOUT, "rank(s) 2 never asked");
        harness::bump(&b->shrunk);
        return err;
    });
    for (int r = 0; r < 3; r++)
        EXPECT_EQ(res[r], "") << "rank " << r;
}

/* A connection asks to shrink a job it is not a member of (as a lost rank that came back and
   joined some job would): refused with a reason; asking for its own job of one rank works. */
TEST(ShrinkRefusal, ShrinkOfAnotherJobIsRefusedWithAReason)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, {"--timeout-ms", "1000"}));
    const uint64_t job = harness::unique_job_id(), other = job + 1;
    {
        RawClient raw;
        ASSERT_TRUE(raw.connect(sw.addr));
        raw.join(job, 0, 1);
        RawMsg ack;
        ASSERT_TRUE(raw.wait_for(WIRE_MSG_JOIN_ACK, &ack, 5000));
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_SHRINK, other);
        raw.send(h);
        RawMsg refused;
        ASSERT_TRUE(raw.wait_for(WIRE_MSG_SHRINK_ACK, &refused, 5000));
        EXPECT_EQ(refused.hdr.status, INCMOE_ERR_PROTOCOL);
        ASSERT_EQ(refused.payload.size(), sizeof(inc_wire_shrink_ack));
        inc_wire_shrink_ack a;
        memcpy(&a, refused.payload.data(), sizeof(a));
        EXPECT_NE(std::string(a.reason).find(std::to_string(other)), std::string::npos) << a.reason;
        raw.received.clear();
        inc_wire_hdr_init(&h, WIRE_MSG_SHRINK, job);
        raw.send(h);
        RawMsg granted;
        ASSERT_TRUE(raw.wait_for(WIRE_MSG_SHRINK_ACK, &granted, 5000));
        EXPECT_EQ(granted.hdr.status, INCMOE_OK);
        memcpy(&a, granted.payload.data(), sizeof(a));
        EXPECT_EQ(a.rank, 0u);
        EXPECT_EQ(a.nranks, 1u);
        EXPECT_NE(a.job, job);
    }
    int status = harness::switch_stop(&sw);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the switch crashed";
}

std::string algo_name(const ::testing::TestParamInfo<incmoe_algo_t> &info)
{
    return info.param == INCMOE_ALGO_INC ? "inc" : info.param == INCMOE_ALGO_RING ? "ring" : "a2a";
}

INSTANTIATE_TEST_SUITE_P(Algos, Shrink,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_name);

} // namespace
