/*
 * client.h - the communicator's internals, shared by the files of the client.
 * They form layers: a file calls by name only files below it (comm.c reaches
 * the algorithms through their table), and what must reach up goes through a
 * pointer it was handed (a send's completion, a call handed to the proxy).
 *
 *   comm.c, fifo.c   lifecycle and the proxy loop, orchestrating the rest;
 *                    device-side posting over the public API
 *   post.c, join.c   the posting API and its checks; the join handshake
 *   innet.c, ring.c  the algorithms, behind algo.h (algo.c names them)
 *   coll.c           the collectives' common life: start, local part, retire
 *   send.c, mr.c     messages out; registered memory
 *   notify.c         the first error, wake-ups, hand-offs between the threads;
 *   counter.c        beside it, the counters and the sleep fifo.c waits with
 *
 * Threads: the caller's threads validate and queue collectives; one proxy
 * thread per communicator owns the UCX worker and does all communication,
 * memory mapping included.  Per stream, collectives retire in epoch order and
 * the stream's completed counter is the epoch of the last retired one.
 */
#ifndef INCMOE_CLIENT_H
#define INCMOE_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "incmoe/incmoe.h"
#include "base/ucx_util.h"
#include "base/wire.h"

struct client_algo_ops;

struct incmoe_mr {
    struct incmoe_mr *next;
    char *base;
    size_t length;
    ucp_mem_h memh;
    unsigned holds; /* collectives (or posting calls) using the region, under comm->lock */
};

/*
 * How a send tells its sender it is done, as UCX's uct_completion_t: the
 * sender hands one in with each message, the transport counts the message in
 * (count++) when it takes it and out when UCX completes it, and calls func
 * (when not NULL) each time count returns to zero.  A failed send still
 * counts out; the failure itself fails the communicator (client_fail).
 */
typedef struct client_completion client_completion_t;
struct client_completion {
    void (*func)(client_completion_t *self);
    uint32_t count; /* messages taken and not yet completed */
};

typedef struct coll_op {
    struct coll_op *next;
    incmoe_stream_t stream;
    uint64_t epoch;
    incmoe_dtype_t dtype;
    incmoe_redop_t redop;
    struct incmoe_mr *send_mr; /* held until the collective is freed (see mr.c) */
    struct incmoe_mr *recv_mr;
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
    uint64_t next_chunk; /* in-network send cursor: (chunk, root) in global order */
    int next_root;
    int all_issued;           /* every DATA of this rank was handed to UCX */
    client_completion_t sent; /* its messages in flight; func retires (coll.c) */
    incmoe_comm_t *comm;      /* for sent.func */
    uint64_t recv_expected;
    uint64_t recv_accepted; /* result bytes taken on, landed or still landing */
    uint64_t recv_done;
    int barrier_done;
    int small;        /* in-network small form: one SMALL out, one SMALL_FWD back (wire.h) */
    int small_landed; /* its SMALL_FWD taken on (landing, if rendezvous, or landed) */
    int holds;        /* code still using op; UCX may complete sends inline */
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
} client_stream_t;

/* The epoch of the stream's last retired collective; what it retired is visible after. */
static inline uint64_t client_stream_completed(const client_stream_t *s)
{
    return atomic_load_explicit(&s->completed, memory_order_acquire);
}

/* Work a caller hands to the proxy thread (see client_proxy_call). */
typedef struct client_call {
    struct client_call *next;
    incmoe_status_t (*fn)(incmoe_comm_t *comm, void *arg);
    void *arg;
    incmoe_status_t status;
    int done;
} client_call_t;

struct incmoe_comm {
    int rank, nranks;
    uint64_t job_id;
    const struct client_algo_ops *ops; /* the algorithm moving the data */
    void *algo;                        /* its state */
    int timeout_ms;
    int progress_timeout_ms; /* asked of the switch in JOIN; 0: the switch's */
    int releasing;           /* incmoe_comm_release: closing waits for no one */
    size_t rndv_thresh;

    struct sockaddr_storage switch_ss; /* params->switch_addr, parsed once */
    socklen_t switch_ss_len;
    inc_ucx_node_t node;
    ucp_ep_h ep; /* to the switch */
    int wake_fd; /* eventfd: new work for the proxy */
    pthread_t proxy;
    atomic_int stop;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    coll_op_t *submit_head, *submit_tail; /* queued by callers, drained by the proxy */
    client_call_t *calls;                 /* queued by callers, run by the proxy */
    struct incmoe_mr *mrs;
    atomic_int error; /* first error, 0 while healthy */
    char error_text[256];
    int abort_pending; /* tell the switch about a local failure */

    client_stream_t streams[INC_STREAM_COUNT];

    /* From JOIN_ACK. */
    int joined;
    uint32_t credits;
    uint64_t chunk_size;
    void **peer_addr; /* [nranks] UCX worker addresses (ring), empty when not shared */
    size_t *peer_addr_len;
    uint8_t ring_token[INCMOE_WIRE_TOKEN]; /* ring neighbours show it in RING_HELLO */
    ucp_address_t *worker_addr;            /* this rank's, for the bootstrap and JOIN */
    size_t worker_addr_len;

    double last_rx, last_tx;       /* liveness, proxy thread */
    client_completion_t ctrl_sent; /* control sends in flight (no func: only counted) */
    int freeing;                   /* collectives are gone: completions only clean up */
};

/* One message in flight; UCX 1.13 needs the sent header alive until completion. */
typedef struct {
    struct inc_wire_hdr hdr;
    incmoe_comm_t *comm;
    client_completion_t *comp; /* counts this message in flight */
    void *payload_owned;       /* freed on completion */
} send_ctx_t;

/* Each file's functions under its heading, bottom-up; post.c's extra call is in post.h. */

/* --- how the threads tell each other: errors, wake-ups, work for the proxy (notify.c) --- */

/* Record the communicator's first error (later ones are only logged) and wake every waiter. */
void client_fail(incmoe_comm_t *comm, incmoe_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A local failure the other ranks must hear about, or they would wait forever. */
void client_fail_job(incmoe_comm_t *comm, incmoe_status_t status, const char *text);
/* The bound on closing one endpoint: short once the communicator failed, when the peer
   may be stopped and the process must not linger past the error. */
int client_close_bound_ms(const incmoe_comm_t *comm);
/* Wake the proxy thread: new work is queued. */
void client_wake(incmoe_comm_t *comm);
/* Run fn(comm, arg) on the proxy thread and return its status (the caller blocks). */
incmoe_status_t client_proxy_call(incmoe_comm_t *comm,
                                  incmoe_status_t (*fn)(incmoe_comm_t *comm, void *arg), void *arg);
/* Proxy thread: run what callers handed over; a call's caller may return once it is done. */
void client_proxy_run_calls(incmoe_comm_t *comm);
/* Under comm->lock: queue a collective for the proxy, behind those queued before. */
void client_proxy_submit_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Proxy thread: the queued collectives in order (linked by next), the queue emptied. */
coll_op_t *client_proxy_take_submissions(incmoe_comm_t *comm);

/* --- messages out (send.c) --- */

/* A message from this rank, header filled but for the per-message fields. */
send_ctx_t *client_ctx(incmoe_comm_t *comm, inc_wire_msg_t msg);
/* Hands one message to UCX on ep, counted in comp until it completes; ctx belongs to the send
   from here on. */
void client_send_ep(incmoe_comm_t *comm, ucp_ep_h ep, send_ctx_t *ctx, const void *payload,
                    size_t length, ucp_mem_h memh, client_completion_t *comp);
/* The same, to the switch. */
void client_send(incmoe_comm_t *comm, send_ctx_t *ctx, const void *payload, size_t length,
                 ucp_mem_h memh, client_completion_t *comp);
/* A message without payload to the switch (HEARTBEAT, LEAVE). */
void client_send_ctrl(incmoe_comm_t *comm, inc_wire_msg_t msg);
/* ERROR to the switch, which ends the job for every rank with this reason. */
void client_send_error(incmoe_comm_t *comm, incmoe_status_t status, const char *text);
/* POST of a collective to the switch, counted in comp. */
void client_send_post(incmoe_comm_t *comm, const coll_op_t *op, client_completion_t *comp);

/* --- registered memory (mr.c) --- */

/* Hold both regions for a collective being posted; 0 if one is not registered here. */
int client_mr_hold(incmoe_comm_t *comm, coll_op_t *op, struct incmoe_mr *send_mr,
                   struct incmoe_mr *recv_mr);
/* Under comm->lock: the collective no longer uses its regions. */
void client_mr_release_locked(coll_op_t *op);
/* Closing, after the worker is gone: unmap and free every region. */
void client_mr_close_all(incmoe_comm_t *comm);

/* --- the collectives' common life, proxy thread (coll.c) --- */

/* Append a drained submission to its stream and do its local part; 1 when the algorithm must
   move its data (start it), 0 when it needs no more from here (it may be freed already). */
int client_op_start(incmoe_comm_t *comm, coll_op_t *op);
/* The started collective (stream, epoch), or NULL. */
coll_op_t *client_find_op(incmoe_comm_t *comm, unsigned stream, uint64_t epoch);
/* The collective finished its part of the work; retire what can be retired. */
void client_op_progressed(incmoe_comm_t *comm, coll_op_t *op);
/* Retire the finished collectives at the front of a stream (they are freed). */
void client_stream_retire(incmoe_comm_t *comm, incmoe_stream_t stream);
/* Free a collective that never retired (rejected, or its communicator is closing). */
void client_op_free(incmoe_comm_t *comm, coll_op_t *op);
/* DONE from the switch: a barrier completed. */
void client_on_done(incmoe_comm_t *comm, const struct inc_wire_hdr *h);

/* --- the join handshake (join.c) --- */

/* On the creating thread, the message handler set and the algorithm open: connect to the
   switch, JOIN (with this rank's worker address if share_addr), wait (bounded) for JOIN_ACK. */
incmoe_status_t client_join(incmoe_comm_t *comm, const incmoe_comm_params_t *params,
                            int share_addr);
/* JOIN_ACK: the job formed; keep the peers' addresses and the flow-control grant. */
void client_on_join_ack(incmoe_comm_t *comm, const char *data, size_t length);

/* --- lifecycle and the proxy loop (comm.c) --- */

/* The worker's active-message handler: every message to this communicator arrives here. */
ucs_status_t client_am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param);
/* Proxy thread: start every collective the posting calls queued since the last turn. */
void client_drain_submissions(incmoe_comm_t *comm);

#endif
