/*
 * test_moe_cuda_proto.cc - the CUDA backend's host-checkable parts, on the CPU:
 * the FIFO across PCIe (moe/cuda/devfifo.h, compiled for the host with the
 * same memory orders) driven by producer threads standing in for thread
 * blocks and drained by the real proxy of plugin/fifo.c over a fake
 * transport; and the buffer-placement rule with stand-ins for UCX's
 * memory-type answer.
 */
#include <string.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "base/ucx_util.h"
}
#include <ucs/memory/memory_type.h>

#include "cuda/devfifo.h"
#include "cuda/placement.h"
#include "plugin/fifo.h"

namespace
{

/* Completes every collective at once; records what was posted per stream. */
struct InstantNet {
    std::mutex mu;
    std::vector<std::vector<uint64_t>> offsets{INC_STREAM_COUNT};
    uint64_t epoch[INC_STREAM_COUNT] = {};
    int posts = 0, fail_post_at = -1;
    std::vector<uint64_t> rows;     /* per dispatch epoch - 1: its rows */
    std::vector<uint64_t> combined; /* per combine: the dispatch epoch it named */
    static incmoe_status_t post(void *ctx, const incmoe_fifo_trigger_t *t,
                                const incmoe_req_t *dispatch, incmoe_req_t *req_p)
    {
        InstantNet *n = static_cast<InstantNet *>(ctx);
        std::lock_guard<std::mutex> lk(n->mu);
        if (n->posts++ == n->fail_post_at)
            return INCMOE_ERR_PEER_FAILED;
        int s = incmoe_fifo_op_stream((incmoe_fifo_op_t)t->desc.op);
        n->offsets[s].push_back(t->desc.offset);
        req_p->stream = (incmoe_stream_t)s;
        req_p->epoch = ++n->epoch[s];
        if (s == INCMOE_STREAM_DISPATCH)
            n->rows.push_back(t->desc.length);
        if (s == INCMOE_STREAM_COMBINE)
            n->combined.push_back(dispatch->epoch);
        return INCMOE_OK;
    }
    static incmoe_status_t wait(void *, const incmoe_req_t *)
    {
        return INCMOE_OK;
    }
    /* A dispatch of m rows receives 2m + 1. */
    static incmoe_status_t dispatch_result(void *ctx, const incmoe_req_t *req,
                                           incmoe_fifo_dispatch_t *block)
    {
        InstantNet *n = static_cast<InstantNet *>(ctx);
        std::lock_guard<std::mutex> lk(n->mu);
        block->nrecv = 2 * n->rows[req->epoch - 1] + 1;
        return INCMOE_OK;
    }
};
const fifo_transport_t instant = {InstantNet::post, InstantNet::wait, InstantNet::dispatch_result};

/* One producer (a thread block's thread 0): reserve, poll the slot, publish, then
   wait for the ticket; an abort word ends every wait, as in prims.cuh.  A dispatch names
   its block, and offset rows. */
incmoe_status_t post_and_wait(const devfifo_t *f, incmoe_fifo_op_t op, uint64_t offset,
                              const std::atomic<int> *abort_word,
                              incmoe_fifo_dispatch_t *block = nullptr)
{
    incmoe_fifo_trigger_t t;
    memset(&t, 0, sizeof(t));
    t.desc.op = op;
    t.desc.offset = offset;
    if (op == INCMOE_FIFO_OP_DISPATCH) {
        t.desc.length = offset;
        t.dispatch = block;
    }
    uint64_t pos = devfifo_reserve(f);
    incmoe_status_t st;
    while ((st = devfifo_slot_free(f, pos)) == INCMOE_IN_PROGRESS) {
        if (abort_word->load(std::memory_order_acquire))
            return INCMOE_ERR_CLOSED;
        std::this_thread::yield();
    }
    if (st != INCMOE_OK)
        return st;
    uint64_t ticket = devfifo_publish(f, pos, &t);
    int s = incmoe_fifo_dev_stream(op);
    while (devfifo_completed(f, s) < ticket) {
        int32_t err = incmoe_atomic_load_acquire32(f->fifo.error);
        if (err != 0)
            return (incmoe_status_t)err;
        if (abort_word->load(std::memory_order_acquire))
            return INCMOE_ERR_CLOSED;
        std::this_thread::yield();
    }
    return INCMOE_OK;
}

struct Rig {
    InstantNet net;
    incmoe_fifo_t *fifo = nullptr;
    devfifo_words_t words;
    devfifo_t f;
    explicit Rig(uint32_t capacity)
    {
        memset(&words, 0, sizeof(words));
        incmoe_fifo_params_t p = {};
        p.field_mask = INCMOE_FIFO_PARAM_CAPACITY | INCMOE_FIFO_PARAM_IDLE_US;
        p.capacity = capacity;
        p.idle_us = 20; /* device pushes do not ring the doorbell: the proxy polls */
        EXPECT_EQ(fifo_create_full(&instant, &net, &p, &fifo), INCMOE_OK);
        incmoe_fifo_device(fifo, &f.fifo);
        /* The device handle never uses the host producers' words. */
        f.fifo.tail = f.fifo.pushed = nullptr;
        f.fifo.doorbell = f.fifo.bell = nullptr;
        f.words = &words;
    }
};

} // namespace

/* Three streams posted concurrently by three "blocks", with a FIFO far smaller than
   the number of posts (every slot wraps many times): each stream arrives whole and
   in order, every ticket is reached, the device words count every push. */
TEST(MoeCudaProto, ProducersOfThreeStreamsWrapTheFifo)
{
    Rig rig(4);
    const int per = 500;
    std::atomic<int> abort_word{0};
    const incmoe_fifo_op_t ops[3] = {INCMOE_FIFO_OP_ALLGATHER, INCMOE_FIFO_OP_REDUCESCATTER,
                                     INCMOE_FIFO_OP_BARRIER};
    std::vector<std::thread> th;
    std::atomic<int> failures{0};
    for (int b = 0; b < 3; b++)
        th.emplace_back([&, b] {
            for (int i = 0; i < per; i++)
                if (post_and_wait(&rig.f, ops[b], (uint64_t)i, &abort_word) != INCMOE_OK)
                    failures++;
        });
    for (auto &t : th)
        t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(rig.words.reserve, 3u * per);
    for (int b = 0; b < 3; b++) {
        int s = incmoe_fifo_dev_stream(ops[b]);
        EXPECT_EQ(rig.words.pushed[s], (uint64_t)per);
        ASSERT_EQ(rig.net.offsets[s].size(), (size_t)per);
        for (int i = 0; i < per; i++)
            EXPECT_EQ(rig.net.offsets[s][i], (uint64_t)i) << "stream " << s;
        EXPECT_EQ(incmoe_fifo_completed(rig.fifo, (incmoe_stream_t)s), (uint64_t)per);
    }
    EXPECT_EQ(incmoe_fifo_destroy(rig.fifo), INCMOE_OK);
}

/* Several "blocks" taking turns on one stream (the ReduceScatter parts' rs_turn):
   the turn counter serialises them, so the stream stays in order. */
TEST(MoeCudaProto, TurnTakingProducersKeepOneStreamInOrder)
{
    Rig rig(8);
    std::atomic<uint64_t> turn{0};
    std::atomic<int> abort_word{0}, failures{0};
    const int blocks = 4, per = 100;
    std::vector<std::thread> th;
    for (int b = 0; b < blocks; b++)
        th.emplace_back([&, b] {
            for (int i = 0; i < per; i++) {
                uint64_t mine = (uint64_t)i * blocks + b;
                while (turn.load(std::memory_order_acquire) != mine)
                    std::this_thread::yield();
                /* Post, then hand the turn on before waiting (as role_reduce_post does). */
                incmoe_fifo_trigger_t t;
                memset(&t, 0, sizeof(t));
                t.desc.op = INCMOE_FIFO_OP_REDUCESCATTER;
                t.desc.offset = mine;
                uint64_t pos = devfifo_reserve(&rig.f);
                while (devfifo_slot_free(&rig.f, pos) == INCMOE_IN_PROGRESS)
                    std::this_thread::yield();
                uint64_t ticket = devfifo_publish(&rig.f, pos, &t);
                turn.store(mine + 1, std::memory_order_release);
                if (ticket != mine + 1)
                    failures++;
                while (devfifo_completed(&rig.f, INCMOE_STREAM_REDUCESCATTER) < ticket)
                    std::this_thread::yield();
            }
        });
    for (auto &t : th)
        t.join();
    EXPECT_EQ(failures.load(), 0);
    auto &got = rig.net.offsets[INCMOE_STREAM_REDUCESCATTER];
    ASSERT_EQ(got.size(), (size_t)(blocks * per));
    for (size_t i = 0; i < got.size(); i++)
        EXPECT_EQ(got[i], (uint64_t)i);
    EXPECT_EQ(incmoe_fifo_destroy(rig.fifo), INCMOE_OK);
}

/* The masked pipeline's posts on the device path: a "gather block" dispatches band after band
   and reads R from the band's dispatch block once its ticket is reached; a "reduce block"
   combines each band by its dispatch's ticket.  Each R is in its block by the ticket, each
   combine names its band's dispatch. */
TEST(MoeCudaProto, DispatchesAndCombinesOnTheDevicePath)
{
    Rig rig(4);
    const int bands = 300;
    std::vector<incmoe_fifo_dispatch_t> blocks(bands);
    std::atomic<uint64_t> dispatched{0};
    std::atomic<int> abort_word{0}, failures{0};
    std::thread gather([&] {
        for (int j = 0; j < bands; j++) {
            blocks[j] = {};
            if (post_and_wait(&rig.f, INCMOE_FIFO_OP_DISPATCH, (uint64_t)(j % 9), &abort_word,
                              &blocks[j]) != INCMOE_OK ||
                blocks[j].nrecv != 2 * (uint64_t)(j % 9) + 1 || blocks[j].status != INCMOE_OK)
                failures++;
            dispatched.store((uint64_t)j + 1, std::memory_order_release);
        }
    });
    std::thread reduce([&] {
        for (int j = 0; j < bands; j++) {
            while (dispatched.load(std::memory_order_acquire) < (uint64_t)j + 1)
                std::this_thread::yield();
            if (post_and_wait(&rig.f, INCMOE_FIFO_OP_COMBINE, (uint64_t)j + 1, &abort_word) !=
                INCMOE_OK)
                failures++;
        }
    });
    gather.join();
    reduce.join();
    EXPECT_EQ(failures.load(), 0);
    ASSERT_EQ(rig.net.combined.size(), (size_t)bands);
    for (int j = 0; j < bands; j++)
        EXPECT_EQ(rig.net.combined[j], (uint64_t)j + 1);
    EXPECT_EQ(rig.words.pushed[INCMOE_STREAM_DISPATCH], (uint64_t)bands);
    EXPECT_EQ(rig.words.pushed[INCMOE_STREAM_COMBINE], (uint64_t)bands);
    EXPECT_EQ(incmoe_fifo_destroy(rig.fifo), INCMOE_OK);
}

/* A collective that fails: the proxy's error word reaches every producer, those
   waiting for a ticket and those waiting for a slot, so none of them hangs; the
   rest end through the abort word. */
TEST(MoeCudaProto, FailedCollectiveEndsEveryProducer)
{
    Rig rig(2);
    rig.net.fail_post_at = 5;
    std::atomic<int> abort_word{0};
    std::vector<incmoe_status_t> st(3, INCMOE_OK);
    const incmoe_fifo_op_t ops[3] = {INCMOE_FIFO_OP_ALLGATHER, INCMOE_FIFO_OP_REDUCESCATTER,
                                     INCMOE_FIFO_OP_BARRIER};
    std::vector<std::thread> th;
    for (int b = 0; b < 3; b++)
        th.emplace_back([&, b] {
            for (int i = 0; i < 1000 && st[b] == INCMOE_OK; i++)
                st[b] = post_and_wait(&rig.f, ops[b], (uint64_t)i, &abort_word);
            /* The first to fail raises the layer's abort word (prim_abort). */
            abort_word.store(1, std::memory_order_release);
        });
    for (auto &t : th)
        t.join();
    int saw_error = 0;
    for (int b = 0; b < 3; b++) {
        EXPECT_NE(st[b], INCMOE_OK) << "producer " << b << " finished despite the failure";
        saw_error += st[b] == INCMOE_ERR_PEER_FAILED;
    }
    EXPECT_GE(saw_error, 1);
    EXPECT_EQ(incmoe_fifo_destroy(rig.fifo), INCMOE_ERR_PEER_FAILED);
}

TEST(MoeCudaProto, PlacementFollowsUcxMemoryTypes)
{
    char why[128];
    const uint64_t host = 1ull << UCS_MEMORY_TYPE_HOST, cuda = 1ull << UCS_MEMORY_TYPE_CUDA;
    EXPECT_EQ(moe_cuda_placement(host, 1, why, sizeof(why)), MOE_CUDA_BUF_HOST_MAPPED);
    EXPECT_NE(strstr(why, "no CUDA memory"), nullptr) << why;
    EXPECT_EQ(moe_cuda_placement(host | cuda, 1, why, sizeof(why)), MOE_CUDA_BUF_DEVICE);
    EXPECT_EQ(moe_cuda_placement(host | cuda, 0, why, sizeof(why)), MOE_CUDA_BUF_HOST_MAPPED);
    EXPECT_NE(strstr(why, "client"), nullptr) << why;
    EXPECT_STREQ(moe_cuda_buf_name(MOE_CUDA_BUF_DEVICE), "device");
    EXPECT_STREQ(moe_cuda_buf_name(MOE_CUDA_BUF_HOST_MAPPED), "host-mapped");
}

/* The real query on this machine's UCX answers, and host memory is among the types. */
TEST(MoeCudaProto, UcxMemoryTypeQueryAnswers)
{
    uint64_t types = 0;
    ASSERT_EQ(inc_ucx_memory_types(&types), INCMOE_OK);
    EXPECT_NE(types & (1ull << UCS_MEMORY_TYPE_HOST), 0u);
}
