/*
 * fifo.c - the lock-free descriptor FIFO and its proxy (see include/incmoe/incmoe_fifo.h).
 *
 * Slots follow the bounded-queue scheme with a sequence number per slot: slot
 * i is free for the producer at position p when seq == p, full for the
 * consumer when seq == p + 1, and is handed back with seq = p + capacity.
 * Producers race only on the tail (compare-and-swap); the single consumer is
 * the proxy thread.  Completions are tracked by one thread per stream that
 * blocks in the transport's wait, so nothing here spins for long.  A
 * dispatch's completer also writes its result into the producer's block
 * before it publishes the completion; a combine names its dispatch by ticket,
 * which the proxy turns into the dispatch's request.  The
 * shared block holds plain integers accessed only through the atomic helpers
 * of incmoe_fifo.h, so a device producer can use the same words.  Its sleeps and wake-ups
 * are counter.h's.
 */
#include "fifo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "counter.h"

#include "base/clock.h"
#include "base/log.h"

/* Collectives of one stream posted and not yet completed: the communicator's window.  The
   proxy waits for room on the FIFO's own completion counters (which an error also wakes),
   so when it is the stream's only poster a post never waits inside the communicator. */
#define FIFO_REQ_RING INCMOE_STREAM_WINDOW
#define FIFO_IDLE_US  10000 /* default bound on an idle proxy's sleep */
/* Bound of one sleep of the proxy waiting for room (it then looks again): completions and
   failures wake it, so this only bounds a wake-up nobody sent. */
#define FIFO_ROOM_WAIT_MS 1000

/* The shared block: what producers touch, in memory from the allocator hook. */
typedef struct {
    _Alignas(64) uint64_t tail;
    _Alignas(64) uint64_t pushed[INCMOE_FIFO_MAX_STREAMS];
    _Alignas(64) uint64_t completed[INCMOE_FIFO_MAX_STREAMS];
    _Alignas(64) uint32_t doorbell;
    _Alignas(64) uint32_t bell;
    int32_t error;
    _Alignas(64) incmoe_fifo_slot_t slots[]; /* [capacity] */
} fifo_shared_t;

_Static_assert(INCMOE_FIFO_MAX_STREAMS >= FIFO_NSTREAMS, "every stream has a counter");

/* How far incmoe_fifo_destroy has got: the proxy and the completers read it to know when to
   exit. */
typedef enum {
    FIFO_RUNNING = 0,
    FIFO_DRAIN,  /* the proxy posts what was pushed, then exits */
    FIFO_RETIRE, /* nothing more is posted: the completers retire what was, then exit */
} fifo_stop_t;

struct incmoe_fifo {
    fifo_shared_t *sh;
    incmoe_fifo_device_t dev;
    incmoe_fifo_allocator_t allocator;
    uint32_t capacity;
    uint32_t idle_us;

    /* --- proxy side --- */
    const fifo_transport_t *transport;
    void *ctx;
    uint64_t head;
    uint64_t posted[FIFO_NSTREAMS]; /* atomics: proxy publishes, completers read */
    incmoe_req_t reqs[FIFO_NSTREAMS][FIFO_REQ_RING];
    /* The dispatch of ticket t, beside reqs[DISPATCH][(t - 1) % FIFO_REQ_RING]: its block
       (the proxy writes it before publishing posted, the completer reads it) and how it ended
       (the completer writes it before publishing the completion, the proxy reads it when a
       combine names the dispatch). */
    incmoe_fifo_dispatch_t *blocks[FIFO_REQ_RING];
    int32_t dispatch_status[FIFO_REQ_RING];
    int stop; /* atomic fifo_stop_t */
    pthread_t proxy;
    pthread_t completer[FIFO_NSTREAMS];
    int proxy_started, completer_started[FIFO_NSTREAMS];
};

static const int fifo_streams[] = {INCMOE_STREAM_ALLGATHER, INCMOE_STREAM_REDUCESCATTER,
                                   INCMOE_STREAM_BARRIER, INCMOE_STREAM_DISPATCH,
                                   INCMOE_STREAM_COMBINE};

/* ------------------------------------------------------------ proxy sleeps */

/* The proxy side's idle sleeps (on the doorbell, on a stream's posted count): bounded by
   idle_us, since a device producer cannot wake a futex (the proxy then polls). */
static void fifo_idle_sleep(const incmoe_fifo_t *fifo, const uint32_t *word, uint32_t seen)
{
    struct timespec until = inc_clock_after_us(CLOCK_MONOTONIC, (long long)fifo->idle_us);
    counter_sleep(word, seen, &until, COUNTER_WAKE_ALL);
}

/* The low half of a 64-bit counter changes whenever the counter does: a sleep on it waits for
   the counter. */
static uint32_t *low_word(uint64_t *c)
{
    return (uint32_t *)c + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 1 : 0);
}

incmoe_stream_t incmoe_fifo_op_stream(incmoe_fifo_op_t op)
{
    int s = incmoe_fifo_dev_stream((uint32_t)op);
    return s < 0 ? (incmoe_stream_t)INC_STREAM_COUNT : (incmoe_stream_t)s;
}

static int32_t fifo_err(const incmoe_fifo_t *fifo)
{
    return incmoe_atomic_load_acquire32(&fifo->sh->error);
}

static fifo_stop_t fifo_stop_state(incmoe_fifo_t *fifo)
{
    return (fifo_stop_t)__atomic_load_n(&fifo->stop, __ATOMIC_ACQUIRE);
}

static void fifo_stop_set(incmoe_fifo_t *fifo, fifo_stop_t state)
{
    __atomic_store_n(&fifo->stop, (int)state, __ATOMIC_RELEASE);
}

static void fifo_fail(incmoe_fifo_t *fifo, incmoe_status_t status)
{
    int32_t expected = 0;
    if (incmoe_atomic_cas_acq_rel32(&fifo->sh->error, &expected, (int32_t)status))
        log_error("fifo", "proxy failed: %s", incmoe_strerror(status));
    /* Wake every waiter so it sees the error now rather than at its next timeout. */
    incmoe_counter_ring_all(&fifo->sh->bell);
    for (int s = 0; s < FIFO_NSTREAMS; s++)
        counter_wake(low_word(&fifo->posted[s]), COUNTER_WAKE_ALL);
    counter_wake(&fifo->sh->doorbell, COUNTER_WAKE_ALL);
}

/* ---------------------------------------------------------------- producer */

incmoe_status_t incmoe_fifo_push(incmoe_fifo_t *fifo, const incmoe_fifo_trigger_t *trigger,
                                 uint64_t *ticket_p, int timeout_ms)
{
    if (incmoe_fifo_dev_trigger_stream(trigger) < 0) {
        if (trigger->desc.op == INCMOE_FIFO_OP_DISPATCH)
            log_error("fifo", "a dispatch trigger without its dispatch block");
        else
            log_error("fifo",
                      "descriptor op %u is not an AllGather, ReduceScatter, barrier, dispatch or "
                      "combine",
                      trigger->desc.op);
        return INCMOE_ERR_INVALID_ARG;
    }
    double deadline = -1;
    for (;;) {
        incmoe_status_t st = incmoe_fifo_dev_try_push(&fifo->dev, trigger, ticket_p);
        if (st == INCMOE_OK)
            counter_wake(&fifo->sh->doorbell, COUNTER_WAKE_ALL);
        if (st != INCMOE_IN_PROGRESS)
            return st;
        /* Full: the proxy has not drained the oldest slot yet. */
        if (deadline < 0)
            deadline = inc_now_ms() + timeout_ms;
        else if (inc_now_ms() > deadline) {
            log_error("fifo", "FIFO of %u slots stayed full for %d ms", fifo->capacity, timeout_ms);
            return INCMOE_ERR_TIMEOUT;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

uint64_t incmoe_fifo_completed(incmoe_fifo_t *fifo, incmoe_stream_t stream)
{
    if ((unsigned)stream >= FIFO_NSTREAMS)
        return 0;
    return incmoe_fifo_dev_completed(&fifo->dev, (int)stream);
}

incmoe_status_t incmoe_fifo_error(incmoe_fifo_t *fifo)
{
    return (incmoe_status_t)fifo_err(fifo);
}

incmoe_status_t incmoe_fifo_device(incmoe_fifo_t *fifo, incmoe_fifo_device_t *dev_p)
{
    if (fifo == NULL || dev_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    *dev_p = fifo->dev;
    return INCMOE_OK;
}

incmoe_status_t incmoe_fifo_wait(incmoe_fifo_t *fifo, incmoe_stream_t stream, uint64_t ticket,
                                 int timeout_ms)
{
    if ((unsigned)stream >= FIFO_NSTREAMS)
        return INCMOE_ERR_INVALID_ARG;
    uint64_t *c = &fifo->sh->completed[stream];
    incmoe_status_t st =
        incmoe_counter_wait(c, ticket, &fifo->sh->bell, &fifo->sh->error, NULL, timeout_ms);
    if (st == INCMOE_ERR_TIMEOUT)
        log_error("fifo", "stream %d: collective %llu not complete after %d ms (%llu done)",
                  (int)stream, (unsigned long long)ticket, timeout_ms,
                  (unsigned long long)incmoe_atomic_load_acquire64(c));
    return st;
}

/* ------------------------------------------------------------------- proxy */

/* Waits until stream s has room for its collective n + 1 (at most FIFO_REQ_RING posted and
   incomplete) or the FIFO failed: a counter wait on the completions, which the completers
   publish and a failure rings. */
static void proxy_wait_room(incmoe_fifo_t *fifo, int s, uint64_t n)
{
    fifo_shared_t *sh = fifo->sh;
    if (n < FIFO_REQ_RING)
        return;
    while (incmoe_counter_wait(&sh->completed[s], n - FIFO_REQ_RING + 1, &sh->bell, &sh->error,
                               NULL, FIFO_ROOM_WAIT_MS) == INCMOE_ERR_TIMEOUT)
        ;
}

/* A combine's dispatch, by the ticket its descriptor names: once that dispatch completed, its
   request; NULL (logged) when this FIFO never posted it, no longer knows it, it failed, or the
   FIFO failed meanwhile. */
static const incmoe_req_t *proxy_named_dispatch(incmoe_fifo_t *fifo, uint64_t ticket)
{
    fifo_shared_t *sh = fifo->sh;
    const int s = INCMOE_STREAM_DISPATCH;
    uint64_t posted = __atomic_load_n(&fifo->posted[s], __ATOMIC_RELAXED);
    if (ticket == 0 || ticket > posted || posted - ticket >= FIFO_REQ_RING) {
        log_error("fifo",
                  "a combine names dispatch ticket %llu; this FIFO posted %llu dispatches "
                  "before it and knows the last %d",
                  (unsigned long long)ticket, (unsigned long long)posted, FIFO_REQ_RING);
        return NULL;
    }
    /* The library takes a combine only of a completed dispatch: wait for it here (a
       completion or a failure wakes this). */
    while (incmoe_counter_wait(&sh->completed[s], ticket, &sh->bell, &sh->error, NULL,
                               FIFO_ROOM_WAIT_MS) == INCMOE_ERR_TIMEOUT)
        ;
    if (fifo_err(fifo) != 0)
        return NULL;
    size_t i = (size_t)((ticket - 1) % FIFO_REQ_RING);
    incmoe_status_t st =
        (incmoe_status_t)__atomic_load_n(&fifo->dispatch_status[i], __ATOMIC_RELAXED);
    if (st != INCMOE_OK) {
        log_error("fifo", "a combine names dispatch ticket %llu, which failed (%s)",
                  (unsigned long long)ticket, incmoe_strerror(st));
        return NULL;
    }
    return &fifo->reqs[s][i];
}

static void *proxy_main(void *arg)
{
    incmoe_fifo_t *fifo = arg;
    fifo_shared_t *sh = fifo->sh;
    for (;;) {
        /* Read the doorbell before the slot: a push after this read changes the doorbell, so
           the sleep below returns at once. */
        uint32_t bell = __atomic_load_n(&sh->doorbell, __ATOMIC_ACQUIRE);
        incmoe_fifo_slot_t *slot = &sh->slots[fifo->head & (fifo->capacity - 1)];
        /* acquire: pairs with the producer's release of seq, so the trigger is whole */
        uint64_t seq = incmoe_atomic_load_acquire64(&slot->seq);
        if (seq != fifo->head + 1) {
            if (fifo_stop_state(fifo) != FIFO_RUNNING)
                break;
            fifo_idle_sleep(fifo, &sh->doorbell, bell);
            continue;
        }
        incmoe_fifo_trigger_t trig = slot->trigger;
        /* release: the producer that reclaims the slot sees our read done */
        incmoe_atomic_store_release64(&slot->seq, fifo->head + fifo->capacity);
        fifo->head++;

        int s = incmoe_fifo_dev_trigger_stream(&trig);
        if (s < 0) {
            fifo_fail(fifo, INCMOE_ERR_INVALID_ARG); /* a device producer wrote garbage */
            continue;
        }
        if (fifo_err(fifo) != 0)
            continue; /* failed: drain without posting; waiters see the error */
        const incmoe_req_t *named = NULL;
        if (s == INCMOE_STREAM_COMBINE &&
            (named = proxy_named_dispatch(fifo, trig.desc.offset)) == NULL) {
            fifo_fail(fifo, INCMOE_ERR_INVALID_ARG);
            continue;
        }
        uint64_t n = __atomic_load_n(&fifo->posted[s], __ATOMIC_RELAXED);
        proxy_wait_room(fifo, s, n);
        incmoe_req_t req;
        incmoe_status_t st = fifo->transport->post(fifo->ctx, &trig, named, &req);
        if (st != INCMOE_OK) {
            fifo_fail(fifo, st);
            continue;
        }
        fifo->reqs[s][n % FIFO_REQ_RING] = req;
        if (s == INCMOE_STREAM_DISPATCH)
            fifo->blocks[n % FIFO_REQ_RING] = trig.dispatch;
        /* release: the completer that sees n + 1 sees reqs[s][n] */
        __atomic_store_n(&fifo->posted[s], n + 1, __ATOMIC_RELEASE);
        counter_wake(low_word(&fifo->posted[s]), COUNTER_WAKE_ALL);
    }
    return NULL;
}

typedef struct {
    incmoe_fifo_t *fifo;
    int stream;
} completer_arg_t;

/* Dispatch n (0-based) completed with OK or a capacity failure: its result into the
   producer's block, before the completion is published.  INCMOE_OK, or the error that fails
   the FIFO. */
static incmoe_status_t completer_dispatch_result(incmoe_fifo_t *fifo, uint64_t n,
                                                 const incmoe_req_t *req)
{
    size_t i = (size_t)(n % FIFO_REQ_RING);
    incmoe_fifo_dispatch_t *block = fifo->blocks[i];
    incmoe_status_t st = fifo->transport->dispatch_result(fifo->ctx, req, block);
    if (st != INCMOE_OK && st != INCMOE_ERR_NO_MEMORY)
        return st;
    /* Plain stores: the release of the completion that follows publishes them. */
    block->status = (int32_t)st;
    __atomic_store_n(&fifo->dispatch_status[i], (int32_t)st, __ATOMIC_RELAXED);
    return INCMOE_OK;
}

static void *completer_main(void *arg)
{
    incmoe_fifo_t *fifo = ((completer_arg_t *)arg)->fifo;
    int s = ((completer_arg_t *)arg)->stream;
    free(arg);
    uint64_t done = 0;
    for (;;) {
        uint64_t posted = __atomic_load_n(&fifo->posted[s], __ATOMIC_ACQUIRE);
        if (posted == done) {
            if (fifo_err(fifo) != 0 || fifo_stop_state(fifo) == FIFO_RETIRE)
                break;
            fifo_idle_sleep(fifo, low_word(&fifo->posted[s]), (uint32_t)posted);
            continue;
        }
        incmoe_req_t req = fifo->reqs[s][done % FIFO_REQ_RING];
        incmoe_status_t st = fifo->transport->wait(fifo->ctx, &req);
        if (s == INCMOE_STREAM_DISPATCH && (st == INCMOE_OK || st == INCMOE_ERR_NO_MEMORY))
            st = completer_dispatch_result(fifo, done, &req);
        if (st != INCMOE_OK) {
            fifo_fail(fifo, st);
            break;
        }
        done++;
        incmoe_counter_publish(&fifo->sh->completed[s], done, &fifo->sh->bell);
    }
    return NULL;
}

/* --------------------------------------------------------------- lifecycle */

static void *heap_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void heap_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

/* One completer thread per stream; -1 when one could not start (those before it run). */
static int fifo_start_completers(incmoe_fifo_t *fifo)
{
    for (size_t i = 0; i < sizeof(fifo_streams) / sizeof(fifo_streams[0]); i++) {
        int s = fifo_streams[i];
        completer_arg_t *a = malloc(sizeof(*a));
        if (a == NULL)
            return -1;
        *a = (completer_arg_t){fifo, s};
        if (pthread_create(&fifo->completer[s], NULL, completer_main, a) != 0) {
            free(a);
            return -1;
        }
        fifo->completer_started[s] = 1;
    }
    return 0;
}

incmoe_status_t fifo_create_full(const fifo_transport_t *transport, void *ctx,
                                 const incmoe_fifo_params_t *params, incmoe_fifo_t **fifo_p)
{
    uint32_t mask = params ? params->field_mask : 0;
    uint32_t capacity = (mask & INCMOE_FIFO_PARAM_CAPACITY) ? params->capacity : 256;
    if (capacity < 2 || (capacity & (capacity - 1)) != 0 || capacity > (1u << 20)) {
        log_error("fifo", "capacity %u is not a power of two in [2, 2^20]", capacity);
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_fifo_allocator_t al = {heap_alloc, heap_free, NULL};
    if (mask & INCMOE_FIFO_PARAM_ALLOCATOR) {
        if (params->allocator.alloc == NULL || params->allocator.free == NULL) {
            log_error("fifo", "an allocator hook needs both alloc and free");
            return INCMOE_ERR_INVALID_ARG;
        }
        al = params->allocator;
    }
    incmoe_fifo_t *fifo = calloc(1, sizeof(*fifo));
    if (fifo == NULL)
        return INCMOE_ERR_NO_MEMORY;
    size_t bytes = sizeof(fifo_shared_t) + capacity * sizeof(incmoe_fifo_slot_t);
    fifo_shared_t *sh = al.alloc(al.ctx, bytes);
    if (sh == NULL)
        goto err_free_fifo;
    memset(sh, 0, bytes);
    for (uint32_t i = 0; i < capacity; i++)
        sh->slots[i].seq = i;
    fifo->sh = sh;
    fifo->allocator = al;
    fifo->capacity = capacity;
    fifo->idle_us =
        (mask & INCMOE_FIFO_PARAM_IDLE_US) && params->idle_us > 0 ? params->idle_us : FIFO_IDLE_US;
    fifo->dev = (incmoe_fifo_device_t){.slots = sh->slots,
                                       .tail = &sh->tail,
                                       .pushed = sh->pushed,
                                       .completed = sh->completed,
                                       .doorbell = &sh->doorbell,
                                       .bell = &sh->bell,
                                       .error = &sh->error,
                                       .capacity = capacity};
    fifo->transport = transport;
    fifo->ctx = ctx;

    if (pthread_create(&fifo->proxy, NULL, proxy_main, fifo) != 0)
        goto err_free_shared;
    fifo->proxy_started = 1;
    if (fifo_start_completers(fifo) != 0) {
        incmoe_fifo_destroy(fifo); /* stops the threads that started, frees the rest */
        return INCMOE_ERR_NO_MEMORY;
    }
    *fifo_p = fifo;
    return INCMOE_OK;

err_free_shared:
    al.free(al.ctx, sh);
err_free_fifo:
    free(fifo);
    return INCMOE_ERR_NO_MEMORY;
}

incmoe_status_t fifo_create_with(const fifo_transport_t *transport, void *ctx, uint32_t capacity,
                                 incmoe_fifo_t **fifo_p)
{
    incmoe_fifo_params_t p = {.field_mask = INCMOE_FIFO_PARAM_CAPACITY, .capacity = capacity};
    return fifo_create_full(transport, ctx, &p, fifo_p);
}

incmoe_status_t incmoe_fifo_destroy(incmoe_fifo_t *fifo)
{
    if (fifo == NULL)
        return INCMOE_OK;
    /* The proxy first, so that once the completers are told to stop nothing more is posted.
       The doorbell changes with the state, so the proxy cannot sleep through it; a completer
       sleeps on its posted count, which the state does not change, so one that looked just
       before sleeps out its idle bound. */
    fifo_stop_set(fifo, FIFO_DRAIN);
    __atomic_fetch_add(&fifo->sh->doorbell, 1, __ATOMIC_RELEASE);
    counter_wake(&fifo->sh->doorbell, COUNTER_WAKE_ALL);
    if (fifo->proxy_started)
        pthread_join(fifo->proxy, NULL);
    fifo_stop_set(fifo, FIFO_RETIRE);
    for (int s = 0; s < FIFO_NSTREAMS; s++) {
        counter_wake(low_word(&fifo->posted[s]), COUNTER_WAKE_ALL);
        if (fifo->completer_started[s])
            pthread_join(fifo->completer[s], NULL);
    }
    incmoe_status_t st = incmoe_fifo_error(fifo);
    fifo->allocator.free(fifo->allocator.ctx, fifo->sh);
    free(fifo);
    return st;
}

/* ------------------------------------------------- the communicator's side */

static incmoe_status_t comm_dispatch(incmoe_comm_t *comm, const incmoe_fifo_trigger_t *t,
                                     incmoe_req_t *req_p)
{
    const incmoe_fifo_desc_t *d = &t->desc;
    incmoe_dispatch_params_t p = {.send_mr = (incmoe_mr_t *)(uintptr_t)d->send_mr,
                                  .send_offset = d->send_offset,
                                  .nrows = d->length,
                                  .row_bytes = d->block_stride,
                                  .sets = t->dispatch->sets,
                                  .recv_mr = (incmoe_mr_t *)(uintptr_t)d->recv_mr,
                                  .recv_offset = d->recv_offset,
                                  .capacity = d->offset};
    return incmoe_dispatch(comm, &p, req_p);
}

static incmoe_status_t comm_combine(incmoe_comm_t *comm, const incmoe_fifo_trigger_t *t,
                                    const incmoe_req_t *dispatch, incmoe_req_t *req_p)
{
    const incmoe_fifo_desc_t *d = &t->desc;
    incmoe_combine_params_t p = {.dispatch = *dispatch,
                                 .send_mr = (incmoe_mr_t *)(uintptr_t)d->send_mr,
                                 .send_offset = d->send_offset,
                                 .recv_mr = (incmoe_mr_t *)(uintptr_t)d->recv_mr,
                                 .recv_offset = d->recv_offset,
                                 .row_count = d->block_stride,
                                 .dtype = (incmoe_dtype_t)d->dtype,
                                 .op = (incmoe_redop_t)d->redop};
    return incmoe_combine(comm, &p, req_p);
}

static incmoe_status_t comm_post(void *ctx, const incmoe_fifo_trigger_t *t,
                                 const incmoe_req_t *dispatch, incmoe_req_t *req_p)
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
    case INCMOE_FIFO_OP_DISPATCH:
        return comm_dispatch(comm, t, req_p);
    case INCMOE_FIFO_OP_COMBINE:
        return comm_combine(comm, t, dispatch, req_p);
    }
    return INCMOE_ERR_INVALID_ARG;
}

static incmoe_status_t comm_wait(void *ctx, const incmoe_req_t *req)
{
    return incmoe_wait((incmoe_comm_t *)ctx, req);
}

static incmoe_status_t comm_dispatch_result(void *ctx, const incmoe_req_t *req,
                                            incmoe_fifo_dispatch_t *block)
{
    incmoe_comm_t *comm = ctx;
    size_t nrecv = 0;
    incmoe_status_t st =
        incmoe_dispatch_result(comm, req, &nrecv, block->source, (size_t)block->source_rows);
    if (st == INCMOE_OK || st == INCMOE_ERR_NO_MEMORY)
        block->nrecv = nrecv;
    if (st == INCMOE_ERR_NO_MEMORY)
        (void)incmoe_dispatch_release(comm, req); /* nothing can combine it */
    return st;
}

const fifo_transport_t fifo_comm_transport = {comm_post, comm_wait, comm_dispatch_result};

incmoe_status_t incmoe_fifo_create_ex(incmoe_comm_t *comm, const incmoe_fifo_params_t *params,
                                      incmoe_fifo_t **fifo_p)
{
    if (comm == NULL || fifo_p == NULL) {
        log_error("fifo", "communicator and output pointer are required");
        return INCMOE_ERR_INVALID_ARG;
    }
    return fifo_create_full(&fifo_comm_transport, comm, params, fifo_p);
}

incmoe_status_t incmoe_fifo_create(incmoe_comm_t *comm, uint32_t capacity, incmoe_fifo_t **fifo_p)
{
    incmoe_fifo_params_t p = {.field_mask = INCMOE_FIFO_PARAM_CAPACITY, .capacity = capacity};
    return incmoe_fifo_create_ex(comm, &p, fifo_p);
}
