/*
 * test_moe_fifo.cc - the device-side posting FIFO: ordering, counters and
 * error propagation under contention, with a fake transport that completes
 * collectives from its own thread after random delays; dispatch and combine
 * (the result in the producer's block before its ticket, a combine's
 * dispatch by ticket); then through a real communicator and switch.
 */
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"

#include "base/wire.h"
#include "plugin/counter.h"
#include "plugin/fifo.h"

namespace
{

/* A transport that records what the proxy posted and retires it later, in order per stream. */
struct FakeNet {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<uint64_t>> posted_offsets{INC_STREAM_COUNT};
    uint64_t epoch[INC_STREAM_COUNT] = {};
    uint64_t retired[INC_STREAM_COUNT] = {};
    int fail_post_at = -1; /* fail the n-th post (0-based), -1 never */
    int fail_wait_at = -1;
    int posts = 0;
    bool stop = false;
    std::thread retirer;
    /* Dispatch and combine. */
    std::map<uint64_t, uint64_t> dispatch_rows; /* dispatch epoch -> its nrows */
    uint64_t short_dispatch = 0;    /* this dispatch epoch fails for capacity (0: none) */
    std::vector<uint64_t> released; /* dispatch epochs released */
    std::vector<uint64_t> combined; /* per combine: the dispatch epoch it named */
    int combines_too_early = 0;     /* combines posted before their dispatch retired */

    FakeNet()
    {
        retirer = std::thread([this] {
            std::mt19937 rng(7);
            std::unique_lock<std::mutex> lk(mu);
            while (!stop) {
                bool any = false;
                for (int s = 0; s < INC_STREAM_COUNT; s++) {
                    if (retired[s] < epoch[s] && rng() % 2 == 0) {
                        retired[s]++;
                        any = true;
                    }
                }
                if (any)
                    cv.notify_all();
                lk.unlock();
                if (rng() % 8 == 0)
                    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
                else
                    std::this_thread::yield();
                lk.lock();
            }
        });
    }
    ~FakeNet()
    {
        {
            std::lock_guard<std::mutex> lk(mu);
            stop = true;
        }
        retirer.join();
    }

    static incmoe_status_t post(void *ctx, const incmoe_fifo_trigger_t *t,
                                const incmoe_req_t *dispatch, incmoe_req_t *req_p)
    {
        FakeNet *n = static_cast<FakeNet *>(ctx);
        std::lock_guard<std::mutex> lk(n->mu);
        if (n->posts++ == n->fail_post_at)
            return INCMOE_ERR_TRANSPORT;
        int s = incmoe_fifo_op_stream((incmoe_fifo_op_t)t->desc.op);
        n->posted_offsets[s].push_back(t->desc.offset);
        req_p->stream = (incmoe_stream_t)s;
        req_p->epoch = ++n->epoch[s];
        if (s == INCMOE_STREAM_DISPATCH)
            n->dispatch_rows[req_p->epoch] = t->desc.length;
        if (s == INCMOE_STREAM_COMBINE) {
            n->combined.push_back(dispatch->epoch);
            if (n->retired[INCMOE_STREAM_DISPATCH] < dispatch->epoch)
                n->combines_too_early++;
        }
        return INCMOE_OK;
    }
    static incmoe_status_t wait(void *ctx, const incmoe_req_t *req)
    {
        FakeNet *n = static_cast<FakeNet *>(ctx);
        std::unique_lock<std::mutex> lk(n->mu);
        if (n->fail_wait_at >= 0 && (int)req->epoch == n->fail_wait_at)
            return INCMOE_ERR_PEER_FAILED;
        n->cv.wait(lk, [&] { return n->retired[req->stream] >= req->epoch; });
        if (req->stream == INCMOE_STREAM_DISPATCH && req->epoch == n->short_dispatch)
            return INCMOE_ERR_NO_MEMORY;
        return INCMOE_OK;
    }
    /* A dispatch of m rows receives 3m + 1; received row i comes from (rank i % 5, row i). */
    static incmoe_status_t dispatch_result(void *ctx, const incmoe_req_t *req,
                                           incmoe_fifo_dispatch_t *block)
    {
        FakeNet *n = static_cast<FakeNet *>(ctx);
        std::lock_guard<std::mutex> lk(n->mu);
        uint64_t r = 3 * n->dispatch_rows[req->epoch] + 1;
        block->nrecv = r;
        if (req->epoch == n->short_dispatch) {
            n->released.push_back(req->epoch);
            return INCMOE_ERR_NO_MEMORY;
        }
        for (uint64_t i = 0; i < r && i < block->source_rows; i++) {
            block->source[2 * i] = (uint32_t)(i % 5);
            block->source[2 * i + 1] = (uint32_t)i;
        }
        return INCMOE_OK;
    }
};

const fifo_transport_t fake_transport = {FakeNet::post, FakeNet::wait, FakeNet::dispatch_result};

incmoe_fifo_trigger_t trig(incmoe_fifo_op_t op, uint64_t offset)
{
    incmoe_fifo_trigger_t t;
    memset(&t, 0, sizeof(t));
    t.desc.op = op;
    t.desc.offset = offset;
    return t;
}

const incmoe_fifo_op_t kOps[3] = {INCMOE_FIFO_OP_ALLGATHER, INCMOE_FIFO_OP_REDUCESCATTER,
                                  INCMOE_FIFO_OP_BARRIER};

} // namespace

/* A test of the FIFO over a fake transport: net, whose failures the test sets before create,
   and the FIFO create makes over it (the test destroys it, checking the status). */
class MoeFifo : public ::testing::Test
{
  protected:
    FakeNet net;
    incmoe_fifo_t *f = nullptr;

    incmoe_status_t create(uint32_t capacity)
    {
        return fifo_create_with(&fake_transport, &net, capacity, &f);
    }
};

/* The descriptor is 64 bytes, and the trigger and the slot keep the layout programs built
   before dispatch and combine use: the dispatch block shares valid[]'s word. */
TEST_F(MoeFifo, DescriptorIs64BytesAndTheSlotKeepsItsLayout)
{
    EXPECT_EQ(sizeof(incmoe_fifo_desc_t), 64u);
    EXPECT_EQ(sizeof(incmoe_fifo_trigger_t), 72u);
    EXPECT_EQ(offsetof(incmoe_fifo_trigger_t, valid), 64u);
    EXPECT_EQ(offsetof(incmoe_fifo_trigger_t, dispatch), 64u);
    EXPECT_EQ(sizeof(incmoe_fifo_slot_t), 88u);
    EXPECT_EQ(offsetof(incmoe_fifo_slot_t, trigger), 16u);
}

TEST_F(MoeFifo, RejectsBadCapacityAndOp)
{
    EXPECT_EQ(create(3), INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(create(0), INCMOE_ERR_INVALID_ARG);
    ASSERT_EQ(create(4), INCMOE_OK);
    uint64_t ticket = 0;
    auto bad = trig((incmoe_fifo_op_t)99, 0);
    EXPECT_EQ(incmoe_fifo_push(f, &bad, &ticket, 1000), INCMOE_ERR_INVALID_ARG);
    auto blockless = trig(INCMOE_FIFO_OP_DISPATCH, 0); /* a dispatch needs its block */
    EXPECT_EQ(incmoe_fifo_push(f, &blockless, &ticket, 1000), INCMOE_ERR_INVALID_ARG);
    incmoe_fifo_device_t dev;
    ASSERT_EQ(incmoe_fifo_device(f, &dev), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_dev_try_push(&dev, &blockless, &ticket), INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(incmoe_fifo_completed(f, INCMOE_STREAM_DISPATCH), 0u);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_create(nullptr, 4, &f), INCMOE_ERR_INVALID_ARG);
}

namespace
{

/* A dispatch of nrows rows whose result goes to *block. */
incmoe_fifo_trigger_t dispatch_trig(uint64_t nrows, incmoe_fifo_dispatch_t *block)
{
    auto t = trig(INCMOE_FIFO_OP_DISPATCH, 0);
    t.desc.length = nrows;
    t.dispatch = block;
    return t;
}

/* A combine of the dispatch of that ticket. */
incmoe_fifo_trigger_t combine_trig(uint64_t dispatch_ticket)
{
    auto t = trig(INCMOE_FIFO_OP_COMBINE, dispatch_ticket);
    t.desc.dtype = INCMOE_FLOAT32;
    t.desc.block_stride = 4;
    return t;
}

} // namespace

/* Each dispatch's R and source table are in its block once its ticket is reached (the
   producer reads them after its wait and nothing else: TSan sees a late write), and a combine
   pushed at once behind its dispatch names that dispatch's request and is posted only after
   it completed. */
TEST_F(MoeFifo, DispatchResultAndCombineByTicket)
{
    const int M = 300;
    ASSERT_EQ(create(8), INCMOE_OK);
    std::vector<incmoe_fifo_dispatch_t> blocks(M);
    std::vector<std::vector<uint32_t>> sources(M);
    int errors = 0;
    uint64_t last_combine = 0;
    for (int i = 0; i < M; i++) {
        uint64_t nrows = (uint64_t)(i % 7);
        sources[i].assign(2 * 8, UINT32_MAX);
        blocks[i] = {};
        blocks[i].source = sources[i].data();
        blocks[i].source_rows = 8;
        blocks[i].status = -12345;
        auto d = dispatch_trig(nrows, &blocks[i]);
        auto c = combine_trig((uint64_t)i + 1);
        uint64_t td = 0;
        if (incmoe_fifo_push(f, &d, &td, 10000) != INCMOE_OK || td != (uint64_t)i + 1 ||
            incmoe_fifo_push(f, &c, &last_combine, 10000) != INCMOE_OK)
            errors++;
        /* Every third dispatch: its result once its ticket is reached. */
        if (i % 3 != 0)
            continue;
        if (incmoe_fifo_wait(f, INCMOE_STREAM_DISPATCH, td, 10000) != INCMOE_OK) {
            errors++;
            continue;
        }
        uint64_t r = 3 * nrows + 1;
        if (blocks[i].status != INCMOE_OK || blocks[i].nrecv != r)
            errors++;
        for (uint64_t k = 0; k < 8; k++) {
            uint32_t want_rank = k < r ? (uint32_t)(k % 5) : UINT32_MAX;
            uint32_t want_row = k < r ? (uint32_t)k : UINT32_MAX;
            if (sources[i][2 * k] != want_rank || sources[i][2 * k + 1] != want_row)
                errors++;
        }
    }
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_COMBINE, last_combine, 10000), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_DISPATCH, M, 10000), INCMOE_OK);
    for (int i = 0; i < M; i++)
        ASSERT_EQ(blocks[i].nrecv, 3 * (uint64_t)(i % 7) + 1) << "dispatch " << i;
    {
        std::lock_guard<std::mutex> lk(net.mu);
        EXPECT_EQ(net.combines_too_early, 0);
        ASSERT_EQ(net.combined.size(), (size_t)M);
        for (int i = 0; i < M; i++)
            ASSERT_EQ(net.combined[i], (uint64_t)i + 1) << "combine " << i;
        EXPECT_TRUE(net.released.empty());
    }
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
}

/* A dispatch short of capacity completes with its status and R, is released, and leaves the
   FIFO usable; a combine naming it then fails the FIFO. */
TEST_F(MoeFifo, DispatchShortOfCapacityCompletesWithItsStatus)
{
    net.short_dispatch = 2;
    ASSERT_EQ(create(8), INCMOE_OK);
    incmoe_fifo_dispatch_t blocks[3] = {};
    uint64_t t = 0;
    for (int i = 0; i < 3; i++) {
        auto d = dispatch_trig(4, &blocks[i]);
        ASSERT_EQ(incmoe_fifo_push(f, &d, &t, 10000), INCMOE_OK);
    }
    ASSERT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_DISPATCH, 3, 10000), INCMOE_OK);
    EXPECT_EQ(blocks[0].status, INCMOE_OK);
    EXPECT_EQ(blocks[1].status, INCMOE_ERR_NO_MEMORY);
    EXPECT_EQ(blocks[1].nrecv, 13u); /* what this rank would have received */
    EXPECT_EQ(blocks[2].status, INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_error(f), INCMOE_OK);
    auto c1 = combine_trig(1), c3 = combine_trig(3);
    ASSERT_EQ(incmoe_fifo_push(f, &c1, &t, 10000), INCMOE_OK);
    ASSERT_EQ(incmoe_fifo_push(f, &c3, &t, 10000), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_COMBINE, 2, 10000), INCMOE_OK);
    {
        std::lock_guard<std::mutex> lk(net.mu);
        EXPECT_EQ(net.released, std::vector<uint64_t>{2});
    }
    auto c2 = combine_trig(2);
    ASSERT_EQ(incmoe_fifo_push(f, &c2, &t, 10000), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_COMBINE, 3, 10000), INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_ERR_INVALID_ARG);
}

/* A combine naming a dispatch this FIFO never posted fails the FIFO, posting nothing. */
TEST_F(MoeFifo, CombineOfAnUnknownDispatchFailsTheFifo)
{
    for (uint64_t ticket : {0ull, 2ull}) {
        FakeNet net;
        incmoe_fifo_t *f = nullptr;
        ASSERT_EQ(fifo_create_with(&fake_transport, &net, 8, &f), INCMOE_OK);
        incmoe_fifo_dispatch_t block = {};
        auto d = dispatch_trig(1, &block);
        auto c = combine_trig(ticket);
        uint64_t t;
        ASSERT_EQ(incmoe_fifo_push(f, &d, &t, 10000), INCMOE_OK);
        ASSERT_EQ(incmoe_fifo_push(f, &c, &t, 10000), INCMOE_OK);
        EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_COMBINE, 1, 10000), INCMOE_ERR_INVALID_ARG)
            << "ticket " << ticket;
        {
            std::lock_guard<std::mutex> lk(net.mu);
            EXPECT_TRUE(net.combined.empty());
        }
        EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_ERR_INVALID_ARG);
    }
}

/* Three producers, one per stream, on a FIFO much smaller than the work, so
   producers keep finding it full; every stream must arrive whole and in order. */
class MoeFifoContention : public ::testing::TestWithParam<uint32_t>
{
};

TEST_P(MoeFifoContention, StreamsArriveInOrderAndCountersAreExact)
{
    const uint32_t cap = GetParam();
    const int M = 3000;
    FakeNet net;
    incmoe_fifo_t *f = nullptr;
    ASSERT_EQ(fifo_create_with(&fake_transport, &net, cap, &f), INCMOE_OK);
    std::vector<std::thread> producers;
    std::atomic<int> errors{0};
    for (int p = 0; p < 3; p++) {
        producers.emplace_back([&, p] {
            incmoe_stream_t s = incmoe_fifo_op_stream(kOps[p]);
            for (int i = 1; i <= M; i++) {
                auto t = trig(kOps[p], (uint64_t)i);
                uint64_t ticket = 0;
                if (incmoe_fifo_push(f, &t, &ticket, 10000) != INCMOE_OK || ticket != (uint64_t)i)
                    errors++;
                /* Now and then wait for completion, as a role worker does. */
                if (i % 97 == 0 && incmoe_fifo_wait(f, s, ticket, 10000) != INCMOE_OK)
                    errors++;
                if (incmoe_fifo_completed(f, s) > ticket)
                    errors++; /* a counter never runs ahead of what was pushed */
            }
            if (incmoe_fifo_wait(f, s, M, 10000) != INCMOE_OK)
                errors++;
        });
    }
    for (auto &t : producers)
        t.join();
    EXPECT_EQ(errors.load(), 0);
    for (int p = 0; p < 3; p++) {
        incmoe_stream_t s = incmoe_fifo_op_stream(kOps[p]);
        EXPECT_EQ(incmoe_fifo_completed(f, s), (uint64_t)M);
        std::lock_guard<std::mutex> lk(net.mu);
        ASSERT_EQ(net.posted_offsets[s].size(), (size_t)M);
        for (int i = 0; i < M; i++)
            ASSERT_EQ(net.posted_offsets[s][i], (uint64_t)(i + 1)) << "stream " << s;
    }
    EXPECT_EQ(incmoe_fifo_completed(f, INCMOE_STREAM_ALLREDUCE), 0u);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
}

INSTANTIATE_TEST_SUITE_P(Capacities, MoeFifoContention, ::testing::Values(2u, 8u, 256u));

/* Many producers on one stream, serialised by a ticket the way the reduce
   workers serialise their ReduceScatter parts. */
TEST_F(MoeFifo, SerialisedProducersOfOneStreamKeepTheirOrder)
{
    const int P = 4, M = 1500;
    ASSERT_EQ(create(4), INCMOE_OK);
    std::atomic<uint64_t> turn{0};
    std::vector<std::thread> th;
    std::atomic<int> errors{0};
    for (int p = 0; p < P; p++) {
        th.emplace_back([&, p] {
            for (int i = 0; i < M; i++) {
                uint64_t mine = (uint64_t)i * P + p;
                while (turn.load(std::memory_order_acquire) != mine)
                    std::this_thread::yield();
                auto t = trig(INCMOE_FIFO_OP_REDUCESCATTER, mine);
                uint64_t ticket;
                if (incmoe_fifo_push(f, &t, &ticket, 10000) != INCMOE_OK || ticket != mine + 1)
                    errors++;
                turn.store(mine + 1, std::memory_order_release);
                if (incmoe_fifo_wait(f, INCMOE_STREAM_REDUCESCATTER, ticket, 10000) != INCMOE_OK)
                    errors++;
            }
        });
    }
    for (auto &t : th)
        t.join();
    EXPECT_EQ(errors.load(), 0);
    std::lock_guard<std::mutex> lk(net.mu);
    auto &v = net.posted_offsets[INCMOE_STREAM_REDUCESCATTER];
    ASSERT_EQ(v.size(), (size_t)P * M);
    for (size_t i = 0; i < v.size(); i++)
        ASSERT_EQ(v[i], i);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
}

TEST_F(MoeFifo, PostFailureReachesEveryWaiterWithoutHanging)
{
    net.fail_post_at = 5;
    ASSERT_EQ(create(8), INCMOE_OK);
    uint64_t last = 0;
    incmoe_status_t st = INCMOE_OK;
    for (int i = 0; i < 20 && st == INCMOE_OK; i++) {
        auto t = trig(INCMOE_FIFO_OP_ALLGATHER, i);
        st = incmoe_fifo_push(f, &t, &last, 2000);
    }
    /* Either a later push or the wait reports the transport's error. */
    if (st == INCMOE_OK)
        st = incmoe_fifo_wait(f, INCMOE_STREAM_ALLGATHER, last, 5000);
    EXPECT_EQ(st, INCMOE_ERR_TRANSPORT);
    EXPECT_EQ(incmoe_fifo_error(f), INCMOE_ERR_TRANSPORT);
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_ALLGATHER, 20, 5000), INCMOE_ERR_TRANSPORT);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_ERR_TRANSPORT);
}

TEST_F(MoeFifo, CompletionFailureReachesWaiters)
{
    net.fail_wait_at = 3;
    ASSERT_EQ(create(8), INCMOE_OK);
    uint64_t ticket = 0;
    for (int i = 0; i < 5; i++) {
        auto t = trig(INCMOE_FIFO_OP_BARRIER, i);
        ASSERT_EQ(incmoe_fifo_push(f, &t, &ticket, 2000), INCMOE_OK);
    }
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_BARRIER, 5, 5000), INCMOE_ERR_PEER_FAILED);
    EXPECT_LE(incmoe_fifo_completed(f, INCMOE_STREAM_BARRIER), 2u);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_ERR_PEER_FAILED);
}

TEST_F(MoeFifo, WaitTimesOutWhenNothingCompletes)
{
    ASSERT_EQ(create(8), INCMOE_OK);
    /* Ticket 1 was never pushed: the counter cannot reach it. */
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_ALLGATHER, 1, 50), INCMOE_ERR_TIMEOUT);
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
}

/* Through a real switch: two ranks post AllGathers and ReduceScatters via the FIFO. */
TEST_F(MoeFifo, RealCommunicatorAllGatherAndReduceScatter)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    const int N = 2;
    const size_t blk = 4096; /* bytes per block */
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        N,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            if (harness::comm_create(sw.addr, job, rank, N, &comm) != INCMOE_OK)
                return "comm_create failed";
            std::vector<float> ag(N * blk / 4, -1.0f), rs(N * blk / 4);
            for (size_t i = 0; i < blk / 4; i++)
                ag[rank * blk / 4 + i] = rank * 1000.0f + i;
            for (int s = 0; s < N; s++)
                for (size_t i = 0; i < blk / 4; i++)
                    rs[s * blk / 4 + i] = (float)(rank + 1) * (s + 1);
            incmoe_mr_t *agm, *rsm;
            incmoe_mem_register(comm, ag.data(), ag.size() * 4, &agm);
            incmoe_mem_register(comm, rs.data(), rs.size() * 4, &rsm);
            incmoe_fifo_t *f = nullptr;
            /* A failure may leave collectives in flight, which own their ranges until
               incmoe_comm_destroy returns: destroy before ag and rs go. */
            auto fail = [&](const std::string &why) {
                if (f != nullptr)
                    incmoe_fifo_destroy(f);
                incmoe_comm_destroy(comm);
                return why;
            };
            if (incmoe_fifo_create(comm, 16, &f) != INCMOE_OK)
                return fail("fifo_create failed");
            size_t valid[N] = {blk, blk / 2}; /* rank 1 owns half a block */
            incmoe_fifo_trigger_t t;
            memset(&t, 0, sizeof(t));
            t.desc.op = INCMOE_FIFO_OP_ALLGATHER;
            t.desc.send_mr = (uint64_t)(uintptr_t)agm;
            t.desc.send_offset = rank * blk;
            t.desc.recv_mr = (uint64_t)(uintptr_t)agm;
            t.desc.block_stride = blk;
            t.desc.length = blk;
            t.valid = valid;
            uint64_t tk_ag, tk_rs, tk_b;
            if (incmoe_fifo_push(f, &t, &tk_ag, 5000) != INCMOE_OK)
                return fail("push AG failed");
            memset(&t, 0, sizeof(t));
            t.desc.op = INCMOE_FIFO_OP_REDUCESCATTER;
            t.desc.dtype = INCMOE_FLOAT32;
            t.desc.send_mr = (uint64_t)(uintptr_t)rsm;
            t.desc.recv_mr = (uint64_t)(uintptr_t)rsm;
            t.desc.recv_offset = rank * blk;
            t.desc.block_stride = blk;
            t.desc.length = blk;
            if (incmoe_fifo_push(f, &t, &tk_rs, 5000) != INCMOE_OK)
                return fail("push RS failed");
            memset(&t, 0, sizeof(t));
            t.desc.op = INCMOE_FIFO_OP_BARRIER;
            if (incmoe_fifo_push(f, &t, &tk_b, 5000) != INCMOE_OK)
                return fail("push barrier failed");
            if (incmoe_fifo_wait(f, INCMOE_STREAM_ALLGATHER, tk_ag, 10000) != INCMOE_OK ||
                incmoe_fifo_wait(f, INCMOE_STREAM_REDUCESCATTER, tk_rs, 10000) != INCMOE_OK ||
                incmoe_fifo_wait(f, INCMOE_STREAM_BARRIER, tk_b, 10000) != INCMOE_OK)
                return fail("wait failed");
            for (int s = 0; s < N; s++)
                for (size_t i = 0; i < valid[s] / 4; i++)
                    if (ag[s * blk / 4 + i] != s * 1000.0f + i)
                        return fail("AllGather block " + std::to_string(s) + " wrong at " +
                                    std::to_string(i));
            /* Rank r's shard: sum over ranks q of (q+1)*(r+1) = 3*(r+1) for N=2. */
            for (size_t i = 0; i < blk / 4; i++)
                if (rs[rank * blk / 4 + i] != 3.0f * (rank + 1))
                    return fail("ReduceScatter wrong at " + std::to_string(i));
            incmoe_status_t fst = incmoe_fifo_destroy(f);
            f = nullptr;
            if (fst != INCMOE_OK)
                return fail("fifo_destroy reported an error");
            incmoe_mem_deregister(comm, agm);
            incmoe_mem_deregister(comm, rsm);
            incmoe_comm_destroy(comm);
            return "";
        },
        60);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

namespace
{

/* The sets of rank s's rows in DispatchAndCombineThroughTheFifo: every rank derives them
   alike.  Some rows go nowhere, some only to their owner, some everywhere. */
std::vector<uint64_t> fifo_test_sets(int s, int N, int T)
{
    std::mt19937 rng(99 + s);
    std::vector<uint64_t> sets(T);
    for (int i = 0; i < T; i++) {
        int kind = (int)(rng() % 4);
        sets[i] = kind == 0 ? 0 : kind == 1 ? (1ull << s) : kind == 2 ? (1ull << N) - 1 : rng();
        sets[i] &= (1ull << N) - 1;
    }
    return sets;
}

class MoeFifoDc : public ::testing::TestWithParam<incmoe_algo_t>
{
};

} // namespace

/* Through a real communicator: a dispatch and its combine pushed back to back on the FIFO.
   Each rank's received rows, source table and combined results against what every rank
   derives from the others' sets (the sums are of small integers: exact). */
TEST_P(MoeFifoDc, DispatchAndCombineThroughTheFifo)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    const int N = 3, T = 9, W = 4; /* W floats a row */
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        N,
        [&](int rank) -> std::string {
            harness::CommOptions opt;
            opt.algo = GetParam();
            incmoe_comm_t *comm;
            incmoe_status_t st = harness::comm_create(sw.addr, job, rank, N, &comm, opt);
            if (st != INCMOE_OK)
                return std::string("comm_create: ") + incmoe_strerror(st);
            std::vector<float> rows(T * W), recv(N * T * W, -1.0f), partial(N * T * W),
                out(T * W, -1.0f);
            for (int i = 0; i < T; i++)
                for (int j = 0; j < W; j++)
                    rows[i * W + j] = (float)(rank * 100 + i * 10 + j);
            std::vector<uint64_t> mine = fifo_test_sets(rank, N, T);
            incmoe_mr_t *rows_mr, *recv_mr, *part_mr, *out_mr;
            incmoe_mem_register(comm, rows.data(), rows.size() * 4, &rows_mr);
            incmoe_mem_register(comm, recv.data(), recv.size() * 4, &recv_mr);
            incmoe_mem_register(comm, partial.data(), partial.size() * 4, &part_mr);
            incmoe_mem_register(comm, out.data(), out.size() * 4, &out_mr);
            incmoe_fifo_t *f;
            if (incmoe_fifo_create(comm, 16, &f) != INCMOE_OK)
                return "fifo_create failed";
            std::vector<uint32_t> source(2 * N * T, UINT32_MAX);
            incmoe_fifo_dispatch_t block = {};
            block.sets = mine.data();
            block.source = source.data();
            block.source_rows = N * T;
            incmoe_fifo_trigger_t t;
            memset(&t, 0, sizeof(t));
            t.desc.op = INCMOE_FIFO_OP_DISPATCH;
            t.desc.send_mr = (uint64_t)(uintptr_t)rows_mr;
            t.desc.recv_mr = (uint64_t)(uintptr_t)recv_mr;
            t.desc.block_stride = W * 4;
            t.desc.length = T;
            t.desc.offset = N * T; /* capacity */
            t.dispatch = &block;
            uint64_t td = 0, tc = 0;
            std::string err;
            if (incmoe_fifo_push(f, &t, &td, 5000) != INCMOE_OK)
                err = "push dispatch failed";
            st = incmoe_fifo_wait(f, INCMOE_STREAM_DISPATCH, td, 20000);
            if (err.empty() && st != INCMOE_OK)
                err = std::string("dispatch: ") + incmoe_strerror(st);
            /* The expected received rows: every rank's rows whose set holds this rank. */
            size_t R = 0;
            for (int s = 0; s < N && err.empty(); s++) {
                std::vector<uint64_t> sets = fifo_test_sets(s, N, T);
                for (int i = 0; i < T && err.empty(); i++) {
                    if (!((sets[i] >> rank) & 1))
                        continue;
                    if (source[2 * R] != (uint32_t)s || source[2 * R + 1] != (uint32_t)i)
                        err = "source table wrong at " + std::to_string(R);
                    for (int j = 0; j < W && err.empty(); j++)
                        if (recv[R * W + j] != (float)(s * 100 + i * 10 + j))
                            err = "received row " + std::to_string(R) + " wrong";
                    R++;
                }
            }
            if (err.empty() && (block.status != INCMOE_OK || block.nrecv != R))
                err = "block: status " + std::to_string(block.status) + ", R " +
                      std::to_string(block.nrecv) + " (expected " + std::to_string(R) + ")";
            if (err.empty()) {
                /* This rank's partial of a received row: the row times (rank + 1). */
                for (size_t i = 0; i < R * W; i++)
                    partial[i] = recv[i] * (float)(rank + 1);
                memset(&t, 0, sizeof(t));
                t.desc.op = INCMOE_FIFO_OP_COMBINE;
                t.desc.dtype = INCMOE_FLOAT32;
                t.desc.redop = INCMOE_SUM;
                t.desc.send_mr = (uint64_t)(uintptr_t)part_mr;
                t.desc.recv_mr = (uint64_t)(uintptr_t)out_mr;
                t.desc.block_stride = W;
                t.desc.offset = td;
                if (incmoe_fifo_push(f, &t, &tc, 5000) != INCMOE_OK ||
                    (st = incmoe_fifo_wait(f, INCMOE_STREAM_COMBINE, tc, 20000)) != INCMOE_OK)
                    err = std::string("combine: ") + incmoe_strerror(st);
            }
            for (int i = 0; i < T && err.empty(); i++) {
                float factor = 0; /* sum over the set of (d + 1) */
                for (int d = 0; d < N; d++)
                    if ((mine[i] >> d) & 1)
                        factor += (float)(d + 1);
                for (int j = 0; j < W && err.empty(); j++)
                    if (out[i * W + j] != rows[i * W + j] * factor)
                        err = "combined row " + std::to_string(i) + " is " +
                              std::to_string(out[i * W + j]) + ", expected " +
                              std::to_string(rows[i * W + j] * factor);
            }
            incmoe_status_t fst = incmoe_fifo_destroy(f);
            if (err.empty() && fst != INCMOE_OK)
                err = std::string("fifo_destroy: ") + incmoe_strerror(fst);
            incmoe_mem_deregister(comm, rows_mr);
            incmoe_mem_deregister(comm, recv_mr);
            incmoe_mem_deregister(comm, part_mr);
            incmoe_mem_deregister(comm, out_mr);
            incmoe_comm_destroy(comm);
            return err;
        },
        60);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeFifoDc,
                         ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING, INCMOE_ALGO_A2A),
                         algo_param_name);

/* The shared block comes from the allocator hook, and a producer pushing
   through the plain-old-data device handle (the code a GPU block runs) is
   drained and completed like a host push. */
TEST_F(MoeFifo, DeviceHandlePushThroughAllocatorHook)
{
    struct Hook {
        int allocs = 0, frees = 0;
        void *last = nullptr;
    } hook;
    incmoe_fifo_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask =
        INCMOE_FIFO_PARAM_CAPACITY | INCMOE_FIFO_PARAM_ALLOCATOR | INCMOE_FIFO_PARAM_IDLE_US;
    p.capacity = 4;
    p.idle_us = 100; /* device pushes cannot wake the proxy: it polls */
    p.allocator.ctx = &hook;
    p.allocator.alloc = [](void *ctx, size_t bytes) -> void * {
        Hook *h = static_cast<Hook *>(ctx);
        h->allocs++;
        h->last = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        return h->last;
    };
    p.allocator.free = [](void *ctx, void *ptr) {
        Hook *h = static_cast<Hook *>(ctx);
        if (ptr == h->last)
            h->frees++;
        free(ptr);
    };
    ASSERT_EQ(fifo_create_full(&fake_transport, &net, &p, &f), INCMOE_OK);
    EXPECT_EQ(hook.allocs, 1);
    incmoe_fifo_device_t dev;
    ASSERT_EQ(incmoe_fifo_device(f, &dev), INCMOE_OK);
    EXPECT_EQ(dev.capacity, 4u);
    EXPECT_GE((uintptr_t)dev.slots, (uintptr_t)hook.last);
    const int M = 200;
    uint64_t ticket = 0;
    for (int i = 1; i <= M; i++) {
        auto t = trig(INCMOE_FIFO_OP_REDUCESCATTER, (uint64_t)i);
        incmoe_status_t st;
        while ((st = incmoe_fifo_dev_try_push(&dev, &t, &ticket)) == INCMOE_IN_PROGRESS)
            std::this_thread::yield();
        ASSERT_EQ(st, INCMOE_OK);
        ASSERT_EQ(ticket, (uint64_t)i);
    }
    EXPECT_EQ(incmoe_fifo_wait(f, INCMOE_STREAM_REDUCESCATTER, M, 10000), INCMOE_OK);
    EXPECT_EQ(incmoe_fifo_dev_completed(&dev, INCMOE_STREAM_REDUCESCATTER), (uint64_t)M);
    auto bad = trig((incmoe_fifo_op_t)99, 0);
    EXPECT_EQ(incmoe_fifo_dev_try_push(&dev, &bad, &ticket), INCMOE_ERR_INVALID_ARG);
    {
        std::lock_guard<std::mutex> lk(net.mu);
        auto &v = net.posted_offsets[INCMOE_STREAM_REDUCESCATTER];
        ASSERT_EQ(v.size(), (size_t)M);
        for (int i = 0; i < M; i++)
            ASSERT_EQ(v[i], (uint64_t)(i + 1));
    }
    EXPECT_EQ(incmoe_fifo_destroy(f), INCMOE_OK);
    EXPECT_EQ(hook.frees, 1);
}

/* The waiter's sleeps on a bell, counted per phase of the test below through the library's
   test hook (counter_test_sleeping): phase 0 the first wait, 1 the second. */
static std::atomic<int> g_wait_phase{0};
static std::atomic<int> g_sleeps[2];

static void count_sleep(const uint32_t *)
{
    g_sleeps[g_wait_phase.load()]++;
}

/* Until the waiter of `phase` has reached its sleep at least once (bounded: false if not). */
static bool await_sleep(int phase)
{
    for (int ms = 0; ms < 20000; ms++) {
        if (g_sleeps[phase].load() > 0)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

/* An abort word set by another thread while a counter waiter sleeps wakes it, and the waiter
   returns the abort's status.  The abort is set only once the waiter has reached its sleep on
   the bell (the library's test hook says when), and the waiter must return within a tenth of
   its timeout: woken by the abort's ring, not by finding the abort word when the timeout ran
   out.  The bound tells those two apart; it is no speed figure. */
TEST_F(MoeFifo, CounterWaitWakesOnAbort)
{
    using clock = std::chrono::steady_clock;
    const int timeout_ms = 60000;
    uint64_t counter = 0;
    uint32_t bell = 0;
    int32_t abort_word = 0;
    std::atomic<bool> slept[2] = {{false}, {false}};
    g_wait_phase = 0;
    g_sleeps[0] = g_sleeps[1] = 0;
    counter_test_sleeping = count_sleep;
    std::thread t([&] {
        slept[0] = await_sleep(0); /* the first wait is asleep: the publication wakes it */
        incmoe_counter_publish(&counter, 1, &bell);
        slept[1] = await_sleep(1); /* the second is asleep: the abort's ring wakes it */
        __atomic_store_n(&abort_word, (int32_t)INCMOE_ERR_PEER_FAILED, __ATOMIC_RELEASE);
        incmoe_counter_ring_all(&bell);
    });
    EXPECT_EQ(incmoe_counter_wait(&counter, 1, &bell, &abort_word, nullptr, timeout_ms), INCMOE_OK);
    clock::time_point started = clock::now();
    g_wait_phase = 1;
    EXPECT_EQ(incmoe_counter_wait(&counter, 2, &bell, nullptr, &abort_word, timeout_ms),
              INCMOE_ERR_PEER_FAILED);
    clock::time_point woke = clock::now();
    t.join();
    counter_test_sleeping = nullptr;
    EXPECT_TRUE(slept[0]) << "the first wait never slept on the bell";
    EXPECT_TRUE(slept[1]) << "the second wait never slept on the bell";
    EXPECT_LT(woke - started, std::chrono::milliseconds(timeout_ms / 10))
        << "the waiter returned at its timeout, not at the abort";
    EXPECT_EQ(incmoe_counter_wait(&counter, 2, &bell, nullptr, nullptr, 10), INCMOE_ERR_TIMEOUT);
}
