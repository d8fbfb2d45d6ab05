/*
 * send.c - messages out of this rank: a send context per message (UCX 1.13
 * needs the sent header alive until completion), counted in the completion its
 * sender handed in until UCX completes it, and the few control messages every
 * algorithm shares (heartbeat, leave, error, post).  It knows no collective's
 * life: what a completion means is the sender's.  Called on the thread that
 * owns the worker.
 */
#include "send.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "notify.h"

#include "base/clock.h"
#include "base/log.h"

#define SUBSYS "client"

/* A test hook, defined only by a test program (tests/test_errors.cc) and never by the library,
   so nothing is exported for it: called on the proxy thread once a message of `length` payload
   bytes was handed to UCX, so a test can act once a collective's data is on its way instead of
   sleeping and hoping. */
extern void client_test_sent(int msg, size_t length) __attribute__((weak));

static void send_done_cb(void *request, ucs_status_t status, void *user_data)
{
    send_ctx_t *ctx = user_data;
    incmoe_comm_t *comm = ctx->comm;
    if (comm->freeing) { /* destroying the worker purged it; its completion may be gone */
        free(ctx->payload_owned);
        free(ctx);
        if (request != NULL)
            ucp_request_free(request);
        return;
    }
    if (status != UCS_OK && status != UCS_ERR_CANCELED && ctx->to >= 0) {
        /* Another rank is gone: the others may wait on it too, so the job hears it. */
        char text[160];
        snprintf(text, sizeof(text), "rank %d: sending %s to rank %d failed: %s", comm->rank,
                 inc_wire_msg_name(ctx->hdr.msg), ctx->to, ucs_status_string(status));
        client_fail_job(comm, INCMOE_ERR_PEER_FAILED, text);
    } else if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        /* Once joined, a connection that cannot carry a message means the peer is gone. */
        client_fail(comm, comm->joined ? INCMOE_ERR_PEER_FAILED : inc_ucx_status(status),
                    "sending %s failed: %s", inc_wire_msg_name(ctx->hdr.msg),
                    ucs_status_string(status));
    }
    client_completion_t *comp = ctx->comp;
    free(ctx->payload_owned);
    free(ctx);
    if (request != NULL)
        ucp_request_free(request);
    if (--comp->count == 0 && comp->func != NULL)
        comp->func(comp); /* last: it may free what holds comp */
}

void client_send_ep(incmoe_comm_t *comm, ucp_ep_h ep, send_ctx_t *ctx, const void *payload,
                    size_t length, ucp_mem_h memh, client_completion_t *comp)
{
    ctx->comm = comm;
    ctx->comp = comp;
    comp->count++;
    if (ep == NULL) { /* the peer's connection is closing (mesh.c): as a send UCX canceled */
        send_done_cb(NULL, UCS_ERR_CANCELED, ctx);
        return;
    }
    /* REPLY names our endpoint at the switch, which is how it knows who sent it. */
    const uint32_t flags = UCP_AM_SEND_FLAG_REPLY |
                           (length >= comm->rndv_thresh && !ctx->eager ? UCP_AM_SEND_FLAG_RNDV
                                                                       : UCP_AM_SEND_FLAG_EAGER);
    int msg = ctx->hdr.msg; /* ctx may be gone once the send is posted */
    if (inc_ucx_am_send(ep, &ctx->hdr, sizeof(ctx->hdr), payload, length, flags, memh, send_done_cb,
                        ctx) == UCS_OK &&
        client_test_sent != NULL)
        client_test_sent(msg, length);
    if (ep == comm->ep)
        comm->last_tx = inc_now_s();
}

void client_send(incmoe_comm_t *comm, send_ctx_t *ctx, const void *payload, size_t length,
                 ucp_mem_h memh, client_completion_t *comp)
{
    client_send_ep(comm, comm->ep, ctx, payload, length, memh, comp);
}

send_ctx_t *client_ctx(incmoe_comm_t *comm, inc_wire_msg_t msg)
{
    send_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    inc_wire_hdr_init(&ctx->hdr, msg, comm->job_id);
    ctx->hdr.rank = (uint32_t)comm->rank;
    ctx->to = -1;
    return ctx;
}

void client_send_ctrl(incmoe_comm_t *comm, inc_wire_msg_t msg)
{
    send_ctx_t *ctx = client_ctx(comm, msg);
    if (ctx == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s message",
                    inc_wire_msg_name(msg));
        return;
    }
    client_send(comm, ctx, NULL, 0, NULL, &comm->ctrl_sent);
}

void client_send_error(incmoe_comm_t *comm, incmoe_status_t status, const char *text)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_ERROR);
    /* A reason may quote the switch's own (up to the limit) behind a prefix: cut it to what
       the wire carries, or the switch would take the ERROR as malformed. */
    char *msg = ctx ? strndup(text, INCMOE_WIRE_MAX_TEXT - 1) : NULL;
    if (msg == NULL) {
        free(ctx);
        return;
    }
    ctx->hdr.status = (int16_t)status;
    ctx->hdr.length = strlen(msg) + 1;
    ctx->payload_owned = msg;
    client_send(comm, ctx, msg, ctx->hdr.length, NULL, &comm->ctrl_sent);
}

void client_send_post(incmoe_comm_t *comm, const coll_op_t *op, client_completion_t *comp)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_POST);
    if (ctx == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to post a collective");
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.total = op->stream == INCMOE_STREAM_ALLREDUCE ? op->bytes[0] : op->bytes[comm->rank];
    ctx->hdr.sig = op->sig;
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    client_send(comm, ctx, NULL, 0, NULL, comp);
}
