/*
 * ll_peer.c - the low-latency form of dispatch and combine between the ranks,
 * for the ring and a2a (base/wire.h, PEER_LL).  At start a rank owes every
 * other rank one PEER_LL of the collective, rows for it or not (a dispatch:
 * its rows whose set holds that rank; a combine: its partials of that owner's
 * rows); each takes max(1, ceil(length / chunk_size)) of its credits toward
 * that rank on the stream, which the receiver returns with PEER_CREDIT once
 * its collective decided (every other rank's message came).
 *
 * A rank sends a collective's PEER_LLs only while its credits toward every
 * other rank on the stream are back, but those this collective took: every
 * rank decided every earlier collective of the stream, so no message of this
 * one reaches a rank still taking an earlier one's.  Without this gate a rank
 * that finished a step early sent the next step's messages into the link of a
 * rank still receiving the current step's; that rank finished later, every
 * rank waited for its next messages, and the skew fed itself (BENCHMARKS.md,
 * issue 28: a2a's dispatch || combine at N=8, 16 tokens of 4 KiB, took 72 ms
 * a step against the bulk form's 63, whose plans are such a gate; a gate per
 * peer alone left 65).  A decode step (dispatch, wait, combine, wait) pays
 * nothing for it: a rank sends a collective's credits before its next
 * collective's message, on the same endpoint, so they are in before that
 * collective completes here.
 *
 * dc_peer.c sends them in the stream's epoch order per peer, the bulk
 * combine's pieces included, so the credits cannot deadlock: the receiver
 * takes a started collective's message at once, a message of one it has not
 * started is kept (within the credits) until it has, and a collective's
 * messages wait only for the credits of earlier collectives of their stream:
 * once every rank decided those, every rank sends all of this one's (by
 * induction on the epoch).  What a message does on arrival is ll_shared.c's,
 * the same for the in-network path.
 */
#include "ll_peer.h"

#include <stdlib.h>
#include <string.h>

#include "dc_peer_land.h"
#include "dc_peer_rec.h"
#include "ll_shared.h"
#include "send.h"

int client_llp_send(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec, int peer)
{
    coll_op_t *op = rec->op;
    if (rec->sent[peer])
        return 1;
    const uint64_t len = client_ll_length(comm, op, WIRE_MSG_PEER_LL, peer);
    const uint32_t need = client_ll_credits(comm, len);
    uint32_t *credits = client_dcp_credits(dcp, op->stream);
    for (int r = 0; r < comm->nranks; r++)
        if (credits[r] < dcp->window && !rec->sent[r])
            return 0; /* r has not decided an earlier collective of the stream */
    if (credits[peer] < need)
        return 0;
    uint64_t length, total;
    char *payload = client_ll_payload(comm, op, WIRE_MSG_PEER_LL, peer, &length, &total);
    if (payload == NULL)
        return 0;
    credits[peer] -= need;
    rec->sent[peer] = 1;
    struct inc_wire_hdr f = {.root = (uint32_t)(client_dcp_is_dispatch(op) ? comm->rank : peer),
                             .length = length,
                             .total = total};
    client_dcp_send_piece(comm, op, WIRE_MSG_PEER_LL, peer, &f, payload, NULL, payload);
    return 1;
}

/* The message is in this rank's memory: its collective takes it; once that decided, every
   sender's credits go back. */
static void take(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec, int from,
                 const struct inc_wire_hdr *h, char *buf, size_t length)
{
    coll_op_t *op = rec->op;
    rec->cursor[from] = client_ll_credits(comm, length);
    if (client_ll_take(comm, op, from, h, buf, length) != INCMOE_OK)
        return;
    rec->decided = op->ll->decided;
    for (int r = 0; rec->decided && r < comm->nranks; r++)
        if (rec->cursor[r] > 0)
            client_dcp_credit_back(comm, op, r, (uint32_t)rec->cursor[r]);
    client_dcp_rec_check_done(comm, dcp, rec); /* may free rec */
}

/* A rendezvous PEER_LL is in rr->buf. */
static void landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_recv_t *rr, size_t length)
{
    char *buf = rr->buf;
    rr->buf = NULL; /* the collective's now */
    take(comm, dcp, rr->rec, rr->from, &rr->hdr, buf, length);
}

ucs_status_t client_llp_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                   client_dcp_rec_t *rec, int from, const struct inc_wire_hdr *h,
                                   void *data, size_t length, int rndv)
{
    char *buf = malloc(length > 0 ? length : 1);
    client_dcp_recv_t *rr =
        buf != NULL ? client_dcp_recv_ctx(comm, dcp, rec, from, h, landed) : NULL;
    if (rr == NULL) {
        free(buf);
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_LL");
        return UCS_ERR_NO_MEMORY;
    }
    rr->buf = buf;
    if (!client_dcp_land(comm, data, length, rndv, buf, NULL, rr))
        return UCS_INPROGRESS;
    take(comm, dcp, rec, from, h, buf, length);
    return atomic_load(&comm->error) != 0 ? UCS_ERR_INVALID_PARAM : UCS_OK;
}
