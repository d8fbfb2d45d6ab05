/*
 * ring.c - the ring baseline: bandwidth-optimal, chunk-pipelined ring
 * AllGather, ReduceScatter and AllReduce between the ranks themselves, over
 * the same UCX transport and behind the same API as the in-network path.
 *
 * Ranks find each other through the switch and connect over mesh.c (each
 * rank's endpoint to its right neighbour at create, to the other ranks at the
 * first dispatch or combine, which go point to point: dc_peer.c); afterwards
 * the switch carries no data, only the barrier and liveness.  Each rank talks to its
 * right neighbour (r+1) and hears from its left (r-1).  Every chunk moves on
 * as soon as it arrives, so the N-1 ring steps overlap:
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
 * (algo.h), and so does the a2a algorithm (a2a.c); the barrier and liveness
 * stay with the switch.
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "algo.h"
#include "coll.h"
#include "dc_peer.h"
#include "ll_shared.h"
#include "mesh.h"
#include "notify.h"
#include "send.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/reduce.h"
#include "base/text.h"

#define SUBSYS "ring"

/* The connections are the mesh's (comm->mesh): a dead left neighbour is the switch's to report
   (it fails the job), a lost right one the mesh's. */
typedef struct {
    client_kept_t *pending; /* data of collectives not started here yet */
    client_dc_peer_t *dcp;  /* dispatch and combine, point to point (dc_peer.c) */
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
    ctx->to = ring_right(comm);
    client_send_ep(comm, client_mesh_ep(comm, ring_right(comm)), ctx, payload, length, memh,
                   &op->sent);
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
    client_kept_t **pp = &ring->pending;
    while (*pp != NULL) {
        client_kept_t *k = *pp;
        if (k->hdr.stream == stream && k->hdr.epoch == epoch) {
            *pp = k->next;
            client_kept_deliver(comm, k, ring_on_data);
        } else {
            pp = &k->next;
        }
    }
}

static void ring_start(incmoe_comm_t *comm, coll_op_t *op)
{
    const int me = comm->rank, n = comm->nranks;
    char *send, *recv;
    if (client_mesh_broken(comm) != NULL) {
        client_fail(comm, INCMOE_ERR_PEER_FAILED, "%s", client_mesh_broken(comm));
        return;
    }
    if (op->stream == INCMOE_STREAM_DISPATCH || op->stream == INCMOE_STREAM_COMBINE) {
        client_dc_peer_start(comm, ((ring_t *)comm->algo)->dcp, op);
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
                                    size_t length, const ucp_am_recv_param_t *param)
{
    ring_t *ring = comm->algo;
    if (h->epoch <= client_stream_completed(&comm->streams[h->stream])) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "ring data for finished %s epoch %llu",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    client_kept_t *k = client_kept_new(h, data, length, param);
    if (k == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for early ring data");
        return UCS_ERR_NO_MEMORY;
    }
    k->next = ring->pending;
    ring->pending = k;
    return k->desc != NULL ? UCS_INPROGRESS : UCS_OK;
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
        return ring_keep_early(comm, h, data, length, param);
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

static ucs_status_t ring_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                    size_t length, const ucp_am_recv_param_t *param)
{
    ucs_status_t ret;
    int from = client_mesh_on_message(comm, h, data, length, param, &ret);
    if (from < 0)
        return ret;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (h->msg == WIRE_MSG_RING_REDUCE || h->msg == WIRE_MSG_RING_GATHER) {
        if (from != (comm->rank + comm->nranks - 1) % comm->nranks) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "%s from rank %d, not the left neighbour",
                        inc_wire_msg_name(h->msg), from);
            return UCS_ERR_INVALID_PARAM;
        }
        return ring_on_data(comm, h, data, length, param);
    }
    if (h->msg == WIRE_MSG_PEER_PLAN || h->msg == WIRE_MSG_PEER_ROWS ||
        h->msg == WIRE_MSG_PEER_PARTIALS || h->msg == WIRE_MSG_PEER_CREDIT ||
        h->msg == WIRE_MSG_PEER_LL)
        return client_dc_peer_on_message(comm, ((ring_t *)comm->algo)->dcp, from, h, data, length,
                                         param);
    client_fail(comm, INCMOE_ERR_PROTOCOL, "unexpected %s%s from rank %d",
                inc_wire_msg_name(h->msg), rndv ? " (rendezvous)" : "", from);
    return UCS_ERR_INVALID_PARAM;
}

static incmoe_status_t ring_open(incmoe_comm_t *comm, int *share_addr)
{
    ring_t *ring = calloc(1, sizeof(ring_t));
    comm->algo = ring;
    *share_addr = comm->nranks > 1;
    if (ring == NULL || (ring->dcp = client_dc_peer_open(comm)) == NULL)
        return INCMOE_ERR_NO_MEMORY;
    return client_mesh_open(comm, ring_on_message);
}

static incmoe_status_t ring_connect(incmoe_comm_t *comm)
{
    return client_mesh_connect(comm, 1);
}

static void ring_progress(incmoe_comm_t *comm)
{
    client_dc_peer_progress(comm, ((ring_t *)comm->algo)->dcp);
}

static void ring_close(incmoe_comm_t *comm)
{
    ring_t *ring = comm->algo;
    if (ring == NULL)
        return;
    while (ring->pending != NULL) {
        client_kept_t *k = ring->pending;
        ring->pending = k->next;
        client_kept_free(comm, k);
    }
    client_mesh_close(comm);
    client_dc_peer_close(comm, ring->dcp);
    free(ring);
    comm->algo = NULL;
}

const client_algo_ops_t client_ring_ops = {
    .name = "ring",
    .open = ring_open,
    .connect = ring_connect,
    .start = ring_start,
    .progress = ring_progress,
    .on_message = ring_on_message,
    .close = ring_close,
    .barrier_before_leave = 1,
    .has_dc = 1,
    .ll_bytes = client_ll_peer_largest,
};
