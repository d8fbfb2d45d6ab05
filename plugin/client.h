/*
 * client.h - the communicator's internals, shared by the files of the client.
 * They form layers: a file calls by name only files below it (comm.c reaches
 * the algorithms through their table), and what must reach up goes through a
 * pointer it was handed (a send's completion, a call handed to the proxy).
 *
 *   comm.c, fifo.c   lifecycle and the proxy loop, orchestrating the rest;
 *                    device-side posting over the public API
 *   post.c, join.c   the posting API and its checks; the join handshake
 *   dc_post.c        the posting calls of dispatch and combine, over post.c's
 *   innet.c, ring.c, the algorithms, behind algo.h (algo.c names them);
 *   a2a.c            a2a.c runs ring.c's entries over the full mesh
 *   dc_peer.c        dispatch and combine between the ranks (ring, a2a)
 *   mesh.c           the connections between the ranks (ring, a2a)
 *   coll.c           the collectives' common life: start, local part, retire
 *   dc.c             what dispatch and combine share: the kept dispatches,
 *                    the plan applied, the local rows, the outcomes
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
#include "base/dc_plan.h"
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

    /* Dispatch and combine (dc.c); recv_expected and recv_done count rows for them. */
    struct client_dc *dc;   /* the dispatch's record: a dispatch's own, or the one a combine
                               names */
    size_t rows;            /* dispatch: this rank's rows (T); combine: its partials (R) */
    size_t row_bytes;       /* bytes of one row (combine: of one partial row) */
    size_t capacity;        /* dispatch: rows the receive range holds */
    int planned;            /* the plan arrived (counts, verdict): it may complete */
    int dc_posted;          /* in-network: its POST or SMALL went */
    incmoe_status_t status; /* the plan's verdict: not OK fails this collective alone */
    char *why;              /* its reason (owned), else NULL */
    char *refused;          /* this rank refused its arguments (incmoe.h, "A refusal"): why, at most
                               INCMOE_REFUSAL_MAX - 1 bytes (owned); its plan carries it.  Else NULL */
} coll_op_t;

/*
 * What the library keeps of a dispatch (dc.c), from its post until a combine
 * naming it completes or incmoe_dispatch_release.  The posting thread fills
 * the first part; the proxy the plan's part, before the dispatch completes;
 * after that only the fields under comm->lock change.
 */
typedef struct client_dc {
    struct client_dc *next; /* comm->dcs, under comm->lock */
    uint64_t epoch;         /* the dispatch's (0 until it is queued) */
    int kept;               /* in comm->dcs */
    int complete;           /* the dispatch retired, with status (under comm->lock) */
    incmoe_status_t status;
    int combining; /* a combine naming it is in flight (under comm->lock) */
    size_t nrows, row_bytes, words;
    uint64_t *sets;   /* [nrows * words], this rank's copy */
    uint32_t *sent;   /* [nranks]: its rows whose set holds d (the count row) */
    uint32_t *recvd;  /* [nranks]: rows from each source (the plan) */
    uint64_t *base;   /* [nranks + 1]: first received row of each source; base[nranks] = R */
    uint32_t *own_at; /* [nrows]: where a row whose set holds this rank was received, else
                         UINT32_MAX */
    size_t nrecv;     /* R */
    uint32_t *source; /* [2 R]: (rank, row) of each received row, as they land */
} client_dc_t;

/* Does row's set hold rank r? */
static inline int client_dc_in_set(const client_dc_t *dc, size_t row, int r)
{
    return (int)((dc->sets[row * dc->words + (size_t)r / 64] >> ((unsigned)r % 64)) & 1u);
}

/* How a dispatch or combine that failed alone reads later (incmoe_test, incmoe_req_error). */
typedef struct {
    uint64_t epoch;
    incmoe_status_t status;
    char *why; /* owned */
} client_outcome_t;

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
    ucp_ep_h ep;              /* to the switch */
    struct client_mesh *mesh; /* to the other ranks (mesh.c), for the algorithms that use it */
    int wake_fd;              /* eventfd: new work for the proxy */
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
    client_dc_t *dcs;              /* kept dispatches (dc.c), under lock */
    size_t ndcs;                   /* how many: at most INCMOE_STREAM_WINDOW */
    client_outcome_t *outcomes[2]; /* dispatch, combine: [INCMOE_STREAM_WINDOW] by epoch, the
                                      failures, allocated at the first (under lock) */

    /* From JOIN_ACK. */
    int joined;
    uint32_t credits;
    uint64_t chunk_size;
    void **peer_addr; /* [nranks] UCX worker addresses (each followed by INC_UCX_ADDR_SLACK
                         zero bytes, see base/ucx_addr.h), empty when not shared */
    size_t *peer_addr_len;
    uint8_t peer_token[INCMOE_WIRE_TOKEN]; /* the ranks show it each other in PEER_HELLO */
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
    int eager;                 /* eager whatever its size (a message the switch takes eager) */
    int to;                    /* the rank it goes to, -1: the switch (a failure names it) */
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
   from here on.  ep NULL (a connection closing): it completes at once, as canceled. */
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

/* --- posting, on the caller's threads (post.c; dc_post.c posts dispatch and combine) --- */

/* Is [offset, offset+length) inside the region? */
int client_range_ok(const struct incmoe_mr *mr, size_t offset, size_t length);
/* A collective of the stream being posted, with its zeroed bytes[nranks]; NULL out of
   memory. */
coll_op_t *client_op_new(incmoe_comm_t *comm, incmoe_stream_t stream);
/* Queue op for the proxy, first waiting (bounded) for room in its stream's window; the epoch
   is fixed here and *req_p filled.  On failure op is freed and nothing was posted. */
incmoe_status_t client_post_submit(incmoe_comm_t *comm, coll_op_t *op, incmoe_req_t *req_p);
/* A collective this rank cannot run (op, if not NULL, is freed): the job fails with the
   reason, so the other ranks do not wait for it.  Returns st. */
incmoe_status_t client_post_reject(incmoe_comm_t *comm, coll_op_t *op, incmoe_status_t st,
                                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* --- dispatch and combine: kept dispatches, plans, local rows, outcomes (dc.c) --- */

/* A dispatch's record for nrows rows of this rank, its sets zeroed; NULL out of memory. */
client_dc_t *client_dc_new(int nranks, size_t nrows, size_t row_bytes);
/* Free a record that is not kept. */
void client_dc_free(client_dc_t *dc);
/* Under comm->lock, the dispatch's epoch fixed: keep its record; 0 (nothing changed) when
   INCMOE_STREAM_WINDOW dispatches are kept already. */
int client_dc_keep_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Under comm->lock: the kept dispatch of that epoch, or NULL. */
client_dc_t *client_dc_find_locked(incmoe_comm_t *comm, uint64_t epoch);
/* Under comm->lock: stop keeping a record and free it. */
void client_dc_unkeep_locked(incmoe_comm_t *comm, client_dc_t *dc);
/* Under comm->lock: a dispatch or combine retires: its failure is kept for incmoe_test, the
   dispatch's record completes, and a combine's releases it on success. */
void client_dc_retire_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Under comm->lock: a dispatch or combine goes without retiring (rejected, or closing). */
void client_dc_drop_locked(coll_op_t *op);
/* Under comm->lock: how a completed dispatch or combine ended; *why_p its reason ("" if it
   succeeded). */
incmoe_status_t client_dc_outcome_locked(incmoe_comm_t *comm, const incmoe_req_t *req,
                                         const char **why_p);
/* Closing: free every kept record and kept failure. */
void client_dc_close_all(incmoe_comm_t *comm);

/* Proxy thread.  A dispatch's plan: recvd[s] rows from each source and the shared verdict.
   OK: the own rows are in place and the rest is expected (recv_expected, in rows); a failed
   verdict completes the dispatch with it, nothing written.  A plan that contradicts this
   rank's own count or capacity fails the communicator (returned). */
incmoe_status_t client_dc_plan_dispatch(incmoe_comm_t *comm, coll_op_t *op, const uint32_t *recvd,
                                        const inc_dc_verdict_t *v);
/* Proxy thread.  A combine's plan: OK: every row of this rank that no other rank contributes
   to is written (its own partial, or zeros) and the others are expected (recv_expected, in
   rows); a failed verdict completes the combine with it. */
void client_dc_plan_combine(incmoe_comm_t *comm, coll_op_t *op, const inc_dc_verdict_t *v);
/* Proxy thread, a single rank: the plan of the dispatch or combine, made here. */
void client_dc_plan_alone(incmoe_comm_t *comm, coll_op_t *op);
/* Where n rows of source src, from its pos-th row for this rank on, land; NULL (nothing
   changed) if they fall outside what the plan announced. */
char *client_dc_recv_rows(coll_op_t *op, int src, uint64_t pos, uint64_t n);
/* The source table of those rows: rows[k] is the source row of the (pos + k)-th. */
void client_dc_set_sources(coll_op_t *op, int src, uint64_t pos, uint64_t n, const uint32_t *rows);
/* This rank's own partial of its row (its set holds this rank), else NULL. */
const char *client_dc_own_partial(const incmoe_comm_t *comm, const coll_op_t *op, size_t row);
/* Combine: row's result from others, the reduction of the other contributors' partials in
   ascending rank order: recv = own partial op others (own last), or others alone. */
void client_dc_combine_row(const incmoe_comm_t *comm, coll_op_t *op, size_t row,
                           const void *others);

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

/* --- the connections between the ranks (mesh.c) --- */

typedef struct client_mesh client_mesh_t;

/* An algorithm's message handler (as client_algo_ops_t.on_message): the mesh hands it what
   arrived from a peer before the token was known, once the peer's HELLO was checked. */
typedef ucs_status_t (*client_mesh_deliver_t)(incmoe_comm_t *comm, const struct inc_wire_hdr *h,
                                              void *data, size_t length,
                                              const ucp_am_recv_param_t *param);

/* A message from another rank kept until it can be handled: an eager payload copied, a
   rendezvous one's descriptor held. */
typedef struct client_kept {
    struct client_kept *next; /* the keeper's list */
    struct inc_wire_hdr hdr;
    ucp_ep_h from; /* the endpoint it arrived from, or NULL */
    void *desc;    /* rendezvous descriptor, or */
    void *copy;    /* the eager payload */
    size_t length;
} client_kept_t;

/* Keep a message as its handler was given it; NULL when out of memory. */
client_kept_t *client_kept_new(const struct inc_wire_hdr *h, void *data, size_t length,
                               const ucp_am_recv_param_t *param);
/* Hand a kept message to deliver as UCX would have, then free it (releasing a descriptor the
   handler did not take). */
void client_kept_deliver(incmoe_comm_t *comm, client_kept_t *k, client_mesh_deliver_t deliver);
/* Free a kept message unhandled. */
void client_kept_free(incmoe_comm_t *comm, client_kept_t *k);

/* Before joining (peers may send before the JOIN_ACK is read): comm->mesh, no endpoint yet. */
incmoe_status_t client_mesh_open(incmoe_comm_t *comm, client_mesh_deliver_t deliver);
/* On the creating thread, after JOIN_ACK: endpoints to the span ranks after this one, and a
   bounded wait until the span ranks before it bound theirs (span 1: the ring's neighbours;
   nranks - 1: every rank). */
incmoe_status_t client_mesh_connect(incmoe_comm_t *comm, int span);
/* Proxy thread: endpoints to every rank not connected yet, their HELLOs sent; an error fails
   the communicator. */
incmoe_status_t client_mesh_open_all(incmoe_comm_t *comm);
/* This rank's endpoint to peer, or NULL before it was opened or once the mesh is closing (a
   send on NULL completes as canceled). */
ucp_ep_h client_mesh_ep(const incmoe_comm_t *comm, int peer);
/* The reason of a connection lost while nothing was in flight, or NULL. */
const char *client_mesh_broken(const incmoe_comm_t *comm);
/* Every message from another rank first: the sender's rank (>= 0) when the algorithm is to
   handle it, or -1 when the mesh took it (a HELLO, one held or dropped; *ret_p is the answer
   to UCX). */
int client_mesh_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                           size_t length, const ucp_am_recv_param_t *param, ucs_status_t *ret_p);
/* Closing, with the worker still alive and no proxy running: the endpoints and comm->mesh. */
void client_mesh_close(incmoe_comm_t *comm);

/* --- dispatch and combine between the ranks, over the mesh (dc_peer.c) --- */

typedef struct client_dc_peer client_dc_peer_t;

/* Before joining: its state (the credits are JOIN_ACK's, taken when first needed). */
client_dc_peer_t *client_dc_peer_open(incmoe_comm_t *comm);
/* A started dispatch or combine of more than one rank: the plans out, and what it can send. */
void client_dc_peer_start(incmoe_comm_t *comm, client_dc_peer_t *dcp, coll_op_t *op);
/* A PEER_* message the mesh took as from rank `from`. */
ucs_status_t client_dc_peer_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                                       const struct inc_wire_hdr *h, void *data, size_t length,
                                       const ucp_am_recv_param_t *param);
/* Every proxy loop turn: send what the windows and credits let go now. */
void client_dc_peer_progress(incmoe_comm_t *comm, client_dc_peer_t *dcp);
/* Closing, after the mesh closed: free it all (receives still landing are orphaned). */
void client_dc_peer_close(incmoe_comm_t *comm, client_dc_peer_t *dcp);

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
