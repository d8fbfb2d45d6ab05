/*
 * innet.c - the in-network collectives: the switch multicasts and reduces.
 * A started collective is announced with a POST; this rank's contribution
 * then goes out as DATA chunks, strictly in (epoch, chunk, root) order and
 * only within the credits the switch granted per stream (CREDIT returns
 * them).  Each FWD is checked against what this rank posted and landed
 * straight in the registered buffer: a rendezvous payload is received at its
 * destination, a ReduceScatter result is added to the root's own partial.
 * A small collective (inc_wire_is_small) instead goes out as one SMALL
 * carrying the POST and the whole contribution, for one credit, and its
 * results come back in one SMALL_FWD that also returns the credit.
 * Dispatch and combine are innet_dc.c's, their low-latency form
 * innet_ll.c's, in the same stream order and credits.  The wire protocol is described in
 * base/wire.h.
 */
#include "innet.h"

#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "coll.h"
#include "ll_shared.h"
#include "notify.h"
#include "send.h"

#include "base/log.h"
#include "base/reduce.h"

typedef struct {
    incmoe_comm_t *comm;
    coll_op_t *op;
    char *dest;      /* where the result goes */
    const char *own; /* ReduceScatter: the root's own partial, else NULL */
    char *tmp;       /* staging for a ReduceScatter result, else NULL */
    size_t length;
} innet_recv_t;

/* ------------------------------------------------------------------------ */
/* sending                                                                  */

/* The next DATA chunk of this rank in the global order (chunk, root); 0 when none is left. */
static int op_next_chunk(incmoe_comm_t *comm, coll_op_t *op, int *root_p, uint64_t *offset_p,
                         uint64_t *length_p)
{
    const uint64_t chunk = comm->chunk_size;
    const int me = comm->rank;
    uint64_t most = 0;
    for (int r = 0; r < comm->nranks; r++)
        if (op->bytes[r] > most)
            most = op->bytes[r];
    for (; op->next_chunk * chunk < most; op->next_chunk++, op->next_root = 0) {
        uint64_t off = op->next_chunk * chunk;
        for (; op->next_root < comm->nranks; op->next_root++) {
            int r = op->next_root;
            switch (op->stream) {
            case INCMOE_STREAM_ALLGATHER:
                if (r != me)
                    continue;
                break;
            case INCMOE_STREAM_REDUCESCATTER:
                if (r == me)
                    continue;
                break;
            default: /* AllReduce: one vector, root 0 stands for it */
                if (r != 0)
                    continue;
                break;
            }
            if (off >= op->bytes[r])
                continue;
            *root_p = r;
            *offset_p = off;
            *length_p = op->bytes[r] - off < chunk ? op->bytes[r] - off : chunk;
            op->next_root++;
            return 1;
        }
    }
    return 0;
}

static const char *op_send_ptr(coll_op_t *op, int root, uint64_t offset)
{
    /* AllGather sends this rank's part, AllReduce the vector; ReduceScatter root's block. */
    if (op->stream != INCMOE_STREAM_REDUCESCATTER)
        return op_send_at(op, offset);
    return op_send_at(op, (size_t)root * op->stride + op->win + offset);
}

static void innet_start(incmoe_comm_t *comm, coll_op_t *op)
{
    if (inc_wire_is_dc(op->stream) && op->dc->ll) {
        innet_ll_start(comm, op);
        return;
    }
    if (inc_wire_is_dc(op->stream)) {
        innet_dc_start(comm, op);
        return;
    }
    op->small = inc_wire_is_small(op->stream, op->bytes, comm->nranks, comm->chunk_size);
    if (!op->small)
        client_send_post(comm, op, &op->sent); /* the DATA follows from innet_progress */
    /* else the SMALL goes from innet_progress, in its turn for a credit */
}

/* The SMALL of a small collective: table of window sizes, then this rank's contribution;
   0 when out of memory (the communicator has failed). */
static int send_small(incmoe_comm_t *comm, coll_op_t *op)
{
    const int me = comm->rank, n = comm->nranks;
    const uint64_t len = inc_wire_small_length(op->stream, op->bytes, n, me);
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_SMALL);
    char *buf = ctx != NULL ? malloc((size_t)len) : NULL;
    if (buf == NULL) {
        free(ctx);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a SMALL message");
        return 0;
    }
    memcpy(buf, op->bytes, 8 * (size_t)n);
    char *p = buf + 8 * (size_t)n;
    if (op->stream == INCMOE_STREAM_REDUCESCATTER) {
        for (int r = 0; r < n; r++) {
            if (r == me || op->bytes[r] == 0)
                continue;
            memcpy(p, op_send_ptr(op, r, 0), op->bytes[r]);
            p += op->bytes[r];
        }
    } else {
        uint64_t own = op->stream == INCMOE_STREAM_ALLREDUCE ? op->bytes[0] : op->bytes[me];
        if (own > 0)
            memcpy(p, op_send_ptr(op, me, 0), own);
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.length = len;
    ctx->hdr.total = op->stream == INCMOE_STREAM_ALLREDUCE ? op->bytes[0] : op->bytes[me];
    ctx->hdr.sig = op->sig;
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    ctx->payload_owned = buf;
    client_send(comm, ctx, buf, (size_t)len, NULL, &op->sent);
    return 1;
}

/* One DATA chunk to the switch; 0 when out of memory (the communicator has failed). */
static int send_chunk(incmoe_comm_t *comm, coll_op_t *op, int root, uint64_t offset,
                      uint64_t length)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_DATA);
    if (ctx == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a DATA message");
        return 0;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.root = (uint32_t)root;
    ctx->hdr.offset = offset;
    ctx->hdr.length = length;
    ctx->hdr.total = op->bytes[root];
    ctx->hdr.sig = op->sig;
    ctx->hdr.chunk = (uint32_t)(offset / comm->chunk_size);
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    client_send(comm, ctx, op_send_ptr(op, root, offset), length, op->send_memh, &op->sent);
    return 1;
}

/* Stream DATA within the credits, strictly in (epoch, chunk, root) order. */
static void pump_stream(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    uint32_t *credits = &((innet_t *)comm->algo)->credits[stream];
    for (coll_op_t *op = comm->streams[stream].head; op != NULL; op = op->next) {
        if (op->all_issued)
            continue;
        op->holds++;
        if (inc_wire_is_dc(stream)) {
            int ok =
                op->dc->ll ? innet_ll_pump(comm, op, credits) : innet_dc_pump(comm, op, credits);
            op->holds--;
            if (!ok || !op->all_issued)
                break; /* its plan, or credits, come first */
            continue;
        }
        if (op->small && *credits > 0) {
            if (!send_small(comm, op)) {
                op->holds--;
                return;
            }
            (*credits)--;
            op->all_issued = 1;
        }
        while (!op->small && *credits > 0) {
            int root;
            uint64_t offset, length;
            if (!op_next_chunk(comm, op, &root, &offset, &length)) {
                op->all_issued = 1;
                break;
            }
            if (!send_chunk(comm, op, root, offset, length)) {
                op->holds--;
                return;
            }
            (*credits)--;
        }
        op->holds--;
        if (!op->all_issued)
            break; /* out of credits: later collectives wait their turn */
    }
    /* Retire only after the walk: retiring frees collectives the loop would still visit. */
    client_stream_retire(comm, stream);
}

static void innet_progress(incmoe_comm_t *comm)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        if (s != INCMOE_STREAM_BARRIER) /* the barrier is a POST only, sent by coll.c */
            pump_stream(comm, (incmoe_stream_t)s);
}

/* ------------------------------------------------------------------------ */
/* receiving                                                                */

/* The result is in (result: where it landed); for a ReduceScatter add the root's own partial. */
static void recv_finish(innet_recv_t *rc, const void *result)
{
    if (rc->own != NULL) {
        /* The root's local reduction: own partial op the switch's sum of the others. */
        coll_op_t *op = rc->op;
        size_t cnt = rc->length / incmoe_dtype_size(op->dtype);
        inc_reduce_pair(rc->dest, rc->own, result, cnt, op->dtype, op->redop);
    }
    rc->op->recv_done += rc->length;
    client_op_progressed(rc->comm, rc->op);
    free(rc->tmp);
    free(rc);
}

static void recv_done_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    innet_recv_t *rc = user_data;
    if (rc->comm->freeing) {
        free(rc->tmp);
        free(rc);
    } else if (status != UCS_OK) {
        client_fail(rc->comm, inc_ucx_status(status), "receiving a result failed: %s",
                    ucs_status_string(status));
        free(rc->tmp);
        free(rc);
    } else {
        recv_finish(rc, rc->own != NULL ? rc->tmp : rc->dest);
    }
    if (request != NULL)
        ucp_request_free(request);
}

/* Where a FWD lands (dest, own partial) and its window's length; 0 if it is not for us. */
static int fwd_target(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                      uint64_t *total_p, char **dest_p, const char **own_p)
{
    const int me = comm->rank;
    *own_p = NULL;
    switch (op->stream) {
    case INCMOE_STREAM_ALLGATHER:
        if (h->root >= (uint32_t)comm->nranks || (int)h->root == me) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "allgather block of rank %u is not for rank %d",
                        h->root, me);
            return 0;
        }
        *total_p = op->bytes[h->root];
        *dest_p = op_recv_at(op, (size_t)h->root * op->stride + op->win + h->offset);
        return 1;
    case INCMOE_STREAM_REDUCESCATTER:
        if ((int)h->root != me) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "reducescatter shard of rank %u sent to rank %d",
                        h->root, me);
            return 0;
        }
        *total_p = op->bytes[me];
        *dest_p = op_recv_at(op, h->offset);
        *own_p = op_send_at(op, (size_t)me * op->stride + op->win + h->offset);
        return 1;
    default:
        *total_p = op->bytes[0];
        *dest_p = op_recv_at(op, h->offset);
        return 1;
    }
}

/* Rendezvous: straight into the registered buffer (or staging, for a reduction). */
static ucs_status_t recv_rndv(incmoe_comm_t *comm, innet_recv_t *rc, void *desc)
{
    char *target = rc->dest;
    if (rc->own != NULL) {
        rc->tmp = malloc(rc->length);
        if (rc->tmp == NULL) {
            free(rc);
            client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to receive a result");
            return UCS_ERR_NO_MEMORY;
        }
        target = rc->tmp;
    }
    inc_ucx_am_recv_data(comm->node.worker, desc, target, rc->length,
                         rc->own == NULL ? rc->op->recv_memh : NULL, recv_done_cb, rc);
    return UCS_INPROGRESS;
}

/* A FWD: check it against what this rank posted, then land it. */
static ucs_status_t on_fwd(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (op == NULL || !op->started) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "result for %s epoch %llu that is not in flight",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    if (op->small) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "FWD for %s epoch %llu, which went as SMALL",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    uint64_t expect_total;
    char *dest;
    const char *own;
    if (!fwd_target(comm, op, h, &expect_total, &dest, &own))
        return UCS_ERR_INVALID_PARAM;
    if (h->total != expect_total || h->offset + h->length > expect_total ||
        op->recv_accepted + h->length > op->recv_expected ||
        (op->stream != INCMOE_STREAM_ALLGATHER &&
         (h->dtype != op->dtype || h->redop != op->redop))) {
        client_fail(comm, INCMOE_ERR_MISMATCH,
                    "%s epoch %llu from rank %u: [%llu,+%llu) of %llu bytes, this rank expects "
                    "%llu bytes",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch, h->root,
                    (unsigned long long)h->offset, (unsigned long long)h->length,
                    (unsigned long long)h->total, (unsigned long long)expect_total);
        return UCS_ERR_INVALID_PARAM;
    }
    innet_recv_t *rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to receive a result");
        return UCS_ERR_NO_MEMORY;
    }
    /* Counted now, not when it lands: a result still landing keeps the collective from
       retiring, and a duplicate beyond what is expected is refused above. */
    op->recv_accepted += h->length;
    *rc = (innet_recv_t){.comm = comm, .op = op, .dest = dest, .own = own, .length = length};
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return recv_rndv(comm, rc, data);
    /* Eager: the data is here already; a reduction reads it where it lies. */
    if (own == NULL)
        memcpy(dest, data, length);
    recv_finish(rc, data);
    return UCS_OK;
}

/* Land a SMALL_FWD's results (length checked against the collective); the results of every root
   come in one message, so its header and rows add nothing. */
static void small_land(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                       uint64_t rows, const char *data)
{
    (void)h;
    (void)rows;
    const int me = comm->rank, n = comm->nranks;
    switch (op->stream) {
    case INCMOE_STREAM_ALLGATHER:
        /* The others' blocks, from rank me+1 round to me-1. */
        for (int k = 1; k < n; k++) {
            int r = (me + k) % n;
            if (op->bytes[r] > 0) {
                memcpy(op_recv_at(op, (size_t)r * op->stride + op->win), data, op->bytes[r]);
                data += op->bytes[r];
            }
        }
        break;
    case INCMOE_STREAM_REDUCESCATTER:
        /* The root's local reduction: own partial op the switch's reduction of the others. */
        if (op->bytes[me] > 0)
            inc_reduce_pair(op_recv_at(op, 0), op_send_at(op, (size_t)me * op->stride + op->win),
                            data, op->bytes[me] / incmoe_dtype_size(op->dtype), op->dtype,
                            op->redop);
        break;
    default:
        if (op->bytes[0] > 0)
            memcpy(op_recv_at(op, 0), data, op->bytes[0]);
        break;
    }
    op->recv_done = op->recv_expected;
    client_op_progressed(comm, op);
}

/* A SMALL_FWD: every result of a small collective for this rank, and its credit. */
static ucs_status_t on_small_fwd(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    innet_t *in = comm->algo;
    const int me = comm->rank;
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (op == NULL || !op->started || !op->small || !op->all_issued || op->small_landed) {
        client_fail(comm, INCMOE_ERR_PROTOCOL,
                    "SMALL_FWD for %s epoch %llu, which awaits no small result",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    uint64_t expect = inc_wire_small_result_length(op->stream, op->bytes, comm->nranks, me);
    if (h->length != expect || h->sig != op->sig ||
        (op->stream != INCMOE_STREAM_ALLGATHER &&
         (h->dtype != op->dtype || h->redop != op->redop))) {
        client_fail(comm, INCMOE_ERR_MISMATCH,
                    "small %s epoch %llu: a result of %llu bytes (%s %s), this rank expects %llu "
                    "bytes (%s %s) of the collective it posted",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch,
                    (unsigned long long)h->length, incmoe_dtype_name(h->dtype),
                    incmoe_redop_name(h->redop), (unsigned long long)expect,
                    incmoe_dtype_name(op->dtype), incmoe_redop_name(op->redop));
        return UCS_ERR_INVALID_PARAM;
    }
    if (in->credits[h->stream] >= comm->credits) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "switch returned a %s credit too many",
                    inc_wire_stream_name(h->stream));
        return UCS_ERR_INVALID_PARAM;
    }
    in->credits[h->stream]++;
    op->small_landed = 1;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        small_land(comm, op, h, 0, data);
        return UCS_OK;
    }
    return client_op_recv_rndv(comm, op, h, 0, data, length, small_land);
}

static void on_credit(incmoe_comm_t *comm, const struct inc_wire_hdr *h)
{
    innet_t *in = comm->algo;
    if (h->stream == INCMOE_STREAM_BARRIER || in->credits[h->stream] + h->length > comm->credits) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "switch returned %llu credits too many",
                    (unsigned long long)h->length);
        return;
    }
    in->credits[h->stream] += (uint32_t)h->length;
}

static ucs_status_t innet_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                     size_t length, const ucp_am_recv_param_t *param)
{
    if (h->msg == WIRE_MSG_LL_FWD)
        return innet_ll_on_message(comm, h, data, length, param);
    if ((h->msg == WIRE_MSG_FWD || h->msg == WIRE_MSG_PLAN) && inc_wire_is_dc(h->stream))
        return innet_dc_on_message(comm, h, data, length, param);
    if (h->msg == WIRE_MSG_FWD)
        return on_fwd(comm, h, data, length, param);
    if (h->msg == WIRE_MSG_SMALL_FWD)
        return on_small_fwd(comm, h, data, length, param);
    if (h->msg == WIRE_MSG_CREDIT && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        on_credit(comm, h);
        return UCS_OK;
    }
    client_fail(comm, INCMOE_ERR_PROTOCOL, "unexpected %s%s from the switch",
                inc_wire_msg_name(h->msg),
                (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? " (rendezvous)" : "");
    return UCS_ERR_INVALID_PARAM;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                */

static incmoe_status_t innet_open(incmoe_comm_t *comm, int *share_addr)
{
    comm->algo = calloc(1, sizeof(innet_t));
    *share_addr = 0; /* the ranks never talk to each other */
    return comm->algo != NULL ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
}

static incmoe_status_t innet_connect(incmoe_comm_t *comm)
{
    innet_t *in = comm->algo;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        in->credits[s] = comm->credits;
    return INCMOE_OK;
}

static void innet_close(incmoe_comm_t *comm)
{
    innet_ll_close(comm);
    free(comm->algo);
    comm->algo = NULL;
}

const client_algo_ops_t client_innet_ops = {
    .name = "in-network",
    .open = innet_open,
    .connect = innet_connect,
    .start = innet_start,
    .progress = innet_progress,
    .on_message = innet_on_message,
    .close = innet_close,
    .barrier_before_leave = 0,
    .has_dc = 1,
    .dc_check = innet_dc_check,
    .ll_bytes = client_ll_up_length,
};
