/*
 * dc_peer_rec.c - a dispatch's or combine's record between the ranks: found,
 * finished (the collective progresses), freed; a piece of it sent; a failure
 * that ends the job.  The bottom of the dc_peer files (dc_peer_rec.h).
 */
#include "dc_peer_rec.h"

#include <stdio.h>
#include <stdlib.h>

#include "coll.h"
#include "dc_shared.h"
#include "mesh.h"
#include "notify.h"
#include "send.h"

#include "base/vformat.h"

void client_dcp_init_credits(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    if (dcp->window != 0)
        return;
    dcp->window = comm->credits;
    for (int r = 0; r < comm->nranks; r++)
        dcp->credits[r] = dcp->dispatch_credits[r] = dcp->window;
}

uint32_t *client_dcp_credits(client_dc_peer_t *dcp, unsigned stream)
{
    return stream == INCMOE_STREAM_DISPATCH ? dcp->dispatch_credits : dcp->credits;
}

void client_dcp_credit_back(incmoe_comm_t *comm, coll_op_t *op, int peer, uint32_t n)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_PEER_CREDIT);
    if (ctx == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_CREDIT");
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.length = n;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, NULL, 0, NULL, &op->sent);
}

void client_dcp_rec_free(client_dcp_rec_t *rec, int nranks)
{
    for (int r = 0; rec->plan != NULL && r < nranks; r++)
        free(rec->plan[r]);
    for (size_t c = 0; rec->chunks != NULL && c < rec->nchunks; c++)
        free(rec->chunks[c].stage);
    free(rec->plan);
    free(rec->cursor);
    free(rec->sent);
    free(rec->next_in);
    free(rec->cnt);
    free(rec->chunks);
    free(rec);
}

client_dcp_rec_t *client_dcp_rec_find(client_dc_peer_t *dcp, unsigned stream, uint64_t epoch)
{
    for (client_dcp_rec_t *rec = dcp->recs; rec != NULL; rec = rec->next)
        if (rec->op->stream == stream && rec->op->epoch == epoch)
            return rec;
    return NULL;
}

void client_dcp_fail(incmoe_comm_t *comm, incmoe_status_t st, const char *fmt, ...)
{
    char text[256];
    INC_VFORMAT(text, sizeof(text), fmt);
    client_fail_job(comm, st, text);
}

ucs_status_t client_dcp_refuse(incmoe_comm_t *comm, const struct inc_wire_hdr *h, int from,
                               const char *what)
{
    client_dcp_fail(comm, INCMOE_ERR_PROTOCOL, "%s from rank %d for %s epoch %llu: %s",
                    inc_wire_msg_name(h->msg), from, inc_wire_stream_name(h->stream),
                    (unsigned long long)h->epoch, what);
    return UCS_ERR_INVALID_PARAM;
}

void client_dcp_send_piece(incmoe_comm_t *comm, coll_op_t *op, inc_wire_msg_t msg, int peer,
                           const struct inc_wire_hdr *fields, const void *payload, ucp_mem_h memh,
                           void *owned)
{
    send_ctx_t *ctx = client_ctx(comm, msg);
    if (ctx == NULL) {
        free(owned);
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s", inc_wire_msg_name(msg));
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.root = fields->root;
    ctx->hdr.offset = fields->offset;
    ctx->hdr.length = fields->length;
    ctx->hdr.total = fields->total;
    ctx->hdr.chunk = fields->chunk;
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    ctx->payload_owned = owned;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, payload, fields->length, memh, &op->sent);
}

void client_dcp_rec_check_done(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    if (!rec->decided)
        return;
    for (int r = 0; rec->ll && r < comm->nranks; r++)
        if (r != comm->rank && !rec->sent[r])
            return; /* its PEER_LL to r waits for credits */
    if (rec->ok && !rec->ll) {
        const int n = comm->nranks;
        for (int r = 0; r < n; r++)
            if (r != comm->rank && (client_dcp_is_dispatch(op) ? rec->sent[r] < op->dc->sent[r]
                                                               : rec->cursor[r] < op->dc->recvd[r]))
                return;
        if (op->recv_done != op->recv_expected)
            return;
    }
    for (client_dcp_rec_t **pp = &dcp->recs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == rec) {
            *pp = rec->next;
            break;
        }
    }
    client_dcp_rec_free(rec, comm->nranks);
    op->holds--;
    client_op_progressed(comm, op); /* may free op */
}
