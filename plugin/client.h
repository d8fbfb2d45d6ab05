/*
 * client.h - the communicator's internals, shared by the in-network path
 * (client.c) and the ring baseline (ring.c).
 *
 * Threads: the caller's threads validate and queue collectives; one proxy
 * thread per communicator owns the UCX worker and does all communication.
 * Per stream, collectives retire in epoch order and the stream's completed
 * counter is the epoch of the last retired one.
 */
#ifndef INCMOE_CLIENT_H
#define INCMOE_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/incmoe.h"
#include "base/ucx_util.h"
#include "base/wire.h"

struct incmoe_mr {
    struct incmoe_mr *next;
    char *base;
    size_t length;
    ucp_mem_h memh;
};

typedef struct coll_op {
    struct coll_op *next;
    incmoe_stream_t stream;
    uint64_t epoch;
    incmoe_dtype_t dtype;
    incmoe_redop_t redop;
    char *send_base; /* the registered send region */
    size_t send_off; /* the caller's send_offset; may wrap (see op_send_at) */
    ucp_mem_h send_memh;
    char *recv_base;
    size_t recv_off;
    ucp_mem_h recv_memh;
    size_t stride;   /* block stride of the padded layout */
    size_t win;      /* window offset inside each block */
    uint64_t *bytes; /* [nranks] bytes each rank owns in the window (AllReduce: the vector) */
    uint64_t sig;

    /* Proxy-thread state. */
    int started;
    uint64_t next_chunk; /* send cursor: (chunk, root) in global order */
    int next_root;
    int all_issued; /* every DATA of this rank was handed to UCX */
    uint32_t sends_pending;
    uint64_t recv_expected;
    uint64_t recv_done;
    int barrier_done;
    int holds;        /* code still using op; UCX may complete sends inline */
    void *algo_state; /* ring.c's per-collective state */
} coll_op_t;

/*
 * Byte pos counted from the caller's offset.  The offset may "wrap" (be below
 * the region, as NCCL's CollNet staging windows are): the arithmetic is done
 * modulo 2^64 and only positions of bytes actually moved were checked to lie
 * inside the registered region.
 */
static inline char *op_send_at(const coll_op_t *op, size_t pos)
{
    return op->send_base + (size_t)(op->send_off + pos);
}

static inline char *op_recv_at(const coll_op_t *op, size_t pos)
{
    return op->recv_base + (size_t)(op->recv_off + pos);
}

typedef struct {
    uint64_t posted;            /* epochs handed out (under comm->lock) */
    _Atomic uint64_t completed; /* epoch of the last retired collective */
    coll_op_t *head, *tail;     /* active collectives in epoch order (proxy only) */
    uint32_t credits;           /* DATA messages this rank may still send (proxy only) */
} client_stream_t;

struct incmoe_comm {
    int rank, nranks;
    uint64_t job_id;
    incmoe_algo_t algo;
    int timeout_ms;
    size_t rndv_thresh;

    inc_ucx_node_t node;
    ucp_ep_h ep; /* to the switch */
    int wake_fd; /* eventfd: new work for the proxy */
    pthread_t proxy;
    int proxy_started;
    atomic_int stop;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    coll_op_t *submit_head, *submit_tail; /* queued by callers, drained by the proxy */
    struct incmoe_mr *mrs;
    atomic_int error; /* first error, 0 while healthy */
    char error_text[256];
    int abort_pending; /* tell the switch about a local failure */

    client_stream_t streams[INC_STREAM_COUNT];

    /* From JOIN_ACK. */
    int joined;
    uint32_t credits;
    uint64_t chunk_size;
    void **peer_addr; /* [nranks] ring listener "HOST:PORT" (NUL-terminated) */
    size_t *peer_addr_len;

    double last_rx, last_tx; /* liveness, proxy thread */
    uint32_t inflight_ctrl;  /* control sends not yet completed */
    int freeing;             /* collectives are gone: completions only clean up */

    void *ring; /* ring.c's state when algo == RING */
};

/* One message in flight; UCX 1.13 needs the sent header alive until completion. */
typedef struct {
    struct inc_wire_hdr hdr;
    incmoe_comm_t *comm;
    coll_op_t *op;       /* counted in op->sends_pending, or NULL */
    void *payload_owned; /* freed on completion */
} send_ctx_t;

/* A message from this rank, header filled but for the per-message fields. */
send_ctx_t *client_ctx(incmoe_comm_t *comm, inc_wire_msg_t msg);
/* Hands one message to UCX on ep; ctx belongs to the send from here on. */
void client_send_ep(incmoe_comm_t *comm, ucp_ep_h ep, send_ctx_t *ctx, const void *payload,
                    size_t length, ucp_mem_h memh);
/* The started collective (stream, epoch), or NULL. */
coll_op_t *client_find_op(incmoe_comm_t *comm, unsigned stream, uint64_t epoch);

/* Record the communicator's first error (later ones are only logged). */
void client_fail(incmoe_comm_t *comm, incmoe_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Proxy thread: the collective finished its part of the work; retire what can be retired. */
void client_op_progressed(incmoe_comm_t *comm, coll_op_t *op);
/* Retire the finished collectives at the front of a stream (they are freed). */
void client_stream_retire(incmoe_comm_t *comm, incmoe_stream_t stream);

#endif
