/*
 * ring.c - the ring baseline: bandwidth-optimal, chunk-pipelined ring
 * AllGather, ReduceScatter and AllReduce between the ranks themselves, over
 * the same UCX transport and behind the same API as the in-network path.
 *
 * Ranks find each other through the switch (JOIN_ACK carries each rank's UCX
 * worker address and a random ring token of the job); afterwards the switch carries no data, only
 * the barrier and liveness.  Each rank talks to its right neighbour (r+1) and hears from its left
 * (r-1).  Every chunk moves on as soon as it arrives, so the N-1 ring steps overlap:
 *
 *   AllGather      rank r injects its block; a receiver stores a chunk of
 *                  block b and forwards it unless it is the last one to get it
 *                  (r == b-1).
 *   ReduceScatter  rank r injects its partial of block r-1; a receiver adds its
 *                  own partial to the incoming running sum and forwards it,
 *                  except for its own block, where the sum is final.  The
 *                  order of additions is fixed by the ring, so results are
 *                  reproducible.
 *   AllReduce      a ReduceScatter of N element-aligned blocks, each finished
 *                  block then circulating as an AllGather.
 *
 * Data for a collective this rank has not posted yet waits: a rendezvous
 * payload stays at the sender until the collective is posted, an eager one
 * is copied.  The communicator drives the ring through client_ring_ops
 * (algo.h); the barrier and liveness stay with the switch.
 */
#include "algo.h"
#include "base/log.h"
#include "base/reduce.h"
#include "base/text.h"
#include "base/ucx_addr.h"

#include <openssl/crypto.h>

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "base/clock.h"

#define SUBSYS "ring"

typedef struct ring_pending {
    struct ring_pending *next;
    struct inc_wire_hdr hdr;
    void *desc; /* rendezvous descriptor, or */
    void *copy; /* the eager payload */
    size_t length;
} ring_pending_t;

/*
 * Each rank creates an endpoint to its right neighbour's worker address, so
 * nothing listens.  The left neighbour's RING_HELLO, carrying the job's ring
 * token, binds the endpoint its messages arrive from (UCX names it with
 * UCP_AM_SEND_FLAG_REPLY); ring data from any other endpoint is refused.  A
 * dead left neighbour is the switch's to report (it fails the job).
 */
typedef struct {
    ucp_ep_h right;   /* we connected to it */
    ucp_ep_h left_rx; /* the endpoint the left neighbour's HELLO arrived from */
    int hello_from_left;
    /* A HELLO that came before this rank's JOIN_ACK (which holds the token): checked by
       ring_connect.  Data from its endpoint meanwhile can only wait as pending, since no
       collective is posted before ring_connect returns. */
    int hello_pending;
    uint32_t hello_rank;
    uint8_t hello_token[INCMOE_WIRE_TOKEN];
    ring_pending_t *pending;
    char broken[160]; /* a neighbour connection failed while nothing was in flight */
} ring_t;

typedef struct {
    incmoe_comm_t *comm;
    coll_op_t *op;
    struct inc_wire_hdr hdr;
    char *dest; /* where the received bytes go (gather) */
    char *tmp;  /* running sum (reduce) */
} ring_recv_t;

static int ring_right(const incmoe_comm_t *comm)
{
    return (comm->rank + 1) % comm->nranks;
}

/* AllReduce's blocks: element-aligned, the first count % N one element longer. */
static void ar_block(const coll_op_t *op, int nranks, int b, uint64_t *offset_p, uint64_t *bytes_p)
{
    size_t esize = incmoe_dtype_size(op->dtype);
    uint64_t count = op->bytes[0] / esize;
    uint64_t base = count / (uint64_t)nranks, extra = count % (uint64_t)nranks;
    uint64_t first = (uint64_t)b * base + ((uint64_t)b < extra ? (uint64_t)b : extra);
    *offset_p = first * esize;
    *bytes_p = (base + ((uint64_t)b < extra ? 1 : 0)) * esize;
}

/* Bytes of block b and where block b starts in the send and receive buffers. */
static uint64_t block_bytes(const incmoe_comm_t *comm, const coll_op_t *op, int b, char **send_p,
                            char **recv_p)
{
    if (op->stream == INCMOE_STREAM_ALLREDUCE) {
        uint64_t off, bytes;
        ar_block(op, comm->nranks, b, &off, &bytes);
        *send_p = op_send_at(op, off);
        *recv_p = op_recv_at(op, off);
        return bytes;
    }
    if (op->stream == INCMOE_STREAM_ALLGATHER) {
        *send_p = op_send_at(op, 0); /* only the own block is sent from here */
        *recv_p = op_recv_at(op, (size_t)b * op->stride + op->win);
    } else {
        *send_p = op_send_at(op, (size_t)b * op->stride + op->win);
        *recv_p = op_recv_at(op, 0); /* only the own block is received */
    }
    return op->bytes[b];
}

static void ring_send(incmoe_comm_t *comm, coll_op_t *op, inc_wire_msg_t msg, int block,
                      uint64_t offset, uint64_t length, uint64_t total, const void *payload,
                      ucp_mem_h memh, void *owned)
{
    ring_t *ring = comm->algo;
    send_ctx_t *ctx = client_ctx(comm, msg);
    if (ctx == NULL) {
        free(owned);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a ring message");
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.root = (uint32_t)block;
    ctx->hdr.offset = offset;
    ctx->hdr.length = length;
    ctx->hdr.total = total;
    ctx->hdr.chunk = (uint32_t)(offset / comm->chunk_size);
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    ctx->payload_owned = owned;
    client_send_ep(comm, ring->right, ctx, payload, length, memh, &op->sent);
}

/* Send every chunk of [base, base+bytes) of a block to the right. */
static void ring_send_block(incmoe_comm_t *comm, coll_op_t *op, inc_wire_msg_t msg, int block,
                            const char *base, uint64_t bytes)
{
    for (uint64_t off = 0; off < bytes; off += comm->chunk_size) {
        uint64_t len = bytes - off < comm->chunk_size ? bytes - off : comm->chunk_size;
        ring_send(comm, op, msg, block, off, len, bytes, base + off, op->send_memh, NULL);
    }
}

static ucs_status_t ring_on_data(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param);

/* Data that arrived before this rank posted the collective. */
static void ring_replay_pending(incmoe_comm_t *comm, incmoe_stream_t stream, uint64_t epoch)
{
    ring_t *ring = comm->algo;
    ring_pending_t **pp = &ring->pending;
    while (*pp != NULL) {
        ring_pending_t *p = *pp;
        if (p->hdr.stream == stream && p->hdr.epoch == epoch) {
            *pp = p->next;
            ucp_am_recv_param_t param = {.recv_attr = p->desc ? UCP_AM_RECV_ATTR_FLAG_RNDV : 0};
            ring_on_data(comm, &p->hdr, p->desc ? p->desc : p->copy, p->length, &param);
            free(p->copy);
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

static void ring_start(incmoe_comm_t *comm, coll_op_t *op)
{
    const int me = comm->rank, n = comm->nranks;
    char *send, *recv;
    ring_t *ring = comm->algo;
    if (ring->broken[0] != '\0') {
        client_fail(comm, INCMOE_ERR_PEER_FAILED, "%s", ring->broken);
        return;
    }
    op->all_issued = 1; /* forwards are issued as chunks arrive, counted in op->sent */
    op->holds++;        /* sends may complete inline: op stays until we are done here */
    switch (op->stream) {
    case INCMOE_STREAM_ALLGATHER:
        ring_send_block(comm, op, WIRE_MSG_RING_GATHER, me, op_send_at(op, 0), op->bytes[me]);
        break;
    case INCMOE_STREAM_REDUCESCATTER:
    case INCMOE_STREAM_ALLREDUCE: {
        int b = (me + n - 1) % n;
        char *other_send, *other_recv;
        /* The running sums of the other blocks pass through here too: the collective is not
           done before they went on, so they count as received bytes. */
        for (int k = 0; k < n; k++)
            if (k != me && k != b)
                op->recv_expected += block_bytes(comm, op, k, &other_send, &other_recv);
        uint64_t bytes = block_bytes(comm, op, b, &send, &recv);
        ring_send_block(comm, op, WIRE_MSG_RING_REDUCE, b, send, bytes);
        break;
    }
    default:
        break;
    }
    const incmoe_stream_t stream = op->stream;
    ring_replay_pending(comm, stream, op->epoch);
    op->holds--;
    client_stream_retire(comm, stream);
}

/* A chunk is in: keep it, add to it, pass it on. */
static void ring_chunk_arrived(ring_recv_t *rr)
{
    incmoe_comm_t *comm = rr->comm;
    coll_op_t *op = rr->op;
    const struct inc_wire_hdr *h = &rr->hdr;
    const int me = comm->rank, b = (int)h->root;
    char *send, *recv;
    block_bytes(comm, op, b, &send, &recv);
    size_t esize = incmoe_dtype_size(op->dtype);
    op->holds++; /* a forward may complete inline */
    if (h->msg == WIRE_MSG_RING_GATHER) {
        op->recv_done += h->length;
        if (ring_right(comm) != b) /* the right neighbour has not seen this block yet */
            ring_send(comm, op, WIRE_MSG_RING_GATHER, b, h->offset, h->length, h->total, rr->dest,
                      op->recv_memh, NULL);
    } else if (b == me) {
        /* The last addition: incoming running sum op own partial, into place. */
        inc_reduce_pair(recv + h->offset, rr->tmp, send + h->offset, h->length / esize, op->dtype,
                        op->redop);
        op->recv_done += h->length;
        if (op->stream == INCMOE_STREAM_ALLREDUCE)
            ring_send(comm, op, WIRE_MSG_RING_GATHER, b, h->offset, h->length, h->total,
                      recv + h->offset, op->recv_memh, NULL);
        free(rr->tmp);
    } else {
        op->recv_done += h->length;
        inc_reduce_pair(rr->tmp, rr->tmp, send + h->offset, h->length / esize, op->dtype,
                        op->redop);
        ring_send(comm, op, WIRE_MSG_RING_REDUCE, b, h->offset, h->length, h->total, rr->tmp, NULL,
                  rr->tmp); /* the send owns and frees the running sum */
    }
    op->holds--;
    client_op_progressed(comm, op); /* may free op */
    free(rr);
}

static void ring_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ring_recv_t *rr = user_data;
    if (rr->comm->freeing) {
        free(rr->tmp);
        free(rr);
    } else if (status != UCS_OK) {
        client_fail(rr->comm, inc_ucx_status(status), "ring receive from rank %d failed: %s",
                    (rr->comm->rank + rr->comm->nranks - 1) % rr->comm->nranks,
                    ucs_status_string(status));
        free(rr->tmp);
        free(rr);
    } else {
        ring_chunk_arrived(rr);
    }
    if (request != NULL)
        ucp_request_free(request);
}

/* Data for a collective this rank has not posted yet: keep it until ring_start replays it. */
static ucs_status_t ring_keep_early(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                    size_t length, int rndv)
{
    ring_t *ring = comm->algo;
    if (h->epoch <= client_stream_completed(&comm->streams[h->stream])) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "ring data for finished %s epoch %llu",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    ring_pending_t *p = calloc(1, sizeof(*p));
    if (p == NULL || (!rndv && (p->copy = malloc(length ? length : 1)) == NULL)) {
        free(p);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for early ring data");
        return UCS_ERR_NO_MEMORY;
    }
    p->hdr = *h;
    p->length = length;
    if (rndv)
        p->desc = data;
    else
        memcpy(p->copy, data, length);
    p->next = ring->pending;
    ring->pending = p;
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

static ucs_status_t ring_on_data(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    const int me = comm->rank, b = (int)h->root;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (comm->algo == NULL || h->stream == INCMOE_STREAM_BARRIER) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "unexpected %s", inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (op == NULL || !op->started)
        return ring_keep_early(comm, h, data, length, rndv);
    /* Which blocks may come from the left: every block but our own passes by in a gather;
       in a reduction every block but the one we inject (r-1) comes by, our own last. */
    const int n = comm->nranks;
    int ok = b >= 0 && b < n;
    if (h->msg == WIRE_MSG_RING_GATHER)
        ok = ok && b != me && op->stream != INCMOE_STREAM_REDUCESCATTER;
    else
        ok = ok && op->stream != INCMOE_STREAM_ALLGATHER && b != (me + n - 1) % n;
    char *send = NULL, *recv = NULL;
    uint64_t bytes = ok ? block_bytes(comm, op, b, &send, &recv) : 0;
    ok =
        ok && h->total == bytes && h->offset + h->length <= bytes && length == h->length &&
        op->recv_done + h->length <= op->recv_expected &&
        (op->stream == INCMOE_STREAM_ALLGATHER || (h->dtype == op->dtype && h->redop == op->redop));
    if (!ok) {
        client_fail(comm, INCMOE_ERR_MISMATCH,
                    "%s %s epoch %llu: chunk [%llu,+%llu) of block %d (%llu bytes) does not fit "
                    "this rank's view (%llu bytes)",
                    inc_wire_msg_name(h->msg), inc_wire_stream_name(h->stream),
                    (unsigned long long)h->epoch, (unsigned long long)h->offset,
                    (unsigned long long)h->length, b, (unsigned long long)h->total,
                    (unsigned long long)bytes);
        return UCS_ERR_INVALID_PARAM;
    }
    ring_recv_t *rr = calloc(1, sizeof(*rr));
    if (rr == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a ring receive");
        return UCS_ERR_NO_MEMORY;
    }
    rr->comm = comm;
    rr->op = op;
    rr->hdr = *h;
    char *target;
    if (h->msg == WIRE_MSG_RING_GATHER) {
        rr->dest = recv + h->offset;
        target = rr->dest;
    } else {
        rr->tmp = malloc(h->length);
        if (rr->tmp == NULL) {
            free(rr);
            client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a ring reduction");
            return UCS_ERR_NO_MEMORY;
        }
        target = rr->tmp;
    }
    if (!rndv) {
        memcpy(target, data, length);
        ring_chunk_arrived(rr);
        return UCS_OK;
    }
    inc_ucx_am_recv_data(comm->node.worker, data, target, length, NULL, ring_recv_cb, rr);
    return UCS_INPROGRESS;
}

/*
 * A neighbour's connection failed.  With ring collectives in flight that fails
 * the communicator now.  With none, it is usually a neighbour that finished and
 * closed first; the next ring collective fails with this reason instead.
 */
static void ring_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    incmoe_comm_t *comm = arg;
    ring_t *ring = comm->algo;
    if (ring == NULL) /* closed already: nothing is in flight on it */
        return;
    int peer =
        ep == ring->right ? ring_right(comm) : (comm->rank + comm->nranks - 1) % comm->nranks;
    snprintf(ring->broken, sizeof(ring->broken), "lost the ring connection to rank %d: %s", peer,
             ucs_status_string(status));
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        if (s != INCMOE_STREAM_BARRIER && comm->streams[s].head != NULL) {
            client_fail(comm, INCMOE_ERR_PEER_FAILED, "%s", ring->broken);
            return;
        }
    }
    log_debug(SUBSYS, "rank %d: %s (no ring collective in flight)", comm->rank, ring->broken);
}

static incmoe_status_t ring_open(incmoe_comm_t *comm, int *share_addr)
{
    comm->algo = calloc(1, sizeof(ring_t));
    *share_addr = comm->nranks > 1;
    return comm->algo != NULL ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
}

/* The pending HELLO must name the left neighbour and show the job's ring token. */
static void ring_check_hello(incmoe_comm_t *comm)
{
    ring_t *ring = comm->algo;
    uint32_t left = (uint32_t)((comm->rank + comm->nranks - 1) % comm->nranks);
    ring->hello_pending = 0;
    if (ring->hello_rank != left ||
        CRYPTO_memcmp(ring->hello_token, comm->ring_token, INCMOE_WIRE_TOKEN) != 0) {
        log_warn(SUBSYS,
                 "rank %d: refused a RING_HELLO claiming rank %u without the job's ring "
                 "token",
                 comm->rank, ring->hello_rank);
        ring->left_rx = NULL;
        return;
    }
    ring->hello_from_left = 1;
}

static incmoe_status_t ring_connect(incmoe_comm_t *comm)
{
    if (comm->nranks == 1)
        return INCMOE_OK;
    ring_t *ring = comm->algo;
    int peer = ring_right(comm);
    if (comm->peer_addr_len[peer] == 0) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "rank %d sent no worker address for the ring", peer);
        return INCMOE_ERR_PROTOCOL;
    }
    /* The address came from a key holder through the switch: UCX aborts on, or reads past, one
       it cannot unpack, so it is held to this rank's own first. */
    char why[200];
    if (inc_ucx_addr_check(comm->peer_addr[peer], comm->peer_addr_len[peer], comm->worker_addr,
                           comm->worker_addr_len, why, sizeof(why)) != INCMOE_OK) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "ring neighbour %d's %s", peer, why);
        return INCMOE_ERR_PROTOCOL;
    }
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)comm->peer_addr[peer],
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ring_ep_err_cb, .arg = comm},
    };
    ucs_status_t ust = ucp_ep_create(comm->node.worker, &params, &ring->right);
    if (ust != UCS_OK) {
        client_fail(comm, INCMOE_ERR_UNREACHABLE, "cannot reach ring neighbour %d: %s", peer,
                    ucs_status_string(ust));
        return INCMOE_ERR_UNREACHABLE;
    }
    /* One small round before bulk data (sends posted before wire-up ends go eager); it
       shows the right neighbour this rank belongs to the job. */
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_RING_HELLO);
    void *token = malloc(INCMOE_WIRE_TOKEN);
    if (ctx == NULL || token == NULL) {
        free(ctx);
        free(token);
        return INCMOE_ERR_NO_MEMORY;
    }
    memcpy(token, comm->ring_token, INCMOE_WIRE_TOKEN);
    ctx->hdr.length = INCMOE_WIRE_TOKEN;
    ctx->payload_owned = token;
    client_send_ep(comm, ring->right, ctx, token, INCMOE_WIRE_TOKEN, NULL, &comm->ctrl_sent);
    ucp_request_param_t fp = {.op_attr_mask = 0};
    ucs_status_t fst =
        inc_ucx_request_wait(&comm->node, ucp_ep_flush_nbx(ring->right, &fp), comm->timeout_ms);
    if (ring->hello_pending)
        ring_check_hello(comm);
    double deadline = inc_now_s() + comm->timeout_ms / 1000.0;
    while (fst == UCS_OK && !ring->hello_from_left && atomic_load(&comm->error) == 0 &&
           inc_now_s() < deadline)
        inc_ucx_node_wait(&comm->node, -1, 20);
    if (atomic_load(&comm->error) != 0)
        return (incmoe_status_t)atomic_load(&comm->error);
    if (fst != UCS_OK || !ring->hello_from_left) {
        client_fail(comm, INCMOE_ERR_TIMEOUT, "ring wire-up with ranks %d and %d did not finish",
                    (comm->rank + comm->nranks - 1) % comm->nranks, ring_right(comm));
        return INCMOE_ERR_TIMEOUT;
    }
    return INCMOE_OK;
}

static ucs_status_t ring_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                    size_t length, const ucp_am_recv_param_t *param)
{
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    ring_t *ring = comm->algo;
    ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    if (h->msg == WIRE_MSG_RING_REDUCE || h->msg == WIRE_MSG_RING_GATHER) {
        if (!(ring->hello_from_left || ring->hello_pending) || from == NULL ||
            from != ring->left_rx) {
            log_warn(SUBSYS, "rank %d: dropped ring data from an endpoint no RING_HELLO bound",
                     comm->rank);
            return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
        }
        return ring_on_data(comm, h, data, length, param);
    }
    if (h->msg == WIRE_MSG_RING_HELLO && !rndv && !ring->hello_from_left && !ring->hello_pending) {
        if (from == NULL || length != INCMOE_WIRE_TOKEN) {
            log_warn(SUBSYS, "rank %d: refused a RING_HELLO of %zu bytes", comm->rank, length);
            return UCS_OK;
        }
        ring->left_rx = from;
        ring->hello_rank = h->rank;
        memcpy(ring->hello_token, data, INCMOE_WIRE_TOKEN);
        ring->hello_pending = 1;
        if (comm->joined)
            ring_check_hello(comm);
        return UCS_OK;
    }
    client_fail(comm, INCMOE_ERR_PROTOCOL, "unexpected %s%s", inc_wire_msg_name(h->msg),
                rndv ? " (rendezvous)" : "");
    return UCS_ERR_INVALID_PARAM;
}

static void ring_close(incmoe_comm_t *comm)
{
    ring_t *ring = comm->algo;
    if (ring == NULL)
        return;
    while (ring->pending != NULL) {
        ring_pending_t *p = ring->pending;
        ring->pending = p->next;
        if (p->desc != NULL)
            ucp_am_data_release(comm->node.worker, p->desc);
        free(p->copy);
        free(p);
    }
    if (ring->right != NULL)
        inc_ucx_ep_close(&comm->node, ring->right, 0, client_close_bound_ms(comm));
    free(ring);
    comm->algo = NULL;
}

const client_algo_ops_t client_ring_ops = {
    .name = "ring",
    .open = ring_open,
    .connect = ring_connect,
    .start = ring_start,
    .progress = NULL,
    .on_message = ring_on_message,
    .close = ring_close,
    .barrier_before_leave = 1,
};
