/*
 * client.c - the end-host side of the in-network collectives.
 *
 * incmoe_comm_create() connects to the switch, joins the job and starts the
 * proxy thread.  Callers validate and queue collectives (any thread); the
 * proxy announces each one (POST), streams this rank's contribution as DATA
 * chunks within the credits the switch granted, and lands every FWD straight
 * in the registered buffer: a rendezvous payload is received directly at its
 * destination, a ReduceScatter result is added to the root's own partial.
 * The wire protocol is described in wire.h.
 */
#include "client.h"
#include "base/config.h"
#include "base/log.h"
#include "base/reduce.h"
#include "ring.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "base/clock.h"

#define SUBSYS "client"

typedef struct {
    incmoe_comm_t *comm;
    coll_op_t *op;
    char *dest;      /* where the result goes */
    const char *own; /* ReduceScatter: the root's own partial, else NULL */
    char *tmp;       /* staging for a ReduceScatter result, else NULL */
    size_t length;
} recv_ctx_t;

/* ------------------------------------------------------------------------ */
/* errors                                                                   */

void client_fail(incmoe_comm_t *comm, incmoe_status_t status, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->error) == 0) {
        snprintf(comm->error_text, sizeof(comm->error_text), "%s", text);
        atomic_store(&comm->error, status);
        log_error(SUBSYS, "rank %d job %llu: %s (%s)", comm->rank, (unsigned long long)comm->job_id,
                  text, incmoe_strerror(status));
    } else {
        log_debug(SUBSYS, "rank %d: further error: %s", comm->rank, text);
    }
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
}

/* A local failure the other ranks must hear about, or they would wait forever. */
static void client_fail_job(incmoe_comm_t *comm, incmoe_status_t status, const char *text)
{
    client_fail(comm, status, "%s", text);
    pthread_mutex_lock(&comm->lock);
    comm->abort_pending = 1;
    pthread_mutex_unlock(&comm->lock);
    uint64_t one = 1;
    if (write(comm->wake_fd, &one, sizeof(one)) < 0)
        log_debug(SUBSYS, "wake: %s", strerror(errno));
}

/* ------------------------------------------------------------------------ */
/* sending                                                                  */

static void send_done_cb(void *request, ucs_status_t status, void *user_data)
{
    send_ctx_t *ctx = user_data;
    incmoe_comm_t *comm = ctx->comm;
    if (comm->freeing) { /* destroying the worker purged it; its collective is gone */
        free(ctx->payload_owned);
        free(ctx);
        if (request != NULL)
            ucp_request_free(request);
        return;
    }
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        /* Once joined, a connection that cannot carry a message means the peer is gone. */
        client_fail(comm, comm->joined ? INCMOE_ERR_PEER_FAILED : inc_ucx_status(status),
                    "sending %s failed: %s", inc_wire_msg_name(ctx->hdr.msg),
                    ucs_status_string(status));
    if (ctx->op != NULL) {
        ctx->op->sends_pending--;
        client_op_progressed(comm, ctx->op);
    } else {
        comm->inflight_ctrl--;
    }
    free(ctx->payload_owned);
    free(ctx);
    if (request != NULL)
        ucp_request_free(request);
}

void client_send_ep(incmoe_comm_t *comm, ucp_ep_h ep, send_ctx_t *ctx, const void *payload,
                    size_t length, ucp_mem_h memh)
{
    ctx->comm = comm;
    if (ctx->op != NULL)
        ctx->op->sends_pending++;
    else
        comm->inflight_ctrl++;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.send = send_done_cb,
        .user_data = ctx,
        /* REPLY names our endpoint at the switch, which is how it knows who sent it. */
        .flags = UCP_AM_SEND_FLAG_REPLY |
                 (length >= comm->rndv_thresh ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER),
    };
    if (memh != NULL) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = memh;
    }
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep, INCMOE_AM_ID, &ctx->hdr, sizeof(ctx->hdr), payload, length, &param);
    if (UCS_PTR_IS_ERR(req))
        send_done_cb(NULL, UCS_PTR_STATUS(req), ctx);
    if (ep == comm->ep)
        comm->last_tx = inc_now_s();
}

/* To the switch. */
static void client_send(incmoe_comm_t *comm, send_ctx_t *ctx, const void *payload, size_t length,
                        ucp_mem_h memh)
{
    client_send_ep(comm, comm->ep, ctx, payload, length, memh);
}

send_ctx_t *client_ctx(incmoe_comm_t *comm, inc_wire_msg_t msg)
{
    send_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    inc_wire_hdr_init(&ctx->hdr, msg, comm->job_id);
    ctx->hdr.rank = (uint32_t)comm->rank;
    return ctx;
}

static void send_ctrl(incmoe_comm_t *comm, inc_wire_msg_t msg)
{
    send_ctx_t *ctx = client_ctx(comm, msg);
    if (ctx == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s message",
                    inc_wire_msg_name(msg));
        return;
    }
    client_send(comm, ctx, NULL, 0, NULL);
}

static void send_error(incmoe_comm_t *comm, incmoe_status_t status, const char *text)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_ERROR);
    char *msg = ctx ? strdup(text) : NULL;
    if (msg == NULL) {
        free(ctx);
        return;
    }
    ctx->hdr.status = (int16_t)status;
    ctx->hdr.length = strlen(msg) + 1;
    ctx->payload_owned = msg;
    client_send(comm, ctx, msg, ctx->hdr.length, NULL);
}

/* ------------------------------------------------------------------------ */
/* collectives on the proxy thread                                          */

coll_op_t *client_find_op(incmoe_comm_t *comm, unsigned stream, uint64_t epoch)
{
    for (coll_op_t *op = comm->streams[stream].head; op != NULL; op = op->next)
        if (op->epoch == epoch)
            return op;
    return NULL;
}

static int op_finished(const incmoe_comm_t *comm, const coll_op_t *op)
{
    if (!op->started || !op->all_issued || op->sends_pending != 0 || op->holds != 0)
        return 0;
    if (op->stream == INCMOE_STREAM_BARRIER)
        return op->barrier_done;
    return op->recv_done == op->recv_expected;
}

void client_op_progressed(incmoe_comm_t *comm, coll_op_t *op)
{
    client_stream_retire(comm, op->stream);
}

void client_stream_retire(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    client_stream_t *s = &comm->streams[stream];
    int retired = 0;
    while (s->head != NULL && op_finished(comm, s->head)) {
        coll_op_t *done = s->head;
        s->head = done->next;
        if (s->head == NULL)
            s->tail = NULL;
        atomic_store_explicit(&s->completed, done->epoch, memory_order_release);
        free(done->bytes);
        free(done);
        retired = 1;
    }
    if (retired) {
        pthread_mutex_lock(&comm->lock);
        pthread_cond_broadcast(&comm->cond);
        pthread_mutex_unlock(&comm->lock);
    }
}

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

static const char *op_send_ptr(incmoe_comm_t *comm, coll_op_t *op, int root, uint64_t offset)
{
    /* AllGather sends this rank's part, AllReduce the vector; ReduceScatter root's block. */
    if (op->stream != INCMOE_STREAM_REDUCESCATTER)
        return op_send_at(op, offset);
    return op_send_at(op, (size_t)root * op->stride + op->win + offset);
}

/* First step of a collective: local work, and the POST that announces it. */
static void op_start(incmoe_comm_t *comm, coll_op_t *op)
{
    const int me = comm->rank;
    op->started = 1;
    switch (op->stream) {
    case INCMOE_STREAM_ALLGATHER: {
        char *own = op_recv_at(op, (size_t)me * op->stride + op->win);
        if (own != op_send_at(op, 0) && op->bytes[me] > 0)
            memmove(own, op_send_at(op, 0), op->bytes[me]);
        for (int r = 0; r < comm->nranks; r++)
            if (r != me)
                op->recv_expected += op->bytes[r];
        break;
    }
    case INCMOE_STREAM_REDUCESCATTER:
        if (comm->nranks == 1) {
            const char *own = op_send_at(op, op->win);
            if (own != op_recv_at(op, 0) && op->bytes[0] > 0)
                memmove(op_recv_at(op, 0), own, op->bytes[0]);
        } else {
            op->recv_expected = op->bytes[me];
        }
        break;
    case INCMOE_STREAM_ALLREDUCE:
        if (comm->nranks == 1) {
            if (op_send_at(op, 0) != op_recv_at(op, 0) && op->bytes[0] > 0)
                memmove(op_recv_at(op, 0), op_send_at(op, 0), op->bytes[0]);
        } else {
            op->recv_expected = op->bytes[0];
        }
        break;
    default:
        break;
    }
    if (comm->nranks == 1) {
        op->all_issued = 1;
        op->barrier_done = 1;
        client_op_progressed(comm, op);
        return;
    }
    if (comm->algo == INCMOE_ALGO_RING && op->stream != INCMOE_STREAM_BARRIER) {
        ring_start(comm, op);
        return;
    }
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_POST);
    if (ctx == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to post a collective");
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.total = op->stream == INCMOE_STREAM_ALLREDUCE ? op->bytes[0] : op->bytes[me];
    ctx->hdr.sig = op->sig;
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    ctx->op = op;
    client_send(comm, ctx, NULL, 0, NULL);
}

/* Stream DATA within the credits, strictly in (epoch, chunk, root) order. */
static void pump_stream(incmoe_comm_t *comm, client_stream_t *s)
{
    for (coll_op_t *op = s->head; op != NULL; op = op->next) {
        if (op->all_issued)
            continue;
        op->holds++;
        while (s->credits > 0) {
            int root;
            uint64_t offset, length;
            if (!op_next_chunk(comm, op, &root, &offset, &length)) {
                op->all_issued = 1;
                break;
            }
            send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_DATA);
            if (ctx == NULL) {
                op->holds--;
                client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a DATA message");
                return;
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
            ctx->op = op;
            s->credits--;
            client_send(comm, ctx, op_send_ptr(comm, op, root, offset), length, op->send_memh);
        }
        op->holds--;
        if (!op->all_issued)
            break; /* out of credits: later collectives wait their turn */
    }
    /* Retire only after the walk: retiring frees collectives the loop would still visit. */
    client_stream_retire(comm, (incmoe_stream_t)(s - comm->streams));
}

/* ------------------------------------------------------------------------ */
/* receiving                                                                */

/* The result is in (result: where it landed); for a ReduceScatter add the root's own partial. */
static void recv_finish(recv_ctx_t *rc, const void *result)
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
    recv_ctx_t *rc = user_data;
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

/* A FWD: check it against what this rank posted, then land it. */
static ucs_status_t on_fwd(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    const int me = comm->rank;
    if (op == NULL || !op->started) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "result for %s epoch %llu that is not in flight",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    uint64_t expect_total;
    char *dest;
    const char *own = NULL;
    switch (op->stream) {
    case INCMOE_STREAM_ALLGATHER:
        if (h->root >= (uint32_t)comm->nranks || (int)h->root == me) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "allgather block of rank %u is not for rank %d",
                        h->root, me);
            return UCS_ERR_INVALID_PARAM;
        }
        expect_total = op->bytes[h->root];
        dest = op_recv_at(op, (size_t)h->root * op->stride + op->win + h->offset);
        break;
    case INCMOE_STREAM_REDUCESCATTER:
        if ((int)h->root != me) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "reducescatter shard of rank %u sent to rank %d",
                        h->root, me);
            return UCS_ERR_INVALID_PARAM;
        }
        expect_total = op->bytes[me];
        dest = op_recv_at(op, h->offset);
        own = op_send_at(op, (size_t)me * op->stride + op->win + h->offset);
        break;
    default:
        expect_total = op->bytes[0];
        dest = op_recv_at(op, h->offset);
        break;
    }
    if (h->total != expect_total || h->offset + h->length > expect_total ||
        op->recv_done + h->length > op->recv_expected ||
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
    recv_ctx_t *rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to receive a result");
        return UCS_ERR_NO_MEMORY;
    }
    rc->comm = comm;
    rc->op = op;
    rc->dest = dest;
    rc->own = own;
    rc->length = length;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* Eager: the data is here already; a reduction reads it where it lies. */
        if (own == NULL)
            memcpy(dest, data, length);
        recv_finish(rc, data);
        return UCS_OK;
    }
    /* Rendezvous: straight into the registered buffer (or staging, for a reduction). */
    char *target = dest;
    if (own != NULL) {
        rc->tmp = malloc(length);
        if (rc->tmp == NULL) {
            free(rc);
            client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to receive a result");
            return UCS_ERR_NO_MEMORY;
        }
        target = rc->tmp;
    }
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv_am = recv_done_cb,
        .user_data = rc,
        .datatype = ucp_dt_make_contig(1),
    };
    if (own == NULL && op->recv_memh != NULL) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp.memh = op->recv_memh;
    }
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(comm->node.worker, data, target, length, &rp);
    if (UCS_PTR_IS_ERR(req))
        recv_done_cb(NULL, UCS_PTR_STATUS(req), 0, rc);
    return UCS_INPROGRESS;
}

static void on_join_ack(incmoe_comm_t *comm, const char *data, size_t length)
{
    struct inc_wire_join_ack ack;
    memcpy(&ack, data, sizeof(ack));
    if (ack.nranks != (uint32_t)comm->nranks || ack.credits == 0 || ack.chunk_size == 0) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "bad JOIN_ACK: %u ranks, %u credits, chunk %llu",
                    ack.nranks, ack.credits, (unsigned long long)ack.chunk_size);
        return;
    }
    comm->peer_addr = calloc(comm->nranks, sizeof(void *));
    comm->peer_addr_len = calloc(comm->nranks, sizeof(size_t));
    if (comm->peer_addr == NULL || comm->peer_addr_len == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for the address table");
        return;
    }
    size_t pos = sizeof(ack);
    for (int r = 0; r < comm->nranks; r++) {
        uint32_t len;
        if (pos + sizeof(len) > length) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "JOIN_ACK truncated at rank %d's address", r);
            return;
        }
        memcpy(&len, data + pos, sizeof(len));
        pos += sizeof(len);
        if (len > INCMOE_WIRE_MAX_ADDR || pos + len > length) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "JOIN_ACK: rank %d's address is truncated", r);
            return;
        }
        comm->peer_addr[r] = malloc(len ? len : 1);
        if (comm->peer_addr[r] == NULL) {
            client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for the address table");
            return;
        }
        memcpy(comm->peer_addr[r], data + pos, len);
        comm->peer_addr_len[r] = len;
        pos += len;
    }
    comm->credits = ack.credits;
    comm->chunk_size = ack.chunk_size;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        comm->streams[s].credits = ack.credits;
    comm->joined = 1;
}

static ucs_status_t client_on_message(incmoe_comm_t *comm, const void *header, size_t header_length,
                                      void *data, size_t length, const ucp_am_recv_param_t *param);

static ucs_status_t client_am_cb(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    ucs_status_t st = client_on_message(arg, header, header_length, data, length, param);
    /* UCX accepts an error (or INPROGRESS) only for rendezvous data; eager data is done with. */
    return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? st : UCS_OK;
}

static ucs_status_t client_on_message(incmoe_comm_t *comm, const void *header, size_t header_length,
                                      void *data, size_t length, const ucp_am_recv_param_t *param)
{
    char why[160];
    if (inc_wire_hdr_check(header, header_length, length, why, sizeof(why)) != INCMOE_OK) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "malformed message from the switch: %s", why);
        return UCS_ERR_INVALID_PARAM;
    }
    struct inc_wire_hdr h;
    memcpy(&h, header, sizeof(h));
    comm->last_rx = inc_now_s();
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (h.msg != WIRE_MSG_FWD && h.msg != WIRE_MSG_RING_REDUCE && h.msg != WIRE_MSG_RING_GATHER &&
        rndv) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s sent rendezvous", inc_wire_msg_name(h.msg));
        return UCS_ERR_INVALID_PARAM;
    }
    if (h.job != comm->job_id) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s for job %llu, this rank is in job %llu",
                    inc_wire_msg_name(h.msg), (unsigned long long)h.job,
                    (unsigned long long)comm->job_id);
        return UCS_ERR_INVALID_PARAM;
    }
    switch ((inc_wire_msg_t)h.msg) {
    case WIRE_MSG_JOIN_ACK:
        on_join_ack(comm, data, length);
        break;
    case WIRE_MSG_ERROR: {
        char text[INCMOE_WIRE_MAX_TEXT + 1];
        memcpy(text, data, length);
        text[length] = '\0';
        incmoe_status_t st = h.status < 0 ? (incmoe_status_t)h.status : INCMOE_ERR_PROTOCOL;
        client_fail(comm, st, "switch: %s", text);
        break;
    }
    case WIRE_MSG_HEARTBEAT:
        break;
    case WIRE_MSG_CREDIT:
        if (h.stream == INCMOE_STREAM_BARRIER ||
            comm->streams[h.stream].credits + h.length > comm->credits) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "switch returned %llu credits too many",
                        (unsigned long long)h.length);
            break;
        }
        comm->streams[h.stream].credits += (uint32_t)h.length;
        break;
    case WIRE_MSG_DONE: {
        coll_op_t *op = client_find_op(comm, h.stream, h.epoch);
        if (h.stream != INCMOE_STREAM_BARRIER || op == NULL) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "DONE for %s epoch %llu not in flight",
                        inc_wire_stream_name(h.stream), (unsigned long long)h.epoch);
            break;
        }
        op->barrier_done = 1;
        client_op_progressed(comm, op);
        break;
    }
    case WIRE_MSG_FWD:
        return on_fwd(comm, &h, data, length, param);
    case WIRE_MSG_RING_HELLO:
        ring_on_hello(comm);
        break;
    case WIRE_MSG_RING_REDUCE:
    case WIRE_MSG_RING_GATHER:
        return ring_on_data(comm, &h, data, length, param);
    default:
        client_fail(comm, INCMOE_ERR_PROTOCOL, "unexpected %s from the switch",
                    inc_wire_msg_name(h.msg));
        break;
    }
    return UCS_OK;
}

static void client_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    incmoe_comm_t *comm = arg;
    client_fail(comm, INCMOE_ERR_PEER_FAILED, "lost the connection to the switch: %s",
                ucs_status_string(status));
}

/* ------------------------------------------------------------------------ */
/* the proxy thread                                                         */

static void drain_submissions(incmoe_comm_t *comm)
{
    pthread_mutex_lock(&comm->lock);
    coll_op_t *list = comm->submit_head;
    comm->submit_head = comm->submit_tail = NULL;
    int abort_pending = comm->abort_pending;
    comm->abort_pending = 0;
    char text[sizeof(comm->error_text) + 32];
    snprintf(text, sizeof(text), "rank %d: %s", comm->rank, comm->error_text);
    pthread_mutex_unlock(&comm->lock);

    if (abort_pending)
        send_error(comm, (incmoe_status_t)atomic_load(&comm->error), text);
    while (list != NULL) {
        coll_op_t *op = list;
        list = op->next;
        op->next = NULL;
        client_stream_t *s = &comm->streams[op->stream];
        if (s->tail != NULL)
            s->tail->next = op;
        else
            s->head = op;
        s->tail = op;
        op_start(comm, op);
    }
}

static void check_liveness(incmoe_comm_t *comm)
{
    double now = inc_now_s();
    double interval = comm->timeout_ms / 4000.0;
    if (now - comm->last_tx > interval)
        send_ctrl(comm, WIRE_MSG_HEARTBEAT);
    if (now - comm->last_rx > comm->timeout_ms / 1000.0)
        client_fail(comm, INCMOE_ERR_PEER_FAILED, "the switch has been silent for %.1f s",
                    now - comm->last_rx);
}

static void *proxy_main(void *arg)
{
    incmoe_comm_t *comm = arg;
    while (!atomic_load(&comm->stop)) {
        int did = 0;
        while (ucp_worker_progress(comm->node.worker) != 0)
            did = 1;
        drain_submissions(comm);
        if (atomic_load(&comm->error) == 0) {
            for (int s = 0; s < INCMOE_STREAM_BARRIER; s++)
                pump_stream(comm, &comm->streams[s]);
            check_liveness(comm);
        }
        if (!did) {
            int wait_ms = comm->timeout_ms / 8 > 0 ? comm->timeout_ms / 8 : 1;
            inc_ucx_node_wait(&comm->node, comm->wake_fd, wait_ms);
            uint64_t v;
            if (read(comm->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                log_debug(SUBSYS, "wake read: %s", strerror(errno));
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* public API                                                               */

static incmoe_status_t read_secret_file(const char *path, char *out, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        log_error(SUBSYS, "cannot read key file %s: %s", path, strerror(errno));
        return INCMOE_ERR_AUTH;
    }
    char line[INCMOE_MAX_SECRET + 2];
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    *len = strlen(line);
    memcpy(out, line, *len);
    return INCMOE_OK;
}

static incmoe_status_t comm_join(incmoe_comm_t *comm, const incmoe_comm_params_t *params)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    incmoe_status_t st = inc_ucx_parse_hostport(params->switch_addr, &ss, &sslen, 0);
    if (st != INCMOE_OK)
        return st;

    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = INCMOE_AM_ID,
        .cb = client_am_cb,
        .arg = comm,
    };
    ucs_status_t us = ucp_worker_set_am_recv_handler(comm->node.worker, &hp);
    if (us != UCS_OK) {
        log_error(SUBSYS, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
        return INCMOE_ERR_TRANSPORT;
    }
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sslen},
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = client_ep_err_cb, .arg = comm},
    };
    us = ucp_ep_create(comm->node.worker, &ep_params, &comm->ep);
    if (us != UCS_OK) {
        log_error(SUBSYS, "cannot connect to switch %s: %s", params->switch_addr,
                  ucs_status_string(us));
        return INCMOE_ERR_UNREACHABLE;
    }

    /* JOIN carries the secret and where the ring neighbours reach this rank ("" for INC). */
    char waddr[128] = "";
    size_t waddr_len = 0;
    if (comm->algo == INCMOE_ALGO_RING && comm->nranks > 1) {
        st = ring_listen(comm, (struct sockaddr *)&ss, waddr, sizeof(waddr));
        if (st != INCMOE_OK)
            return st;
        waddr_len = strlen(waddr) + 1;
    }
    char secret[INCMOE_MAX_SECRET + 2];
    size_t secret_len = 0;
    if (params->field_mask & INCMOE_COMM_PARAM_SECRET) {
        secret_len = params->secret_len;
        memcpy(secret, params->secret, secret_len);
    } else if (inc_config_get_str("INCMOE_AUTH_KEY") != NULL) {
        secret_len = strlen(inc_config_get_str("INCMOE_AUTH_KEY"));
        if (secret_len > INCMOE_MAX_SECRET)
            secret_len = INCMOE_MAX_SECRET;
        memcpy(secret, inc_config_get_str("INCMOE_AUTH_KEY"), secret_len);
    } else if (inc_config_get_str("INCMOE_AUTH_KEY_FILE") != NULL) {
        st = read_secret_file(inc_config_get_str("INCMOE_AUTH_KEY_FILE"), secret, &secret_len);
        if (st != INCMOE_OK)
            return st;
    }
    struct inc_wire_join join = {
        .nranks = (uint32_t)comm->nranks,
        .secret_len = (uint32_t)secret_len,
        .addr_len = (uint32_t)waddr_len,
        .timeout_ms = (uint32_t)comm->timeout_ms,
    };
    size_t plen = sizeof(join) + secret_len + waddr_len;
    char *payload = malloc(plen);
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_JOIN);
    if (payload == NULL || ctx == NULL) {
        free(payload);
        free(ctx);
        return INCMOE_ERR_NO_MEMORY;
    }
    memcpy(payload, &join, sizeof(join));
    memcpy(payload + sizeof(join), secret, secret_len);
    memcpy(payload + sizeof(join) + secret_len, waddr, waddr_len);
    ctx->hdr.length = plen;
    ctx->payload_owned = payload;
    comm->last_rx = inc_now_s();
    client_send(comm, ctx, payload, plen, NULL);

    /* Wait for all ranks to join (the switch answers then), bounded. */
    double deadline = inc_now_s() + comm->timeout_ms / 1000.0;
    while (!comm->joined && atomic_load(&comm->error) == 0) {
        if (inc_now_s() > deadline) {
            client_fail(comm, INCMOE_ERR_TIMEOUT,
                        "job %llu: not all %d ranks joined at %s within %d ms",
                        (unsigned long long)comm->job_id, comm->nranks, params->switch_addr,
                        comm->timeout_ms);
            break;
        }
        inc_ucx_node_wait(&comm->node, -1, 50);
    }
    return (incmoe_status_t)atomic_load(&comm->error);
}

static void comm_free(incmoe_comm_t *comm)
{
    ring_close(comm);
    if (comm->ep != NULL) {
        /* Graceful, so a LEAVE or ERROR still queued goes out; a dead peer fails it quickly. */
        inc_ucx_ep_close(&comm->node, comm->ep, 0, 2000);
        comm->ep = NULL;
    }
    /* Let outstanding control sends finish (or fail) before the worker goes. */
    double deadline = inc_now_s() + 1.0;
    while (comm->inflight_ctrl > 0 && inc_now_s() < deadline)
        inc_ucx_node_wait(&comm->node, -1, 10);
    comm->freeing = 1;
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        coll_op_t *op = comm->streams[s].head;
        while (op != NULL) {
            coll_op_t *next = op->next;
            free(op->bytes);
            free(op);
            op = next;
        }
    }
    while (comm->submit_head != NULL) {
        coll_op_t *next = comm->submit_head->next;
        free(comm->submit_head->bytes);
        free(comm->submit_head);
        comm->submit_head = next;
    }
    while (comm->mrs != NULL) {
        struct incmoe_mr *next = comm->mrs->next;
        ucp_mem_unmap(comm->node.context, comm->mrs->memh);
        free(comm->mrs);
        comm->mrs = next;
    }
    if (comm->peer_addr != NULL)
        for (int r = 0; r < comm->nranks; r++)
            free(comm->peer_addr[r]);
    free(comm->peer_addr);
    free(comm->peer_addr_len);
    inc_ucx_node_close(&comm->node);
    if (comm->wake_fd >= 0)
        close(comm->wake_fd);
    pthread_mutex_destroy(&comm->lock);
    pthread_cond_destroy(&comm->cond);
    free(comm);
}

incmoe_status_t incmoe_comm_create(const incmoe_comm_params_t *params, incmoe_comm_t **comm_p)
{
    if (params == NULL || comm_p == NULL) {
        log_error(SUBSYS, "incmoe_comm_create: params and comm_p must not be NULL");
        return INCMOE_ERR_INVALID_ARG;
    }
    if (params->nranks < 1 || params->nranks > INCMOE_MAX_RANKS) {
        log_error(SUBSYS, "nranks %d out of range 1..%d", params->nranks, INCMOE_MAX_RANKS);
        return INCMOE_ERR_INVALID_ARG;
    }
    if (params->rank < 0 || params->rank >= params->nranks) {
        log_error(SUBSYS, "rank %d out of range 0..%d", params->rank, params->nranks - 1);
        return INCMOE_ERR_INVALID_ARG;
    }
    if ((params->field_mask & INCMOE_COMM_PARAM_SECRET) &&
        (params->secret_len > INCMOE_MAX_SECRET ||
         (params->secret == NULL && params->secret_len))) {
        log_error(SUBSYS, "secret of %zu bytes: at most %d", params->secret_len, INCMOE_MAX_SECRET);
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_algo_t algo =
        (params->field_mask & INCMOE_COMM_PARAM_ALGO) ? params->algo : INCMOE_ALGO_INC;
    if (algo != INCMOE_ALGO_INC && algo != INCMOE_ALGO_RING) {
        log_error(SUBSYS, "unknown algorithm %d", (int)algo);
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_comm_t *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return INCMOE_ERR_NO_MEMORY;
    comm->rank = params->rank;
    comm->nranks = params->nranks;
    comm->job_id = params->job_id;
    comm->algo = algo;
    comm->timeout_ms = (params->field_mask & INCMOE_COMM_PARAM_TIMEOUT) && params->timeout_ms > 0
                           ? params->timeout_ms
                           : (int)inc_config_get_int("INCMOE_TIMEOUT_MS");
    if (comm->timeout_ms <= 0)
        comm->timeout_ms = 10000;
    comm->rndv_thresh = (size_t)inc_config_get_int("INCMOE_RNDV_THRESH");
    if (comm->rndv_thresh == 0)
        comm->rndv_thresh = SIZE_MAX;
    comm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    incmoe_status_t st = comm->wake_fd < 0 ? INCMOE_ERR_NO_MEMORY : inc_ucx_node_open(&comm->node);
    if (st == INCMOE_OK && algo == INCMOE_ALGO_RING)
        st = ring_init(comm);
    if (st != INCMOE_OK) {
        comm_free(comm);
        return st;
    }
    st = comm_join(comm, params);
    if (st == INCMOE_OK && algo == INCMOE_ALGO_RING)
        st = ring_connect(comm);
    if (st == INCMOE_OK && pthread_create(&comm->proxy, NULL, proxy_main, comm) != 0)
        st = INCMOE_ERR_NO_MEMORY;
    if (st != INCMOE_OK) {
        comm_free(comm);
        return st;
    }
    comm->proxy_started = 1;
    log_info(SUBSYS, "rank %d/%d joined job %llu at %s (chunk %llu, %u credits)", comm->rank,
             comm->nranks, (unsigned long long)comm->job_id, params->switch_addr,
             (unsigned long long)comm->chunk_size, comm->credits);
    *comm_p = comm;
    return INCMOE_OK;
}

incmoe_status_t incmoe_comm_destroy(incmoe_comm_t *comm)
{
    if (comm == NULL)
        return INCMOE_ERR_INVALID_ARG;
    /* Let posted collectives finish, within the dead-peer bound. */
    double deadline = inc_now_s() + comm->timeout_ms / 1000.0;
    pthread_mutex_lock(&comm->lock);
    for (;;) {
        int busy = comm->submit_head != NULL;
        for (int s = 0; s < INC_STREAM_COUNT; s++)
            busy |= atomic_load(&comm->streams[s].completed) != comm->streams[s].posted;
        if (!busy || atomic_load(&comm->error) != 0 || inc_now_s() > deadline)
            break;
        struct timespec ts = inc_realtime_after_ms(50);
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    pthread_mutex_unlock(&comm->lock);
    if (comm->algo == INCMOE_ALGO_RING && atomic_load(&comm->error) == 0) {
        /* Ring traffic is rank to rank: nobody may close its endpoints while a neighbour
           still waits for a send of ours to be acknowledged.  A barrier makes sure every
           rank has finished (a failure ends it at once). */
        incmoe_req_t req;
        if (incmoe_barrier(comm, &req) == INCMOE_OK)
            incmoe_wait(comm, &req);
    }
    atomic_store(&comm->stop, 1);
    uint64_t one = 1;
    if (write(comm->wake_fd, &one, sizeof(one)) < 0)
        log_debug(SUBSYS, "wake: %s", strerror(errno));
    pthread_join(comm->proxy, NULL);
    /* This thread owns the worker now: send a pending local failure, or say goodbye. */
    drain_submissions(comm);
    incmoe_status_t st = (incmoe_status_t)atomic_load(&comm->error);
    if (st == INCMOE_OK)
        send_ctrl(comm, WIRE_MSG_LEAVE);
    comm_free(comm);
    return st == INCMOE_ERR_CLOSED ? INCMOE_OK : st;
}

incmoe_status_t incmoe_comm_error(incmoe_comm_t *comm, char *msg, size_t msg_len)
{
    if (comm == NULL)
        return INCMOE_ERR_INVALID_ARG;
    pthread_mutex_lock(&comm->lock);
    incmoe_status_t st = (incmoe_status_t)atomic_load(&comm->error);
    if (msg != NULL && msg_len > 0)
        snprintf(msg, msg_len, "%s", st != INCMOE_OK ? comm->error_text : "");
    pthread_mutex_unlock(&comm->lock);
    return st;
}

int incmoe_comm_rank(const incmoe_comm_t *comm)
{
    return comm->rank;
}

int incmoe_comm_nranks(const incmoe_comm_t *comm)
{
    return comm->nranks;
}

incmoe_status_t incmoe_mem_register(incmoe_comm_t *comm, void *base, size_t length,
                                    incmoe_mr_t **mr_p)
{
    if (comm == NULL || mr_p == NULL || (base == NULL && length > 0)) {
        log_error(SUBSYS, "incmoe_mem_register: NULL argument");
        return INCMOE_ERR_INVALID_ARG;
    }
    struct incmoe_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return INCMOE_ERR_NO_MEMORY;
    mr->base = base;
    mr->length = length;
    if (length > 0) {
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = base,
            .length = length,
        };
        /* The context is thread safe for mem_map; the worker is not touched. */
        ucs_status_t us = ucp_mem_map(comm->node.context, &mp, &mr->memh);
        if (us != UCS_OK) {
            log_error(SUBSYS, "ucp_mem_map of %zu bytes: %s", length, ucs_status_string(us));
            free(mr);
            return inc_ucx_status(us);
        }
    }
    pthread_mutex_lock(&comm->lock);
    mr->next = comm->mrs;
    comm->mrs = mr;
    pthread_mutex_unlock(&comm->lock);
    *mr_p = mr;
    return INCMOE_OK;
}

incmoe_status_t incmoe_mem_deregister(incmoe_comm_t *comm, incmoe_mr_t *mr)
{
    if (comm == NULL || mr == NULL)
        return INCMOE_ERR_INVALID_ARG;
    pthread_mutex_lock(&comm->lock);
    struct incmoe_mr **pp = &comm->mrs;
    while (*pp != NULL && *pp != mr)
        pp = &(*pp)->next;
    if (*pp == NULL) {
        pthread_mutex_unlock(&comm->lock);
        log_error(SUBSYS, "incmoe_mem_deregister: region %p is not registered here", (void *)mr);
        return INCMOE_ERR_INVALID_ARG;
    }
    *pp = mr->next;
    pthread_mutex_unlock(&comm->lock);
    if (mr->memh != NULL)
        ucp_mem_unmap(comm->node.context, mr->memh);
    free(mr);
    return INCMOE_OK;
}

size_t incmoe_layout_bytes(const incmoe_layout_t *layout, int r)
{
    size_t valid = layout->valid != NULL ? layout->valid[r] : layout->block_stride;
    if (valid <= layout->offset)
        return 0;
    size_t n = valid - layout->offset;
    return n < layout->length ? n : layout->length;
}

/* Is [offset, offset+length) inside a region registered with this communicator? */
static int range_ok(incmoe_comm_t *comm, const struct incmoe_mr *mr, size_t offset, size_t length)
{
    if (length == 0)
        return 1;
    return offset <= mr->length && length <= mr->length - offset;
}

static int mr_known(incmoe_comm_t *comm, const struct incmoe_mr *mr)
{
    pthread_mutex_lock(&comm->lock);
    const struct incmoe_mr *m = comm->mrs;
    while (m != NULL && m != mr)
        m = m->next;
    pthread_mutex_unlock(&comm->lock);
    return m != NULL;
}

/* Queue a collective for the proxy; the epoch is fixed here, under the lock. */
static incmoe_status_t submit(incmoe_comm_t *comm, coll_op_t *op, incmoe_req_t *req_p)
{
    pthread_mutex_lock(&comm->lock);
    incmoe_status_t err = (incmoe_status_t)atomic_load(&comm->error);
    if (err != INCMOE_OK) {
        pthread_mutex_unlock(&comm->lock);
        free(op->bytes);
        free(op);
        return err;
    }
    client_stream_t *s = &comm->streams[op->stream];
    op->epoch = ++s->posted;
    if (comm->submit_tail != NULL)
        comm->submit_tail->next = op;
    else
        comm->submit_head = op;
    comm->submit_tail = op;
    /* Fill the request before unlocking: from then on the proxy may retire and free op. */
    req_p->stream = op->stream;
    req_p->epoch = op->epoch;
    pthread_mutex_unlock(&comm->lock);
    uint64_t one = 1;
    if (write(comm->wake_fd, &one, sizeof(one)) < 0)
        log_debug(SUBSYS, "wake: %s", strerror(errno));
    return INCMOE_OK;
}

/*
 * A collective this rank cannot run must still fail on the other ranks, or
 * they would wait for it forever: the failure goes to the switch, which ends
 * the job for everyone with this reason.
 */
static incmoe_status_t reject(incmoe_comm_t *comm, coll_op_t *op, incmoe_status_t st,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static incmoe_status_t reject(incmoe_comm_t *comm, coll_op_t *op, incmoe_status_t st,
                              const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (op != NULL) {
        free(op->bytes);
        free(op);
    }
    client_fail_job(comm, st, text);
    return st;
}

static coll_op_t *op_new(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    coll_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return NULL;
    op->bytes = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (op->bytes == NULL) {
        free(op);
        return NULL;
    }
    op->stream = stream;
    return op;
}

/* Shared checks of AllGather and ReduceScatter: the N-block side and the own-part side. */
static incmoe_status_t post_layout_coll(incmoe_comm_t *comm, incmoe_stream_t stream,
                                        incmoe_mr_t *send_mr, size_t send_offset,
                                        incmoe_mr_t *recv_mr, size_t recv_offset,
                                        const incmoe_layout_t *layout, incmoe_dtype_t dtype,
                                        incmoe_redop_t redop, incmoe_req_t *req_p)
{
    const char *name = inc_wire_stream_name(stream);
    if (comm == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    coll_op_t *op = op_new(comm, stream);
    if (op == NULL)
        return reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    if (send_mr == NULL || recv_mr == NULL || layout == NULL)
        return reject(comm, op, INCMOE_ERR_INVALID_ARG, "%s: NULL buffer or layout", name);
    if (!mr_known(comm, send_mr) || !mr_known(comm, recv_mr))
        return reject(comm, op, INCMOE_ERR_INVALID_ARG,
                      "%s: buffer not registered with this communicator", name);
    if (layout->offset > layout->block_stride ||
        layout->length > layout->block_stride - layout->offset)
        return reject(comm, op, INCMOE_ERR_INVALID_ARG,
                      "%s: window [%zu,+%zu) does not fit a block of %zu bytes", name,
                      layout->offset, layout->length, layout->block_stride);
    size_t esize = stream == INCMOE_STREAM_ALLGATHER ? 1 : incmoe_dtype_size(dtype);
    if (stream == INCMOE_STREAM_REDUCESCATTER && !incmoe_reduce_supported(dtype, redop))
        return reject(comm, op, INCMOE_ERR_UNSUPPORTED, "%s: datatype %d / operation %d", name,
                      (int)dtype, (int)redop);
    const int me = comm->rank;
    for (int r = 0; r < comm->nranks; r++) {
        if (layout->valid != NULL && layout->valid[r] > layout->block_stride)
            return reject(comm, op, INCMOE_ERR_INVALID_ARG,
                          "%s: valid[%d] = %zu exceeds the block stride %zu", name, r,
                          layout->valid[r], layout->block_stride);
        op->bytes[r] = incmoe_layout_bytes(layout, r);
        if (op->bytes[r] % esize != 0)
            return reject(comm, op, INCMOE_ERR_INVALID_ARG,
                          "%s: rank %d's %llu bytes are not whole %s elements", name, r,
                          (unsigned long long)op->bytes[r], incmoe_dtype_name(dtype));
        /* The N-block side: recv for AllGather, send for ReduceScatter.  Only the bytes
           moved must lie in the region: NCCL's CollNet names a staging slot with the
           window's global offset, so the N-block base may sit before the region (the
           offset wraps) and blocks outside the window move nothing. */
        incmoe_mr_t *nmr = stream == INCMOE_STREAM_ALLGATHER ? recv_mr : send_mr;
        size_t noff = stream == INCMOE_STREAM_ALLGATHER ? recv_offset : send_offset;
        size_t pos = noff + (size_t)r * layout->block_stride + layout->offset;
        if (op->bytes[r] > 0 && !range_ok(comm, nmr, pos, op->bytes[r]))
            return reject(comm, op, INCMOE_ERR_OUT_OF_RANGE,
                          "%s: block %d's window [%zu + %d*%zu + %zu, +%llu) is outside the "
                          "registered %zu bytes",
                          name, r, noff, r, layout->block_stride, layout->offset,
                          (unsigned long long)op->bytes[r], nmr->length);
    }
    incmoe_mr_t *omr = stream == INCMOE_STREAM_ALLGATHER ? send_mr : recv_mr;
    size_t ooff = stream == INCMOE_STREAM_ALLGATHER ? send_offset : recv_offset;
    if (!range_ok(comm, omr, ooff, op->bytes[me]))
        return reject(comm, op, INCMOE_ERR_OUT_OF_RANGE,
                      "%s: this rank's part [%zu,+%llu) is outside the registered %zu bytes", name,
                      ooff, (unsigned long long)op->bytes[me], omr->length);
    op->send_base = send_mr->base;
    op->send_off = send_offset;
    op->send_memh = send_mr->memh;
    op->recv_base = recv_mr->base;
    op->recv_off = recv_offset;
    op->recv_memh = recv_mr->memh;
    op->stride = layout->block_stride;
    op->win = layout->offset;
    op->dtype = stream == INCMOE_STREAM_ALLGATHER ? INCMOE_UINT8 : dtype;
    op->redop = stream == INCMOE_STREAM_ALLGATHER ? INCMOE_SUM : redop;
    op->sig = inc_wire_signature(stream, op->dtype, op->redop, op->bytes, comm->nranks);
    return submit(comm, op, req_p);
}

incmoe_status_t incmoe_allgather(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                 incmoe_mr_t *recv_mr, size_t recv_offset,
                                 const incmoe_layout_t *layout, incmoe_req_t *req_p)
{
    return post_layout_coll(comm, INCMOE_STREAM_ALLGATHER, send_mr, send_offset, recv_mr,
                            recv_offset, layout, INCMOE_UINT8, INCMOE_SUM, req_p);
}

incmoe_status_t incmoe_reducescatter(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                     incmoe_mr_t *recv_mr, size_t recv_offset,
                                     const incmoe_layout_t *layout, incmoe_dtype_t dtype,
                                     incmoe_redop_t op, incmoe_req_t *req_p)
{
    return post_layout_coll(comm, INCMOE_STREAM_REDUCESCATTER, send_mr, send_offset, recv_mr,
                            recv_offset, layout, dtype, op, req_p);
}

incmoe_status_t incmoe_allreduce(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                 incmoe_mr_t *recv_mr, size_t recv_offset, size_t count,
                                 incmoe_dtype_t dtype, incmoe_redop_t redop, incmoe_req_t *req_p)
{
    if (comm == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    coll_op_t *op = op_new(comm, INCMOE_STREAM_ALLREDUCE);
    if (op == NULL)
        return reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "allreduce: out of memory");
    if (!incmoe_reduce_supported(dtype, redop))
        return reject(comm, op, INCMOE_ERR_UNSUPPORTED, "allreduce: datatype %d / operation %d",
                      (int)dtype, (int)redop);
    if (send_mr == NULL || recv_mr == NULL || !mr_known(comm, send_mr) || !mr_known(comm, recv_mr))
        return reject(comm, op, INCMOE_ERR_INVALID_ARG,
                      "allreduce: buffer not registered with this communicator");
    size_t esize = incmoe_dtype_size(dtype);
    if (count > SIZE_MAX / esize)
        return reject(comm, op, INCMOE_ERR_INVALID_ARG, "allreduce: %zu elements overflow", count);
    size_t bytes = count * esize;
    if (!range_ok(comm, send_mr, send_offset, bytes) ||
        !range_ok(comm, recv_mr, recv_offset, bytes))
        return reject(comm, op, INCMOE_ERR_OUT_OF_RANGE,
                      "allreduce: %zu bytes at send %zu / recv %zu exceed the registered %zu / %zu",
                      bytes, send_offset, recv_offset, send_mr->length, recv_mr->length);
    for (int r = 0; r < comm->nranks; r++)
        op->bytes[r] = bytes;
    op->send_base = send_mr->base;
    op->send_off = send_offset;
    op->send_memh = send_mr->memh;
    op->recv_base = recv_mr->base;
    op->recv_off = recv_offset;
    op->recv_memh = recv_mr->memh;
    op->dtype = dtype;
    op->redop = redop;
    op->sig = inc_wire_signature(INCMOE_STREAM_ALLREDUCE, dtype, redop, op->bytes, comm->nranks);
    return submit(comm, op, req_p);
}

incmoe_status_t incmoe_barrier(incmoe_comm_t *comm, incmoe_req_t *req_p)
{
    if (comm == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    coll_op_t *op = op_new(comm, INCMOE_STREAM_BARRIER);
    if (op == NULL)
        return reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "barrier: out of memory");
    op->all_issued = 1;
    op->sig = inc_wire_signature(INCMOE_STREAM_BARRIER, 0, 0, op->bytes, comm->nranks);
    return submit(comm, op, req_p);
}

incmoe_status_t incmoe_test(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    if (comm == NULL || req == NULL || (unsigned)req->stream >= INC_STREAM_COUNT)
        return INCMOE_ERR_INVALID_ARG;
    uint64_t done =
        atomic_load_explicit(&comm->streams[req->stream].completed, memory_order_acquire);
    if (done >= req->epoch)
        return INCMOE_OK;
    incmoe_status_t err = (incmoe_status_t)atomic_load(&comm->error);
    return err != INCMOE_OK ? err : INCMOE_IN_PROGRESS;
}

incmoe_status_t incmoe_wait(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    incmoe_status_t st = incmoe_test(comm, req);
    if (st != INCMOE_IN_PROGRESS)
        return st;
    pthread_mutex_lock(&comm->lock);
    while ((st = incmoe_test(comm, req)) == INCMOE_IN_PROGRESS) {
        /* The proxy broadcasts on every retirement and error; the timeout is a safety net. */
        struct timespec ts = inc_realtime_after_ms(1000);
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    pthread_mutex_unlock(&comm->lock);
    return st;
}

uint64_t incmoe_stream_completed(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    if (comm == NULL || (unsigned)stream >= INC_STREAM_COUNT)
        return 0;
    return atomic_load_explicit(&comm->streams[stream].completed, memory_order_acquire);
}
