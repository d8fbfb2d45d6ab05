/*
 * coll.c - the common life of a collective on the proxy thread: it joins its
 * stream, does its local part (the own block, the single-rank case, the
 * barrier's POST), leaves the data movement to the algorithm (comm.c starts
 * it), and retires in epoch order once every send and receive of it is done.
 * Retiring releases its registered regions before the stream's counter shows
 * it complete, so a caller that saw it complete may deregister them at once.
 */
#include "coll.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "dc_shared.h"
#include "ll_shared.h"
#include "mr.h"
#include "notify.h"
#include "send.h"

coll_op_t *client_find_op(incmoe_comm_t *comm, unsigned stream, uint64_t epoch)
{
    for (coll_op_t *op = comm->streams[stream].head; op != NULL; op = op->next)
        if (op->epoch == epoch)
            return op;
    return NULL;
}

static int op_is_dc(const coll_op_t *op)
{
    return op->stream == INCMOE_STREAM_DISPATCH || op->stream == INCMOE_STREAM_COMBINE;
}

static int op_finished(const coll_op_t *op)
{
    if (!op->started || !op->all_issued || op->sent.count != 0 || op->holds != 0)
        return 0;
    if (op->stream == INCMOE_STREAM_BARRIER)
        return op->barrier_done;
    /* A rank that receives nothing still waits for its plan, which needs every rank's post:
       so it never runs ahead of the others (wire.h, "Epoch window"). */
    if (op_is_dc(op))
        return op->planned && op->recv_done == op->recv_expected;
    /* A small collective waits for its SMALL_FWD even when it receives no bytes. */
    return op->recv_done == op->recv_expected && (!op->small || op->small_landed);
}

void client_op_progressed(incmoe_comm_t *comm, coll_op_t *op)
{
    client_stream_retire(comm, op->stream);
}

/* The last message of the collective in flight completed. */
static void op_sent(client_completion_t *self)
{
    coll_op_t *op = (coll_op_t *)((char *)self - offsetof(coll_op_t, sent));
    client_op_progressed(op->comm, op);
}

void client_stream_retire(incmoe_comm_t *comm, incmoe_stream_t stream)
{
    client_stream_t *s = &comm->streams[stream];
    if (s->head == NULL || !op_finished(s->head))
        return;
    coll_op_t *done = NULL;
    pthread_mutex_lock(&comm->lock);
    while (s->head != NULL && op_finished(s->head)) {
        coll_op_t *op = s->head;
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        client_mr_release_locked(op);
        if (op_is_dc(op))
            client_dc_retire_locked(comm, op);
        atomic_store_explicit(&s->completed, op->epoch, memory_order_release);
        op->next = done;
        done = op;
    }
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    while (done != NULL) {
        coll_op_t *next = done->next;
        client_ll_free(done->ll, comm->nranks);
        free(done->why);
        free(done->refused);
        free(done->bytes);
        free(done);
        done = next;
    }
}

void client_op_free(incmoe_comm_t *comm, coll_op_t *op)
{
    pthread_mutex_lock(&comm->lock);
    client_mr_release_locked(op);
    client_dc_drop_locked(op);
    pthread_mutex_unlock(&comm->lock);
    client_ll_free(op->ll, comm->nranks);
    free(op->why);
    free(op->refused);
    free(op->bytes);
    free(op);
}

/* The part of a collective that needs nobody else: the own block, and what will land here. */
static void op_local_part(incmoe_comm_t *comm, coll_op_t *op)
{
    const int me = comm->rank;
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
}

int client_op_start(incmoe_comm_t *comm, coll_op_t *op)
{
    client_stream_t *s = &comm->streams[op->stream];
    op->next = NULL;
    if (s->tail != NULL)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;

    op->comm = comm;
    op->sent = (client_completion_t){.func = op_sent};
    op->started = 1;
    op_local_part(comm, op);
    if (comm->nranks == 1) {
        if (op_is_dc(op) && op->dc->ll)
            client_ll_alone(comm, op);
        else if (op_is_dc(op))
            client_dc_plan_alone(comm, op);
        op->all_issued = 1;
        op->barrier_done = 1;
        client_op_progressed(comm, op); /* may free op */
        return 0;
    }
    if (op->stream == INCMOE_STREAM_BARRIER) {
        client_send_post(comm, op, &op->sent); /* the switch answers DONE when all ranks posted */
        return 0;
    }
    return 1;
}

void client_on_done(incmoe_comm_t *comm, const struct inc_wire_hdr *h)
{
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (h->stream != INCMOE_STREAM_BARRIER || op == NULL) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "DONE for %s epoch %llu not in flight",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return;
    }
    op->barrier_done = 1;
    client_op_progressed(comm, op);
}

typedef struct {
    incmoe_comm_t *comm;
    coll_op_t *op;
    struct inc_wire_hdr h;
    uint64_t rows;
    client_land_fn land;
    char *buf;
} rndv_recv_t;

static void rndv_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    rndv_recv_t *rc = user_data;
    if (!rc->comm->freeing) { /* else the collective is gone */
        rc->op->holds--;
        if (status != UCS_OK)
            client_fail(rc->comm, inc_ucx_status(status), "receiving a result failed: %s",
                        ucs_status_string(status));
        else if (atomic_load(&rc->comm->error) == 0) /* else failed: see client_on_message */
            rc->land(rc->comm, rc->op, &rc->h, rc->rows, rc->buf);
    }
    free(rc->buf);
    free(rc);
    if (request != NULL)
        ucp_request_free(request);
}

ucs_status_t client_op_recv_rndv(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                                 uint64_t rows, void *data, size_t length, client_land_fn land)
{
    rndv_recv_t *rc = calloc(1, sizeof(*rc));
    char *buf = rc != NULL ? malloc(length ? length : 1) : NULL;
    if (buf == NULL) {
        free(rc);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to receive a result");
        return UCS_ERR_NO_MEMORY;
    }
    *rc = (rndv_recv_t){.comm = comm, .op = op, .h = *h, .rows = rows, .land = land, .buf = buf};
    op->holds++; /* landing: keeps the collective from retiring */
    inc_ucx_am_recv_data(comm->node.worker, data, buf, length, NULL, rndv_recv_cb, rc);
    return UCS_INPROGRESS;
}
