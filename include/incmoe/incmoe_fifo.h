/*
 * incmoe_fifo.h - device-side posting: a lock-free descriptor FIFO plus
 * cumulative completion counters (the model is MSCCL++'s PortChannel).
 *
 * A producer (a CPU role worker, or a GPU thread block through the device
 * handle below) writes a fixed-size descriptor "post an AllGather /
 * ReduceScatter / barrier / dispatch / combine of this byte range and
 * layout" into the FIFO and gets back a ticket; it later waits until the completion counter of that
 * stream reaches the ticket.  A proxy thread owning the communicator drains
 * the FIFO in order, posts each collective through the public client API and
 * publishes, with release semantics, how many collectives of each stream have
 * completed.
 *
 * The producer side takes no lock: a slot is claimed with one atomic
 * compare-and-swap and handed over with one release store.  The slots and
 * every counter producers touch live in one shared block, allocated through
 * an allocator hook (plain host memory by default; host-mapped pinned memory
 * when a GPU produces), and described by a plain-old-data device handle.
 *
 * Ordering: the proxy posts in FIFO order, so collectives of one stream reach
 * the communicator in the order their pushes completed.  Pushes of one stream
 * must therefore be serialised by the caller (they must be anyway, since every
 * rank has to post a stream in the same order); different streams may be
 * pushed concurrently from different threads.
 *
 * Ownership: while a FIFO exists, its proxy posts AllGathers, ReduceScatters,
 * barriers, dispatches and combines on the communicator whenever a producer
 * asks; the caller must not post collectives of those streams on the same
 * communicator itself while any pushed collective is incomplete, or the
 * ranks' stream orders diverge.  Registration handles named in a descriptor, and the buffers
 * behind them, stay the caller's and must stay registered and untouched
 * (except by the collective) until the collective's ticket is reached.
 *
 * Capacity: a FIFO holds at most `capacity` descriptors not yet taken by the
 * proxy (a push finding it full waits, bounded); the proxy keeps at most 1024
 * collectives of one stream posted and incomplete, and stops draining while a
 * stream is at that bound.
 */
#ifndef INCMOE_FIFO_H
#define INCMOE_FIFO_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe.h"

#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#include <cuda/atomic>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    INCMOE_FIFO_OP_ALLGATHER = 1,
    INCMOE_FIFO_OP_REDUCESCATTER = 2,
    INCMOE_FIFO_OP_BARRIER = 3,
    INCMOE_FIFO_OP_DISPATCH = 4, /* incmoe_dispatch (incmoe.h, "Dispatch and combine") */
    INCMOE_FIFO_OP_COMBINE = 5,  /* incmoe_combine of a dispatch pushed on this FIFO */
} incmoe_fifo_op_t;

/*
 * One descriptor, 64 bytes, no pointers that need fixing up across address
 * spaces except the registration handles and the trigger's pointer beside it
 * (valid[] or the dispatch block), which must stay alive (unchanged) until
 * the collective has been posted (the client copies valid[] and the sets at
 * post time; waiting for the ticket is always enough).  What the trigger's
 * pointer names is read (and a dispatch block written) by the proxy on the
 * host: a device producer passes a host (or host-mapped) address.
 *
 * AllGather and ReduceScatter: the byte ranges of the posting calls, and
 * block_stride, offset and length of their incmoe_layout_t.  Dispatch and
 * combine carry their shapes in the same words:
 *   DISPATCH  send_mr, send_offset: the rows; recv_mr, recv_offset: the
 *             receive range; block_stride = row_bytes, length = nrows,
 *             offset = capacity (rows); the trigger's dispatch block holds
 *             the sets and receives the result.
 *   COMBINE   send_mr, send_offset: the partial rows; recv_mr, recv_offset:
 *             the results; dtype, redop; block_stride = row_count (elements
 *             of a row); offset = the ticket of the dispatch it inverts, one
 *             of the last INCMOE_STREAM_WINDOW pushed on this FIFO.  It may
 *             be pushed before that dispatch completed: the proxy posts it
 *             once it did.
 */
typedef struct {
    uint32_t op;      /* incmoe_fifo_op_t */
    uint16_t dtype;   /* incmoe_dtype_t (ReduceScatter) */
    uint16_t redop;   /* incmoe_redop_t (ReduceScatter) */
    uint64_t send_mr; /* (incmoe_mr_t *) */
    uint64_t send_offset;
    uint64_t recv_mr; /* (incmoe_mr_t *) */
    uint64_t recv_offset;
    uint64_t block_stride; /* incmoe_layout_t */
    uint64_t offset;
    uint64_t length;
} incmoe_fifo_desc_t;

/*
 * What a DISPATCH trigger points to: the sets (incmoe_dispatch_params_t.sets)
 * and where the result lands (what incmoe_dispatch_result gives).  Host or
 * host-mapped memory, host addresses in it; the producer fills sets, source
 * and source_rows before the push and must keep the block (and the sets)
 * alive and unchanged until the dispatch's ticket is reached.  The proxy
 * writes nrecv, the source table and status before it publishes the
 * completion, so a producer that sees the ticket reached (acquire) reads
 * them.  A dispatch that failed because some rank's capacity was short
 * (INCMOE_ERR_NO_MEMORY, the same on every rank) completes its ticket with
 * that status and leaves the FIFO and the communicator usable; the proxy
 * releases it (it has nothing to combine).  Every other failure fails the
 * FIFO.  A dispatch that succeeded is kept by the library until a combine
 * naming it completes: push one for each.
 */
typedef struct {
    const uint64_t *sets; /* nrows x INCMOE_SET_WORDS(N) words, read when the proxy posts */
    uint32_t *source;     /* NULL, or room for source_rows (source rank, source row) pairs */
    uint64_t source_rows;
    uint64_t nrecv; /* out: R (INCMOE_ERR_NO_MEMORY: the rows this rank would have received) */
    int32_t status; /* out: INCMOE_OK or INCMOE_ERR_NO_MEMORY */
    uint32_t reserved_;
} incmoe_fifo_dispatch_t;

/*
 * The descriptor and, beside it so that it stays 64 bytes, one pointer: an
 * AllGather's or ReduceScatter's valid[], or a dispatch's block.  No op uses
 * both, so they share the word and the trigger keeps the layout (and the
 * FIFO slot its size) that programs built against earlier versions use.
 */
typedef struct {
    incmoe_fifo_desc_t desc;
    union {
        const size_t *valid;              /* incmoe_layout_t.valid, may be NULL */
        incmoe_fifo_dispatch_t *dispatch; /* DISPATCH: required */
    };
} incmoe_fifo_trigger_t;

typedef struct incmoe_fifo incmoe_fifo_t;

/* ------------------------------------------------------------ creation */

/*
 * Where the shared block (slots and counters) lives.  alloc returns `bytes`
 * of memory aligned to 64 bytes that the proxy thread and every producer can
 * read and write coherently (for a GPU producer: host-mapped pinned memory),
 * or NULL; free releases it.  Both are called on the creating / destroying
 * thread only.
 */
typedef struct {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *ptr);
    void *ctx;
} incmoe_fifo_allocator_t;

/* Fields of incmoe_fifo_params_t a caller set (others take their defaults). */
#define INCMOE_FIFO_PARAM_CAPACITY  (1u << 0)
#define INCMOE_FIFO_PARAM_ALLOCATOR (1u << 1)
#define INCMOE_FIFO_PARAM_IDLE_US   (1u << 2)

typedef struct {
    uint32_t field_mask;               /* INCMOE_FIFO_PARAM_* */
    uint32_t capacity;                 /* slots, a power of two in [2, 2^20]; default 256 */
    incmoe_fifo_allocator_t allocator; /* default: the C heap */
    /* Longest the idle proxy sleeps before looking at the FIFO again; default
       10000.  A host push wakes the proxy at once; a device push cannot, so a
       device producer wants this small (the proxy then polls). */
    uint32_t idle_us;
} incmoe_fifo_params_t;

/*
 * Creates a FIFO over comm and starts its proxy.  The FIFO holds comm (not
 * owned) until destroy.  Not thread-safe against other calls on the same FIFO.
 */
incmoe_status_t incmoe_fifo_create_ex(incmoe_comm_t *comm, const incmoe_fifo_params_t *params,
                                      incmoe_fifo_t **fifo_p);
/* incmoe_fifo_create_ex with only the capacity set. */
incmoe_status_t incmoe_fifo_create(incmoe_comm_t *comm, uint32_t capacity, incmoe_fifo_t **fifo_p);
/*
 * Waits (bounded by the communicator's failure detection) for posted work,
 * stops the proxy and frees the shared block; returns the first error the
 * proxy hit.  No push or wait may run concurrently or afterwards, and no
 * device handle of the FIFO may be used afterwards.
 */
incmoe_status_t incmoe_fifo_destroy(incmoe_fifo_t *fifo);

/* ------------------------------------------------------- host producers */

/*
 * Lock-free; may run concurrently with pushes of other streams and with any
 * wait.  *ticket_p: the number of collectives of the trigger's stream pushed
 * so far including this one; the collective is done once
 * incmoe_fifo_completed(stream) >= ticket.  Waits (bounded by timeout_ms)
 * while the FIFO is full.  The trigger is copied; see incmoe_fifo_desc_t for
 * what it points to.
 */
incmoe_status_t incmoe_fifo_push(incmoe_fifo_t *fifo, const incmoe_fifo_trigger_t *trigger,
                                 uint64_t *ticket_p, int timeout_ms);

/* The stream a descriptor's op belongs to.  Pure. */
incmoe_stream_t incmoe_fifo_op_stream(incmoe_fifo_op_t op);

/* Collectives of the stream completed so far (acquire).  Thread-safe. */
uint64_t incmoe_fifo_completed(incmoe_fifo_t *fifo, incmoe_stream_t stream);

/* Waits until the stream's counter reaches ticket, the proxy failed, or
   timeout_ms passed.  Thread-safe; any number of waiters. */
incmoe_status_t incmoe_fifo_wait(incmoe_fifo_t *fifo, incmoe_stream_t stream, uint64_t ticket,
                                 int timeout_ms);

/* The first error the proxy hit (INCMOE_OK if none).  Thread-safe. */
incmoe_status_t incmoe_fifo_error(incmoe_fifo_t *fifo);

/* ------------------------------------------------------- device handle */

/* Completion counters per stream, indexed by incmoe_stream_t (4 before dispatch and
   combine: a program built then indexes only the first four, which keep their places). */
#define INCMOE_FIFO_MAX_STREAMS 6

/* One slot: the producer owns it while seq == its position, the proxy once
   seq == position + 1; the proxy hands it back with seq = position + capacity. */
typedef struct {
    uint64_t seq;
    uint64_t pad_;
    incmoe_fifo_trigger_t trigger;
} incmoe_fifo_slot_t;

/*
 * Plain-old-data view of the shared block, valid from create until destroy;
 * copy it by value into a kernel's arguments.  Every field is a pointer into
 * the shared block (or its size), read and written only through the
 * incmoe_fifo_dev_* functions below.
 */
typedef struct {
    incmoe_fifo_slot_t *slots; /* [capacity] */
    uint64_t *tail;            /* next position a producer claims */
    uint64_t *pushed;          /* [INCMOE_FIFO_MAX_STREAMS] tickets handed out */
    uint64_t *completed;       /* [INCMOE_FIFO_MAX_STREAMS] published by the proxy */
    uint32_t *doorbell;        /* bumped after every push: the proxy's wake-up word */
    uint32_t *bell;            /* bumped after every completion and on failure */
    int32_t *error;            /* first failure (an incmoe_status_t), 0 if none */
    uint32_t capacity;
} incmoe_fifo_device_t;

/* Fills *dev_p.  Thread-safe. */
incmoe_status_t incmoe_fifo_device(incmoe_fifo_t *fifo, incmoe_fifo_device_t *dev_p);

/*
 * Atomics on plain integers, for host code (GCC/Clang builtins, C and C++) and
 * device code (cuda::atomic_ref at system scope: the other side is the host
 * proxy).  Every use names its memory order.
 */
#if defined(__CUDACC__)
#define INCMOE_FIFO_FN static inline __host__ __device__
#else
#define INCMOE_FIFO_FN static inline
#endif

#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#define INCMOE_ATOMIC_REF(T, p) cuda::atomic_ref<T, cuda::thread_scope_system>(*(p))
INCMOE_FIFO_FN uint64_t incmoe_atomic_load_acquire64(const uint64_t *p)
{
    return INCMOE_ATOMIC_REF(uint64_t, (uint64_t *)p).load(cuda::memory_order_acquire);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_load_relaxed64(const uint64_t *p)
{
    return INCMOE_ATOMIC_REF(uint64_t, (uint64_t *)p).load(cuda::memory_order_relaxed);
}
INCMOE_FIFO_FN void incmoe_atomic_store_release64(uint64_t *p, uint64_t v)
{
    INCMOE_ATOMIC_REF(uint64_t, p).store(v, cuda::memory_order_release);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_relaxed64(uint64_t *p, uint64_t *expected, uint64_t v)
{
    return INCMOE_ATOMIC_REF(uint64_t, p)
        .compare_exchange_weak(*expected, v, cuda::memory_order_relaxed,
                               cuda::memory_order_relaxed);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_release64(uint64_t *p, uint64_t *expected, uint64_t v)
{
    return INCMOE_ATOMIC_REF(uint64_t, p)
        .compare_exchange_weak(*expected, v, cuda::memory_order_release,
                               cuda::memory_order_relaxed);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_fetch_add_relaxed64(uint64_t *p, uint64_t v)
{
    return INCMOE_ATOMIC_REF(uint64_t, p).fetch_add(v, cuda::memory_order_relaxed);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_fetch_add_release64(uint64_t *p, uint64_t v)
{
    return INCMOE_ATOMIC_REF(uint64_t, p).fetch_add(v, cuda::memory_order_release);
}
INCMOE_FIFO_FN uint32_t incmoe_atomic_fetch_add_release32(uint32_t *p, uint32_t v)
{
    return INCMOE_ATOMIC_REF(uint32_t, p).fetch_add(v, cuda::memory_order_release);
}
INCMOE_FIFO_FN int32_t incmoe_atomic_load_acquire32(const int32_t *p)
{
    return INCMOE_ATOMIC_REF(int32_t, (int32_t *)p).load(cuda::memory_order_acquire);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_acq_rel32(int32_t *p, int32_t *expected, int32_t v)
{
    return INCMOE_ATOMIC_REF(int32_t, p)
        .compare_exchange_strong(*expected, v, cuda::memory_order_acq_rel,
                                 cuda::memory_order_acquire);
}
#else
INCMOE_FIFO_FN uint64_t incmoe_atomic_load_acquire64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_load_relaxed64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
INCMOE_FIFO_FN void incmoe_atomic_store_release64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_relaxed64(uint64_t *p, uint64_t *expected, uint64_t v)
{
    return __atomic_compare_exchange_n(p, expected, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_release64(uint64_t *p, uint64_t *expected, uint64_t v)
{
    return __atomic_compare_exchange_n(p, expected, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_fetch_add_relaxed64(uint64_t *p, uint64_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
INCMOE_FIFO_FN uint64_t incmoe_atomic_fetch_add_release64(uint64_t *p, uint64_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
INCMOE_FIFO_FN uint32_t incmoe_atomic_fetch_add_release32(uint32_t *p, uint32_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
INCMOE_FIFO_FN int32_t incmoe_atomic_load_acquire32(const int32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
INCMOE_FIFO_FN int incmoe_atomic_cas_acq_rel32(int32_t *p, int32_t *expected, int32_t v)
{
    return __atomic_compare_exchange_n(p, expected, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
#endif

/* The stream of an op, or -1 for an op no stream carries. */
INCMOE_FIFO_FN int incmoe_fifo_dev_stream(uint32_t op)
{
    return op == INCMOE_FIFO_OP_ALLGATHER       ? (int)INCMOE_STREAM_ALLGATHER
           : op == INCMOE_FIFO_OP_REDUCESCATTER ? (int)INCMOE_STREAM_REDUCESCATTER
           : op == INCMOE_FIFO_OP_BARRIER       ? (int)INCMOE_STREAM_BARRIER
           : op == INCMOE_FIFO_OP_DISPATCH      ? (int)INCMOE_STREAM_DISPATCH
           : op == INCMOE_FIFO_OP_COMBINE       ? (int)INCMOE_STREAM_COMBINE
                                                : -1;
}

/* The stream of a trigger, or -1 for one no stream carries (an unknown op, or a dispatch
   without its block). */
INCMOE_FIFO_FN int incmoe_fifo_dev_trigger_stream(const incmoe_fifo_trigger_t *t)
{
    if (t->desc.op == INCMOE_FIFO_OP_DISPATCH && t->dispatch == NULL)
        return -1;
    return incmoe_fifo_dev_stream(t->desc.op);
}

/*
 * One attempt to push; never blocks.  INCMOE_OK with *ticket_p set,
 * INCMOE_IN_PROGRESS when the FIFO is full (try again), the proxy's error once
 * it failed, INCMOE_ERR_INVALID_ARG for an op no stream carries (or a
 * dispatch without its block).  The same
 * rules as incmoe_fifo_push; a device producer calls it from one thread of a
 * block.  It bumps the doorbell but cannot wake a sleeping proxy (host code
 * calls incmoe_fifo_push, which does).
 */
INCMOE_FIFO_FN incmoe_status_t incmoe_fifo_dev_try_push(const incmoe_fifo_device_t *d,
                                                        const incmoe_fifo_trigger_t *trigger,
                                                        uint64_t *ticket_p)
{
    int s = incmoe_fifo_dev_trigger_stream(trigger);
    if (s < 0)
        return INCMOE_ERR_INVALID_ARG;
    /* relaxed: the slot's seq (acquire) orders everything the slot hands over */
    uint64_t pos = incmoe_atomic_load_relaxed64(d->tail);
    for (;;) {
        int32_t err = incmoe_atomic_load_acquire32(d->error);
        if (err != 0)
            return (incmoe_status_t)err;
        incmoe_fifo_slot_t *slot = &d->slots[pos & (d->capacity - 1)];
        /* acquire: pairs with the proxy's release when it handed the slot back */
        uint64_t seq = incmoe_atomic_load_acquire64(&slot->seq);
        if (seq == pos) {
            /* relaxed: claiming a position publishes nothing yet */
            if (incmoe_atomic_cas_relaxed64(d->tail, &pos, pos + 1)) {
                slot->trigger = *trigger;
                /* relaxed: pushes of one stream are serialised by the caller */
                uint64_t t = incmoe_atomic_fetch_add_relaxed64(&d->pushed[s], 1);
                /* release: the proxy's acquire of seq sees the trigger */
                incmoe_atomic_store_release64(&slot->seq, pos + 1);
                incmoe_atomic_fetch_add_release32(d->doorbell, 1);
                *ticket_p = t + 1;
                return INCMOE_OK;
            }
            /* pos was reloaded by the failed compare-and-swap */
        } else if (seq < pos) {
            return INCMOE_IN_PROGRESS; /* full: the proxy has not drained this slot */
        } else {
            pos = incmoe_atomic_load_relaxed64(d->tail);
        }
    }
}

/* Collectives of a stream completed so far; acquire, so a producer that sees
   its ticket reached also sees the collective's data. */
INCMOE_FIFO_FN uint64_t incmoe_fifo_dev_completed(const incmoe_fifo_device_t *d, int stream)
{
    return incmoe_atomic_load_acquire64(&d->completed[stream]);
}

/* ------------------------------------------------ host counters and waits */

/*
 * The one host implementation of "wait until a counter reaches a value",
 * shared by the FIFO's ticket waits and the MoE layer's progress counters.
 * A counter is a plain uint64_t that only grows; its publisher raises it
 * (release) and rings the bell it is paired with, a 32-bit word many counters
 * may share.  A waiter spins briefly, then sleeps on the bell; a ring wakes
 * only the waiters of that counter, an abort ring wakes all, and no ring can
 * be lost between a waiter's check and its sleep.  All functions are
 * thread-safe.
 */

/* Raises *counter to v (release; never lowers it) and wakes its waiters. */
void incmoe_counter_publish(uint64_t *counter, uint64_t v, uint32_t *bell);

/* Wakes every waiter sleeping on the bell (after an abort word was set). */
void incmoe_counter_ring_all(uint32_t *bell);

/*
 * Waits until *counter >= target (acquire: the publisher's writes before the
 * publication are then visible).  Returns INCMOE_OK; the status in *abort1 or
 * *abort2 once either is non-zero (NULL ones are ignored); or
 * INCMOE_ERR_TIMEOUT after timeout_ms.  Whoever sets an abort word rings
 * every bell a waiter may sleep on with incmoe_counter_ring_all.
 */
incmoe_status_t incmoe_counter_wait(const uint64_t *counter, uint64_t target, const uint32_t *bell,
                                    const int32_t *abort1, const int32_t *abort2, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
