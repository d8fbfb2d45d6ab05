/*
 * post.c - the posting API on the caller's threads: check every argument of
 * a collective against the registered regions, describe it (per-rank byte
 * counts, signature), fix its epoch and queue it for the proxy, first
 * waiting while the stream has a whole window in flight; and the completion
 * side (test, wait, the streams' counters).  A collective this rank rejects
 * still fails the job, or the other ranks would wait for it.
 */
#include "post.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "coll.h"
#include "dc_shared.h"
#include "mr.h"
#include "notify.h"
#include "submit.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/vformat.h"

size_t incmoe_layout_bytes(const incmoe_layout_t *layout, int r)
{
    size_t valid = layout->valid != NULL ? layout->valid[r] : layout->block_stride;
    if (valid <= layout->offset)
        return 0;
    size_t n = valid - layout->offset;
    return n < layout->length ? n : layout->length;
}

int client_range_ok(const struct incmoe_mr *mr, size_t offset, size_t length)
{
    if (length == 0)
        return 1;
    return offset <= mr->length && length <= mr->length - offset;
}

/* Collectives of the stream posted and not yet completed, under comm->lock. */
static uint64_t stream_in_flight(const client_stream_t *s)
{
    return s->posted - client_stream_completed(s);
}

unsigned client_stream_room(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    if (comm == NULL || (unsigned)stream >= INC_STREAM_COUNT)
        return 0;
    pthread_mutex_lock(&comm->lock);
    uint64_t n = stream_in_flight(&comm->streams[stream]);
    pthread_mutex_unlock(&comm->lock);
    return n >= INCMOE_STREAM_WINDOW ? 0 : (unsigned)(INCMOE_STREAM_WINDOW - n);
}

/*
 * Under comm->lock: wait until the stream has room for one more collective
 * (the switch keeps only a window of epochs open), at most timeout_ms.  The
 * proxy broadcasts comm->cond on every retirement and error.
 */
static incmoe_status_t wait_for_room_locked(incmoe_comm_t *comm, const client_stream_t *s)
{
    struct timespec until = inc_realtime_after_ms(comm->timeout_ms);
    for (;;) {
        incmoe_status_t err = (incmoe_status_t)atomic_load(&comm->error);
        if (err != INCMOE_OK)
            return err;
        if (stream_in_flight(s) < INCMOE_STREAM_WINDOW)
            return INCMOE_OK;
        if (pthread_cond_timedwait(&comm->cond, &comm->lock, &until) == ETIMEDOUT &&
            stream_in_flight(s) >= INCMOE_STREAM_WINDOW && atomic_load(&comm->error) == 0)
            return INCMOE_ERR_TIMEOUT;
    }
}

incmoe_status_t client_post_submit(incmoe_comm_t *comm, coll_op_t *op, incmoe_req_t *req_p)
{
    pthread_mutex_lock(&comm->lock);
    incmoe_status_t err = wait_for_room_locked(comm, &comm->streams[op->stream]);
    client_stream_t *s = &comm->streams[op->stream];
    if (err == INCMOE_OK) {
        op->epoch = s->posted + 1;
        /* A dispatch is kept until combined or released: no room, nothing posted. */
        if (op->stream == INCMOE_STREAM_DISPATCH && !client_dc_keep_locked(comm, op))
            err = INCMOE_ERR_BUSY;
    }
    if (err != INCMOE_OK) {
        pthread_mutex_unlock(&comm->lock);
        client_op_free(comm, op);
        return err;
    }
    s->posted = op->epoch;
    client_proxy_submit_locked(comm, op);
    /* Fill the request before unlocking: from then on the proxy may retire and free op. */
    req_p->stream = op->stream;
    req_p->epoch = op->epoch;
    pthread_mutex_unlock(&comm->lock);
    client_wake(comm);
    return INCMOE_OK;
}

/*
 * A collective this rank cannot run must still fail on the other ranks, or
 * they would wait for it forever: the failure goes to the switch, which ends
 * the job for everyone with this reason.
 */
incmoe_status_t client_post_reject(incmoe_comm_t *comm, coll_op_t *op, incmoe_status_t st,
                                   const char *fmt, ...)
{
    char text[256];
    INC_VFORMAT(text, sizeof(text), fmt);
    if (op != NULL)
        client_op_free(comm, op);
    client_fail_job(comm, st, text);
    return st;
}

coll_op_t *client_op_new(incmoe_comm_t *comm, incmoe_stream_t stream)
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

void client_op_set_buffers(coll_op_t *op, size_t send_offset, size_t recv_offset)
{
    op->send_base = op->send_mr->base;
    op->send_off = send_offset;
    op->send_memh = op->send_mr->memh;
    op->recv_base = op->recv_mr->base;
    op->recv_off = recv_offset;
    op->recv_memh = op->recv_mr->memh;
}

/*
 * Every rank's bytes in the window, and that the N-block side holds them:
 * recv for AllGather, send for ReduceScatter.  Only the bytes moved must lie
 * in the region: NCCL's CollNet names a staging slot with the window's global
 * offset, so the N-block base may sit before the region (the offset wraps)
 * and blocks outside the window move nothing.
 */
static incmoe_status_t check_blocks(incmoe_comm_t *comm, coll_op_t *op, size_t noff,
                                    const incmoe_layout_t *layout, size_t esize)
{
    const char *name = inc_wire_stream_name(op->stream);
    const struct incmoe_mr *nmr = op->stream == INCMOE_STREAM_ALLGATHER ? op->recv_mr : op->send_mr;
    for (int r = 0; r < comm->nranks; r++) {
        if (layout->valid != NULL && layout->valid[r] > layout->block_stride)
            return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                      "%s: valid[%d] = %zu exceeds the block stride %zu", name, r,
                                      layout->valid[r], layout->block_stride);
        op->bytes[r] = incmoe_layout_bytes(layout, r);
        if (op->bytes[r] % esize != 0)
            return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                      "%s: rank %d's %llu bytes are not whole %s elements", name, r,
                                      (unsigned long long)op->bytes[r],
                                      incmoe_dtype_name(op->dtype));
        size_t pos = noff + (size_t)r * layout->block_stride + layout->offset;
        if (op->bytes[r] > 0 && !client_range_ok(nmr, pos, op->bytes[r]))
            return client_post_reject(
                comm, op, INCMOE_ERR_OUT_OF_RANGE,
                "%s: block %d's window [%zu + %d*%zu + %zu, +%llu) is outside the "
                "registered %zu bytes",
                name, r, noff, r, layout->block_stride, layout->offset,
                (unsigned long long)op->bytes[r], nmr->length);
    }
    return INCMOE_OK;
}

/* Shared checks of AllGather and ReduceScatter: the N-block side and the own-part side. */
static incmoe_status_t post_layout_coll(incmoe_comm_t *comm, incmoe_stream_t stream,
                                        incmoe_mr_t *send_mr, size_t send_offset,
                                        incmoe_mr_t *recv_mr, size_t recv_offset,
                                        const incmoe_layout_t *layout, incmoe_dtype_t dtype,
                                        incmoe_redop_t redop, incmoe_req_t *req_p)
{
    const char *name = inc_wire_stream_name(stream);
    const int gather = stream == INCMOE_STREAM_ALLGATHER;
    if (comm == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    coll_op_t *op = client_op_new(comm, stream);
    if (op == NULL)
        return client_post_reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    if (send_mr == NULL || recv_mr == NULL || layout == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG, "%s: NULL buffer or layout",
                                  name);
    if (!client_mr_hold(comm, op, send_mr, recv_mr))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "%s: buffer not registered with this communicator", name);
    if (layout->offset > layout->block_stride ||
        layout->length > layout->block_stride - layout->offset)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "%s: window [%zu,+%zu) does not fit a block of %zu bytes", name,
                                  layout->offset, layout->length, layout->block_stride);
    if (!gather && !incmoe_reduce_supported(dtype, redop))
        return client_post_reject(comm, op, INCMOE_ERR_UNSUPPORTED,
                                  "%s: datatype %d / operation %d", name, (int)dtype, (int)redop);
    op->dtype = gather ? INCMOE_UINT8 : dtype;
    op->redop = gather ? INCMOE_SUM : redop;
    incmoe_status_t st = check_blocks(comm, op, gather ? recv_offset : send_offset, layout,
                                      gather ? 1 : incmoe_dtype_size(dtype));
    if (st != INCMOE_OK)
        return st;
    incmoe_mr_t *omr = gather ? send_mr : recv_mr;
    size_t ooff = gather ? send_offset : recv_offset;
    if (!client_range_ok(omr, ooff, op->bytes[comm->rank]))
        return client_post_reject(
            comm, op, INCMOE_ERR_OUT_OF_RANGE,
            "%s: this rank's part [%zu,+%llu) is outside the registered %zu bytes", name, ooff,
            (unsigned long long)op->bytes[comm->rank], omr->length);
    client_op_set_buffers(op, send_offset, recv_offset);
    op->stride = layout->block_stride;
    op->win = layout->offset;
    op->sig = inc_wire_signature(stream, op->dtype, op->redop, op->bytes, comm->nranks);
    return client_post_submit(comm, op, req_p);
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
    coll_op_t *op = client_op_new(comm, INCMOE_STREAM_ALLREDUCE);
    if (op == NULL)
        return client_post_reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "allreduce: out of memory");
    if (!incmoe_reduce_supported(dtype, redop))
        return client_post_reject(comm, op, INCMOE_ERR_UNSUPPORTED,
                                  "allreduce: datatype %d / operation %d", (int)dtype, (int)redop);
    if (send_mr == NULL || recv_mr == NULL || !client_mr_hold(comm, op, send_mr, recv_mr))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "allreduce: buffer not registered with this communicator");
    size_t esize = incmoe_dtype_size(dtype);
    if (count > SIZE_MAX / esize)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "allreduce: %zu elements overflow", count);
    size_t bytes = count * esize;
    if (!client_range_ok(send_mr, send_offset, bytes) ||
        !client_range_ok(recv_mr, recv_offset, bytes))
        return client_post_reject(
            comm, op, INCMOE_ERR_OUT_OF_RANGE,
            "allreduce: %zu bytes at send %zu / recv %zu exceed the registered %zu / %zu", bytes,
            send_offset, recv_offset, send_mr->length, recv_mr->length);
    for (int r = 0; r < comm->nranks; r++)
        op->bytes[r] = bytes;
    client_op_set_buffers(op, send_offset, recv_offset);
    op->dtype = dtype;
    op->redop = redop;
    op->sig = inc_wire_signature(INCMOE_STREAM_ALLREDUCE, dtype, redop, op->bytes, comm->nranks);
    return client_post_submit(comm, op, req_p);
}

incmoe_status_t incmoe_barrier(incmoe_comm_t *comm, incmoe_req_t *req_p)
{
    if (comm == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    coll_op_t *op = client_op_new(comm, INCMOE_STREAM_BARRIER);
    if (op == NULL)
        return client_post_reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "barrier: out of memory");
    op->all_issued = 1;
    op->sig = inc_wire_signature(INCMOE_STREAM_BARRIER, 0, 0, op->bytes, comm->nranks);
    return client_post_submit(comm, op, req_p);
}

/* A request's state; have_lock: the caller holds comm->lock (a dispatch or combine's own
   failure is read under it). */
static incmoe_status_t req_test(incmoe_comm_t *comm, const incmoe_req_t *req, int have_lock,
                                const char **why_p)
{
    *why_p = "";
    uint64_t done = client_stream_completed(&comm->streams[req->stream]);
    if (done >= req->epoch) {
        if (req->stream != INCMOE_STREAM_DISPATCH && req->stream != INCMOE_STREAM_COMBINE)
            return INCMOE_OK;
        if (!have_lock)
            pthread_mutex_lock(&comm->lock);
        incmoe_status_t st = client_dc_outcome_locked(comm, req, why_p);
        if (!have_lock)
            pthread_mutex_unlock(&comm->lock);
        return st;
    }
    incmoe_status_t err = (incmoe_status_t)atomic_load(&comm->error);
    return err != INCMOE_OK ? err : INCMOE_IN_PROGRESS;
}

static int req_valid(const incmoe_comm_t *comm, const incmoe_req_t *req)
{
    return comm != NULL && req != NULL && (unsigned)req->stream < INC_STREAM_COUNT;
}

incmoe_status_t incmoe_test(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    const char *why;
    return req_valid(comm, req) ? req_test(comm, req, 0, &why) : INCMOE_ERR_INVALID_ARG;
}

incmoe_status_t incmoe_wait(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    if (!req_valid(comm, req))
        return INCMOE_ERR_INVALID_ARG;
    const char *why;
    incmoe_status_t st = req_test(comm, req, 0, &why);
    if (st != INCMOE_IN_PROGRESS)
        return st;
    pthread_mutex_lock(&comm->lock);
    while ((st = req_test(comm, req, 1, &why)) == INCMOE_IN_PROGRESS) {
        /* The proxy broadcasts on every retirement and error; the timeout is a safety net. */
        struct timespec ts = inc_realtime_after_ms(1000);
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    pthread_mutex_unlock(&comm->lock);
    return st;
}

incmoe_status_t incmoe_req_error(incmoe_comm_t *comm, const incmoe_req_t *req, char *msg,
                                 size_t msg_len)
{
    if (!req_valid(comm, req))
        return INCMOE_ERR_INVALID_ARG;
    pthread_mutex_lock(&comm->lock);
    const char *why;
    incmoe_status_t st = req_test(comm, req, 1, &why);
    if (st < 0 && client_stream_completed(&comm->streams[req->stream]) < req->epoch)
        why = comm->error_text; /* the communicator failed before the request completed */
    if (msg != NULL && msg_len > 0)
        snprintf(msg, msg_len, "%s", st < 0 ? why : "");
    pthread_mutex_unlock(&comm->lock);
    return st;
}

uint64_t incmoe_stream_completed(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    if (comm == NULL || (unsigned)stream >= INC_STREAM_COUNT)
        return 0;
    return client_stream_completed(&comm->streams[stream]);
}
