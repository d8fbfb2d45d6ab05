/*
 * client.h - the types every file of the client shares: the communicator, a
 * collective, a send's completion, a stream, a call handed to the proxy.  Each
 * file's functions are declared in a header of its own (notify.h, send.h, mr.h,
 * submit.h for post.c, dc_shared.h, coll.h, mesh.h, dc_peer.h, join.h, comm.h;
 * algo.h, innet.h, post.h, fifo.h, counter.h), which a caller includes.
 * The files form layers: a file calls by name only files below it (comm.c reaches
 * the algorithms through their table), and what must reach up goes through a
 * pointer it was handed (a send's completion, a call handed to the proxy).
 *
 *   comm.c, fifo.c   lifecycle and the proxy loop, orchestrating the rest;
 *                    device-side posting over the public API
 *   post.c, join.c   the posting API and its checks; the join handshake
 *   dc_post.c        the posting calls of dispatch and combine, over post.c's
 *   ll_post.c        their low-latency form's checks, for dc_post.c, over post.c's
 *   innet.c, ring.c, the algorithms, behind algo.h (algo.c names them);
 *   a2a.c            a2a.c runs ring.c's entries over the full mesh
 *   dc_peer.c        dispatch and combine between the ranks (ring, a2a), and
 *   ll_peer.c        their low-latency form
 *   mesh.c           the connections between the ranks (ring, a2a)
 *   coll.c           the collectives' common life: start, local part, retire
 *   ll_shared.c      the low-latency form's messages taken and decided, over
 *   ll_pack.c,       what this rank sends, and where rows go (regions, the
 *   ll_place.c       fold, the own partial last); both paths use them
 *   dc_shared.c      what dispatch and combine share: the kept dispatches,
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

#include "base/ucx_util.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"

struct client_algo_ops;
struct client_dc;
struct client_ll;
struct client_mesh;
struct client_outcome;
struct incmoe_mr;

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

    /* Dispatch and combine (dc_shared.c); recv_expected and recv_done count rows for them. */
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
    incmoe_status_t refused_status; /* the refusal's: INCMOE_ERR_INVALID_ARG (the caller's), or
                                       INCMOE_ERR_NO_MEMORY (the low-latency form's bounds) */
    struct client_ll *ll; /* the low-latency form (ll_shared.h): what came from the others */
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

typedef enum {
    CLIENT_SHRINK_IDLE = 0, /* never asked */
    CLIENT_SHRINK_WAITING,  /* SHRINK sent, no answer yet */
    CLIENT_SHRINK_ANSWERED, /* over: shrink_status and shrink_ack hold the answer */
} client_shrink_state_t;

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
    struct client_dc *dcs;              /* kept dispatches (dc_shared.c), under lock */
    size_t ndcs;                        /* how many: at most INCMOE_STREAM_WINDOW */
    struct client_outcome *outcomes[2]; /* dispatch, combine: [INCMOE_STREAM_WINDOW] by epoch, the
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

    /* What incmoe_comm_shrink needs to join the new job as this one was joined: the switch's
       address as given, the key as resolved (cleansed when freed), the algorithm. */
    char *switch_addr;
    char secret[INCMOE_MAX_SECRET];
    size_t secret_len;
    incmoe_algo_t algo_id;
    /* shrink.c's, under lock: the SHRINK asked and the switch's answer. */
    client_shrink_state_t shrink_state;
    incmoe_status_t shrink_status;
    struct inc_wire_shrink_ack shrink_ack;
    int switch_lost; /* the endpoint to the switch failed */

    double last_rx, last_tx;       /* liveness, proxy thread */
    client_completion_t ctrl_sent; /* control sends in flight (no func: only counted) */
    int freeing;                   /* collectives are gone: completions only clean up */
};

#endif
