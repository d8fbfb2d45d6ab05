/*
 * fifo.c - the lock-free descriptor FIFO and its proxy (see api/incmoe_fifo.h).
 *
 * Slots follow the bounded-queue scheme with a sequence number per slot: slot
 * i is free for the producer at position p when seq == p, full for the
 * consumer when seq == p + 1, and is handed back with seq = p + capacity.
 * Producers race only on the tail (compare-and-swap); the single consumer is
 * the proxy thread.  Completions are tracked by one thread per stream that
 * blocks in the transport's wait, so nothing here spins for long.
 */
#include "fifo.h"

#include <stdatomic.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/clock.h"

#define FIFO_REQ_RING 1024 /* collectives of one stream posted and not yet completed */
#define FIFO_IDLE_MS  10   /* how long an idle proxy sleeps between looks at the FIFO */

typedef struct {
    _Atomic uint64_t seq;
    incmoe_fifo_trigger_t trigger;
} __attribute__((aligned(64))) fifo_slot_t;

struct incmoe_fifo {
    /* --- shared with producers (the part a device would map) --- */
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) _Atomic uint64_t pushed[FIFO_NSTREAMS];    /* tickets handed out */
    _Alignas(64) _Atomic uint64_t completed[FIFO_NSTREAMS]; /* published by the proxy, release */
    _Alignas(64) _Atomic uint32_t doorbell;                 /* bumped after every push */
    _Atomic int error;                                      /* first failure, 0 if none */
    uint32_t capacity;
    fifo_slot_t *slots;

    /* --- proxy side --- */
    const fifo_transport_t *transport;
    void *ctx;
    uint64_t head;
    _Atomic uint64_t posted[FIFO_NSTREAMS];
    incmoe_req_t reqs[FIFO_NSTREAMS][FIFO_REQ_RING];
    _Atomic int stop;
    pthread_t proxy;
    pthread_t completer[FIFO_NSTREAMS];
    int started[FIFO_NSTREAMS + 1];
};

static const int fifo_streams[] = {INCMOE_STREAM_ALLGATHER, INCMOE_STREAM_REDUCESCATTER,
                                   INCMOE_STREAM_BARRIER};

static void futex_wake32(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait32(_Atomic uint32_t *w, uint32_t seen, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

/* The low half of a 64-bit counter changes whenever the counter does: futex on it. */
static _Atomic uint32_t *low_word(_Atomic uint64_t *c)
{
    return (_Atomic uint32_t *)c + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 1 : 0);
}

incmoe_stream_t incmoe_fifo_op_stream(incmoe_fifo_op_t op)
{
    switch (op) {
    case INCMOE_FIFO_OP_ALLGATHER:
        return INCMOE_STREAM_ALLGATHER;
    case INCMOE_FIFO_OP_REDUCESCATTER:
        return INCMOE_STREAM_REDUCESCATTER;
    case INCMOE_FIFO_OP_BARRIER:
        return INCMOE_STREAM_BARRIER;
    }
    return INC_STREAM_COUNT;
}

static void fifo_fail(incmoe_fifo_t *fifo, incmoe_status_t status)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&fifo->error, &expected, (int)status))
        log_error("fifo", "proxy failed: %s", incmoe_strerror(status));
    /* Wake every waiter so it sees the error now rather than at its next timeout. */
    for (int s = 0; s < FIFO_NSTREAMS; s++) {
        futex_wake32(low_word(&fifo->completed[s]));
        futex_wake32(low_word(&fifo->posted[s]));
    }
    futex_wake32(&fifo->doorbell);
}

/* ---------------------------------------------------------------- producer */

incmoe_status_t incmoe_fifo_push(incmoe_fifo_t *fifo, const incmoe_fifo_trigger_t *trigger,
                                 uint64_t *ticket_p, int timeout_ms)
{
    incmoe_stream_t s = incmoe_fifo_op_stream((incmoe_fifo_op_t)trigger->desc.op);
    if (s == INC_STREAM_COUNT) {
        log_error("fifo", "descriptor op %u is not an AllGather, ReduceScatter or barrier",
                  trigger->desc.op);
        return INCMOE_ERR_INVALID_ARG;
    }
    double deadline = -1;
    uint64_t pos = atomic_load_explicit(&fifo->tail, memory_order_relaxed);
    for (;;) {
        int err = atomic_load_explicit(&fifo->error, memory_order_acquire);
        if (err != 0)
            return (incmoe_status_t)err;
        fifo_slot_t *slot = &fifo->slots[pos & (fifo->capacity - 1)];
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        if (seq == pos) {
            if (atomic_compare_exchange_weak_explicit(&fifo->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                slot->trigger = *trigger;
                uint64_t t = atomic_fetch_add_explicit(&fifo->pushed[s], 1, memory_order_relaxed);
                atomic_store_explicit(&slot->seq, pos + 1, memory_order_release);
                atomic_fetch_add_explicit(&fifo->doorbell, 1, memory_order_release);
                futex_wake32(&fifo->doorbell);
                *ticket_p = t + 1;
                return INCMOE_OK;
            }
            /* pos was reloaded by the failed CAS */
        } else if (seq < pos) {
            /* Full: the proxy has not drained this slot yet. */
            if (deadline < 0)
                deadline = inc_now_ms() + timeout_ms;
            else if (inc_now_ms() > deadline) {
                log_error("fifo", "FIFO of %u slots stayed full for %d ms", fifo->capacity,
                          timeout_ms);
                return INCMOE_ERR_TIMEOUT;
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            pos = atomic_load_explicit(&fifo->tail, memory_order_relaxed);
        } else {
            pos = atomic_load_explicit(&fifo->tail, memory_order_relaxed);
        }
    }
}

uint64_t incmoe_fifo_completed(incmoe_fifo_t *fifo, incmoe_stream_t stream)
{
    if ((unsigned)stream >= FIFO_NSTREAMS)
        return 0;
    return atomic_load_explicit(&fifo->completed[stream], memory_order_acquire);
}

incmoe_status_t incmoe_fifo_error(incmoe_fifo_t *fifo)
{
    return (incmoe_status_t)atomic_load_explicit(&fifo->error, memory_order_acquire);
}

incmoe_status_t incmoe_fifo_wait(incmoe_fifo_t *fifo, incmoe_stream_t stream, uint64_t ticket,
                                 int timeout_ms)
{
    if ((unsigned)stream >= FIFO_NSTREAMS)
        return INCMOE_ERR_INVALID_ARG;
    _Atomic uint64_t *c = &fifo->completed[stream];
    for (int i = 0; i < 32; i++)
        if (atomic_load_explicit(c, memory_order_acquire) >= ticket)
            return INCMOE_OK;
    double deadline = inc_now_ms() + timeout_ms;
    for (;;) {
        uint64_t v = atomic_load_explicit(c, memory_order_acquire);
        if (v >= ticket)
            return INCMOE_OK;
        int err = atomic_load_explicit(&fifo->error, memory_order_acquire);
        if (err != 0)
            return (incmoe_status_t)err;
        if (inc_now_ms() > deadline) {
            log_error("fifo", "stream %d: collective %llu not complete after %d ms (%llu done)",
                      (int)stream, (unsigned long long)ticket, timeout_ms, (unsigned long long)v);
            return INCMOE_ERR_TIMEOUT;
        }
        futex_wait32(low_word(c), (uint32_t)v, 5);
    }
}

/* ------------------------------------------------------------------- proxy */

static void *proxy_main(void *arg)
{
    incmoe_fifo_t *fifo = arg;
    for (;;) {
        uint32_t bell = atomic_load_explicit(&fifo->doorbell, memory_order_acquire);
        fifo_slot_t *slot = &fifo->slots[fifo->head & (fifo->capacity - 1)];
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        if (seq != fifo->head + 1) {
            if (atomic_load_explicit(&fifo->stop, memory_order_acquire))
                break;
            futex_wait32(&fifo->doorbell, bell, FIFO_IDLE_MS);
            continue;
        }
        incmoe_fifo_trigger_t trig = slot->trigger;
        atomic_store_explicit(&slot->seq, fifo->head + fifo->capacity, memory_order_release);
        fifo->head++;

        int s = incmoe_fifo_op_stream((incmoe_fifo_op_t)trig.desc.op);
        if (atomic_load_explicit(&fifo->error, memory_order_acquire) != 0)
            continue; /* failed: drain without posting; waiters see the error */
        /* Keep at most FIFO_REQ_RING collectives of a stream outstanding. */
        uint64_t n = atomic_load_explicit(&fifo->posted[s], memory_order_relaxed);
        while (n - atomic_load_explicit(&fifo->completed[s], memory_order_acquire) >=
                   FIFO_REQ_RING &&
               atomic_load_explicit(&fifo->error, memory_order_acquire) == 0) {
            uint64_t c = atomic_load_explicit(&fifo->completed[s], memory_order_acquire);
            futex_wait32(low_word(&fifo->completed[s]), (uint32_t)c, FIFO_IDLE_MS);
        }
        incmoe_req_t req;
        incmoe_status_t st = fifo->transport->post(fifo->ctx, &trig, &req);
        if (st != INCMOE_OK) {
            fifo_fail(fifo, st);
            continue;
        }
        fifo->reqs[s][n % FIFO_REQ_RING] = req;
        atomic_store_explicit(&fifo->posted[s], n + 1, memory_order_release);
        futex_wake32(low_word(&fifo->posted[s]));
    }
    return NULL;
}

typedef struct {
    incmoe_fifo_t *fifo;
    int stream;
} completer_arg_t;

static void *completer_main(void *arg)
{
    incmoe_fifo_t *fifo = ((completer_arg_t *)arg)->fifo;
    int s = ((completer_arg_t *)arg)->stream;
    free(arg);
    uint64_t done = 0;
    for (;;) {
        uint64_t posted = atomic_load_explicit(&fifo->posted[s], memory_order_acquire);
        if (posted == done) {
            if (atomic_load_explicit(&fifo->error, memory_order_acquire) != 0 ||
                (atomic_load_explicit(&fifo->stop, memory_order_acquire) == 2))
                break;
            futex_wait32(low_word(&fifo->posted[s]), (uint32_t)posted, FIFO_IDLE_MS);
            continue;
        }
        incmoe_req_t req = fifo->reqs[s][done % FIFO_REQ_RING];
        incmoe_status_t st = fifo->transport->wait(fifo->ctx, &req);
        if (st != INCMOE_OK) {
            fifo_fail(fifo, st);
            break;
        }
        done++;
        atomic_store_explicit(&fifo->completed[s], done, memory_order_release);
        futex_wake32(low_word(&fifo->completed[s]));
    }
    return NULL;
}

/* --------------------------------------------------------------- lifecycle */

incmoe_status_t fifo_create_with(const fifo_transport_t *transport, void *ctx, uint32_t capacity,
                                 incmoe_fifo_t **fifo_p)
{
    if (capacity < 2 || (capacity & (capacity - 1)) != 0 || capacity > (1u << 20)) {
        log_error("fifo", "capacity %u is not a power of two in [2, 2^20]", capacity);
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_fifo_t *fifo = aligned_alloc(64, (sizeof(*fifo) + 63) & ~(size_t)63);
    if (fifo == NULL)
        return INCMOE_ERR_NO_MEMORY;
    memset(fifo, 0, sizeof(*fifo));
    fifo->slots = aligned_alloc(64, capacity * sizeof(fifo_slot_t));
    if (fifo->slots == NULL) {
        free(fifo);
        return INCMOE_ERR_NO_MEMORY;
    }
    memset(fifo->slots, 0, capacity * sizeof(fifo_slot_t));
    for (uint32_t i = 0; i < capacity; i++)
        atomic_init(&fifo->slots[i].seq, i);
    fifo->capacity = capacity;
    fifo->transport = transport;
    fifo->ctx = ctx;

    incmoe_status_t st = INCMOE_OK;
    if (pthread_create(&fifo->proxy, NULL, proxy_main, fifo) != 0) {
        st = INCMOE_ERR_NO_MEMORY;
        goto err_free;
    }
    fifo->started[FIFO_NSTREAMS] = 1;
    for (size_t i = 0; i < sizeof(fifo_streams) / sizeof(fifo_streams[0]); i++) {
        completer_arg_t *a = malloc(sizeof(*a));
        if (a == NULL) {
            st = INCMOE_ERR_NO_MEMORY;
            goto err_stop;
        }
        a->fifo = fifo;
        a->stream = fifo_streams[i];
        if (pthread_create(&fifo->completer[fifo_streams[i]], NULL, completer_main, a) != 0) {
            free(a);
            st = INCMOE_ERR_NO_MEMORY;
            goto err_stop;
        }
        fifo->started[fifo_streams[i]] = 1;
    }
    *fifo_p = fifo;
    return INCMOE_OK;

err_stop:
    incmoe_fifo_destroy(fifo);
    return st;
err_free:
    free(fifo->slots);
    free(fifo);
    return st;
}

incmoe_status_t incmoe_fifo_destroy(incmoe_fifo_t *fifo)
{
    if (fifo == NULL)
        return INCMOE_OK;
    /* Stage 1: the proxy drains what was pushed and exits; stage 2: the
       completers retire what was posted and exit. */
    atomic_store_explicit(&fifo->stop, 1, memory_order_release);
    atomic_fetch_add(&fifo->doorbell, 1);
    futex_wake32(&fifo->doorbell);
    if (fifo->started[FIFO_NSTREAMS])
        pthread_join(fifo->proxy, NULL);
    atomic_store_explicit(&fifo->stop, 2, memory_order_release);
    for (int s = 0; s < FIFO_NSTREAMS; s++) {
        futex_wake32(low_word(&fifo->posted[s]));
        if (fifo->started[s])
            pthread_join(fifo->completer[s], NULL);
    }
    incmoe_status_t st = incmoe_fifo_error(fifo);
    free(fifo->slots);
    free(fifo);
    return st;
}

/* ------------------------------------------------- the communicator's side */

static incmoe_status_t comm_post(void *ctx, const incmoe_fifo_trigger_t *t, incmoe_req_t *req_p)
{
    incmoe_comm_t *comm = ctx;
    const incmoe_fifo_desc_t *d = &t->desc;
    incmoe_layout_t layout = {.block_stride = d->block_stride,
                              .offset = d->offset,
                              .length = d->length,
                              .valid = t->valid};
    switch ((incmoe_fifo_op_t)d->op) {
    case INCMOE_FIFO_OP_ALLGATHER:
        return incmoe_allgather(comm, (incmoe_mr_t *)(uintptr_t)d->send_mr, d->send_offset,
                                (incmoe_mr_t *)(uintptr_t)d->recv_mr, d->recv_offset, &layout,
                                req_p);
    case INCMOE_FIFO_OP_REDUCESCATTER:
        return incmoe_reducescatter(comm, (incmoe_mr_t *)(uintptr_t)d->send_mr, d->send_offset,
                                    (incmoe_mr_t *)(uintptr_t)d->recv_mr, d->recv_offset, &layout,
                                    (incmoe_dtype_t)d->dtype, (incmoe_redop_t)d->redop, req_p);
    case INCMOE_FIFO_OP_BARRIER:
        return incmoe_barrier(comm, req_p);
    }
    return INCMOE_ERR_INVALID_ARG;
}

static incmoe_status_t comm_wait(void *ctx, const incmoe_req_t *req)
{
    return incmoe_wait((incmoe_comm_t *)ctx, req);
}

const fifo_transport_t fifo_comm_transport = {comm_post, comm_wait};

incmoe_status_t incmoe_fifo_create(incmoe_comm_t *comm, uint32_t capacity, incmoe_fifo_t **fifo_p)
{
    if (comm == NULL || fifo_p == NULL) {
        log_error("fifo", "communicator and output pointer are required");
        return INCMOE_ERR_INVALID_ARG;
    }
    return fifo_create_with(&fifo_comm_transport, comm, capacity, fifo_p);
}
