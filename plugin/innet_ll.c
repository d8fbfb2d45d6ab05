/*
 * innet_ll.c - the low-latency form of dispatch and combine through the
 * switch (base/wire.h, "The low-latency form of dispatch and combine").  A
 * started collective sends its one LL up in the stream's order, within the
 * stream's credits (max(1, ceil(length / chunk_size)) of them, which the
 * switch's CREDIT returns once it freed the LL).  What comes back goes to
 * ll_shared.c, as the point-to-point path's PEER_LL do: a dispatch's LL_FWD
 * of each source (client_ll_take), a combine's one LL_FWD, or a verdict of
 * the switch, which fails the collective alone (client_ll_take_result).
 *
 * The switch forwards a source's dispatch as soon as that source's LL came,
 * so an LL_FWD may reach this rank before its own dispatch of that epoch
 * started: it is kept (innet_t's early list) and taken when the collective
 * starts.  What a rank keeps so is bounded: each of the N - 1 others sends
 * one per epoch, within the epochs the switch keeps open beyond the last
 * this rank completed; anything past that is a broken switch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "innet.h"
#include "ll_shared.h"
#include "notify.h"
#include "send.h"

#include "base/ucx_util.h"

/* An LL_FWD landing in this rank's memory (rendezvous). */
typedef struct {
    incmoe_comm_t *comm;
    struct inc_wire_hdr h;
    char *buf;
    size_t length;
} ll_recv_t;

/* An LL_FWD of a dispatch this rank has not started yet. */
struct innet_early {
    struct innet_early *next;
    struct inc_wire_hdr h;
    char *payload;
    size_t length;
};

void innet_ll_start(incmoe_comm_t *comm, coll_op_t *op)
{
    innet_t *in = comm->algo;
    if (!client_ll_start(comm, op))
        return;
    /* The LL_FWDs that came before it started are its now, in the order they came. */
    innet_early_t **pp = &in->early;
    while (*pp != NULL && atomic_load(&comm->error) == 0) {
        innet_early_t *e = *pp;
        if (e->h.stream != op->stream || e->h.epoch != op->epoch) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        in->nearly--;
        client_ll_take(comm, op, -1, &e->h, e->payload, e->length); /* takes the payload */
        free(e);
    }
}

int innet_ll_pump(incmoe_comm_t *comm, coll_op_t *op, uint32_t *credits)
{
    if (op->dc_posted)
        return 1;
    const uint32_t need = client_ll_credits(comm, client_ll_up_length(comm, op));
    if (*credits < need)
        return 1; /* the switch returns them as it frees the LLs before this one */
    uint64_t length, total;
    char *payload = client_ll_payload(comm, op, WIRE_MSG_LL, -1, &length, &total);
    send_ctx_t *ctx = payload != NULL ? client_ctx(comm, WIRE_MSG_LL) : NULL;
    if (ctx == NULL) {
        free(payload);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to send a %s",
                    inc_wire_stream_name(op->stream));
        return 0;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.total = total;
    ctx->hdr.sig = op->sig;
    ctx->hdr.length = length;
    ctx->payload_owned = payload;
    *credits -= need;
    op->dc_posted = 1;
    op->all_issued = 1;
    client_send(comm, ctx, payload, (size_t)length, NULL, &op->sent);
    return 1;
}

/* Keep an LL_FWD of a dispatch not started here yet; 0: a broken switch (the job failed). */
static int keep_early(incmoe_comm_t *comm, const struct inc_wire_hdr *h, char *payload,
                      size_t length)
{
    innet_t *in = comm->algo;
    const uint64_t done = atomic_load(&comm->streams[h->stream].completed);
    const int most = (comm->nranks - 1) * INCMOE_WIRE_OPEN_EPOCHS;
    innet_early_t *e = NULL;
    if (h->stream == INCMOE_STREAM_DISPATCH && h->status == 0 && h->epoch > done &&
        h->epoch <= done + INCMOE_WIRE_OPEN_EPOCHS && in->nearly < most)
        e = malloc(sizeof(*e));
    if (e == NULL) {
        free(payload);
        char text[200];
        snprintf(text, sizeof(text),
                 "the switch sent an LL_FWD for %s epoch %llu, which this rank does not await "
                 "(it completed epoch %llu)",
                 inc_wire_stream_name(h->stream), (unsigned long long)h->epoch,
                 (unsigned long long)done);
        client_fail_job(comm, INCMOE_ERR_PROTOCOL, text);
        return 0;
    }
    *e = (innet_early_t){.h = *h, .payload = payload, .length = length};
    innet_early_t **pp = &in->early; /* at the end: the order they came in */
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = e;
    in->nearly++;
    return 1;
}

/* An LL_FWD in this rank's memory (payload, owned here): its collective takes it. */
static void deliver(incmoe_comm_t *comm, const struct inc_wire_hdr *h, char *payload, size_t length)
{
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (op == NULL) {
        keep_early(comm, h, payload, length);
        return;
    }
    if (op->ll == NULL) { /* started in the bulk form, or failed starting */
        free(payload);
        client_fail(comm, INCMOE_ERR_PROTOCOL,
                    "an LL_FWD for %s epoch %llu, not in the "
                    "low-latency form",
                    inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return;
    }
    op->holds++; /* taking may decide it; it retires below */
    if (h->stream == INCMOE_STREAM_DISPATCH && h->status == 0)
        client_ll_take(comm, op, -1, h, payload, length);
    else /* a combine's result, or the switch's verdict on this rank's LL */
        client_ll_take_result(comm, op, h, payload, length);
    op->holds--;
    client_op_progressed(comm, op); /* may free op */
}

static void recv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    ll_recv_t *rc = user_data;
    incmoe_comm_t *comm = rc->comm;
    if (comm->freeing || comm->algo == NULL || atomic_load(&comm->error) != 0) {
        /* The communicator is going (its algorithm closed while the receive was in
           flight), or failed: nothing lands. */
        free(rc->buf);
    } else if (status != UCS_OK) {
        free(rc->buf);
        client_fail(comm, inc_ucx_status(status), "receiving an LL_FWD failed: %s",
                    ucs_status_string(status));
    } else {
        deliver(comm, &rc->h, rc->buf, rc->length);
    }
    free(rc);
    if (request != NULL)
        ucp_request_free(request);
}

ucs_status_t innet_ll_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    char *buf = malloc(length > 0 ? length : 1);
    if (buf == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for an LL_FWD");
        return UCS_ERR_NO_MEMORY;
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(buf, data, length);
        deliver(comm, h, buf, length);
        return atomic_load(&comm->error) != 0 ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    ll_recv_t *rc = malloc(sizeof(*rc));
    if (rc == NULL) {
        free(buf);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for an LL_FWD");
        return UCS_ERR_NO_MEMORY;
    }
    *rc = (ll_recv_t){.comm = comm, .h = *h, .buf = buf, .length = length};
    inc_ucx_am_recv_data(comm->node.worker, data, buf, length, NULL, recv_done, rc);
    return UCS_INPROGRESS;
}

void innet_ll_close(incmoe_comm_t *comm)
{
    innet_t *in = comm->algo;
    while (in != NULL && in->early != NULL) {
        innet_early_t *e = in->early;
        in->early = e->next;
        free(e->payload);
        free(e);
    }
}
