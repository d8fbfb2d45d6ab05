/*
 * dc_peer.c - dispatch and combine point to point over the mesh (mesh.c), for
 * the ring and a2a algorithms (base/wire.h, "Dispatch and combine between the
 * ranks").  What every algorithm shares (the kept dispatch, the plan applied,
 * the local rows, the owner's own partial last) is dc_shared.c's.
 *
 *   Plan     at start every rank sends every other a PEER_PLAN, rows or not,
 *            and waits for the N - 1 others' (its collective cannot complete
 *            before every rank posted it); from the N plans each computes the
 *            same verdict.  A dispatch's plan lists the source rows the peer
 *            gets, so the rows themselves travel bare.
 *   Dispatch after an OK verdict a source sends each receiver the rows whose
 *            set holds it, in row order, max(1, chunk_size / row bytes) per
 *            PEER_ROWS (packed into one buffer when they are not contiguous,
 *            at most `credits` messages of a collective in flight); the
 *            receiver lands them at their final place (a rendezvous straight
 *            there).
 *   Combine  a contributor sends each owner its partials of the owner's rows,
 *            one PEER_PARTIALS per owner chunk (max(1, chunk_size / row
 *            bytes) of the owner's rows; the partials are contiguous in the
 *            contributor's received order), each taking a credit toward that
 *            owner; the owner stages a chunk until every contributor's piece
 *            landed, reduces each row over its contributors in ascending rank
 *            order (inc_reduce_ordered, as the switch does), applies its own
 *            partial last (dc_shared.c), and returns the credits.  A contributor
 *            sends an owner its pieces in (epoch, chunk) order, so the owner's
 *            oldest incomplete chunk always has every contributor able to send
 *            its piece: the credits cannot deadlock, and an owner stages at
 *            most N - 1 times credits chunks.
 *
 * Messages for a collective this rank has not started, or rows before its
 * verdict, wait as kept messages (bounded: plans by the stream's window, rows
 * by the verdict every sender waits for too, partials by the credits).
 *
 * This file holds the entries the algorithms call (dc_peer.h); the plan, the
 * rows, the partials, a payload's landing and the records are each a file
 * below it (dc_peer_rec.h lists them).
 */
#include "dc_peer.h"

#include <stdlib.h>

#include "coll.h"
#include "dc_peer_partials.h"
#include "dc_peer_plan.h"
#include "dc_peer_rec.h"
#include "dc_peer_rows.h"
#include "ll_peer.h"
#include "ll_shared.h"
#include "mesh.h"

/* Keep a message until its collective started or decided. */
static ucs_status_t keep_early(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                               const struct inc_wire_hdr *h, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    client_kept_t *k = client_kept_new(h, data, length, param);
    if (k == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for an early %s",
                        inc_wire_msg_name(h->msg));
        return UCS_ERR_NO_MEMORY;
    }
    k->hdr.rank = (uint32_t)from; /* the rank the mesh bound its endpoint to */
    client_kept_t **tail = &dcp->early;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = k;
    return k->desc != NULL ? UCS_INPROGRESS : UCS_OK;
}

ucs_status_t client_dc_peer_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                                       const struct inc_wire_hdr *h, void *data, size_t length,
                                       const ucp_am_recv_param_t *param)
{
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    client_dcp_init_credits(comm, dcp);
    if (h->msg == WIRE_MSG_PEER_CREDIT) {
        uint32_t *credits = client_dcp_credits(dcp, h->stream);
        if (h->length > dcp->window - credits[from])
            return client_dcp_refuse(comm, h, from, "more credits than this rank used");
        credits[from] += (uint32_t)h->length;
        return UCS_OK;
    }
    client_dcp_rec_t *rec = client_dcp_rec_find(dcp, h->stream, h->epoch);
    if (rec == NULL) {
        const uint64_t done = client_stream_completed(&comm->streams[h->stream]);
        if (h->epoch <= done || client_find_op(comm, h->stream, h->epoch) != NULL)
            return client_dcp_refuse(comm, h, from, "the collective is over here");
        if (h->epoch > done + INCMOE_WIRE_OPEN_EPOCHS)
            return client_dcp_refuse(comm, h, from, "an epoch past the window");
        return keep_early(comm, dcp, from, h, data, length, param);
    }
    if (rec->ll != (h->msg == WIRE_MSG_PEER_LL)) {
        client_dcp_fail(comm, INCMOE_ERR_MISMATCH,
                        "%s epoch %llu: rank %d sent the %s form, rank %d posted the %s form",
                        inc_wire_stream_name(h->stream), (unsigned long long)h->epoch, from,
                        rec->ll ? "bulk" : "low-latency", comm->rank,
                        rec->ll ? "low-latency" : "bulk");
        return UCS_ERR_INVALID_PARAM;
    }
    if (rec->ll)
        return client_llp_on_message(comm, dcp, rec, from, h, data, length, rndv);
    if (h->msg == WIRE_MSG_PEER_PLAN)
        return client_dcp_on_plan(comm, dcp, rec, from, h, data, length, rndv);
    if (!rec->decided)
        return keep_early(comm, dcp, from, h, data, length, param);
    if (!rec->ok)
        return client_dcp_refuse(comm, h, from, "rows after a failed verdict");
    if (h->msg == WIRE_MSG_PEER_ROWS)
        return client_dcp_on_rows(comm, dcp, rec, from, h, data, length, rndv);
    return client_dcp_on_partials(comm, dcp, rec, from, h, data, length, rndv);
}

/* The kept messages of (stream, epoch) once more, in their order. */
static void replay_early(incmoe_comm_t *comm, client_dc_peer_t *dcp, unsigned stream,
                         uint64_t epoch)
{
    client_kept_t *mine = NULL, **mine_tail = &mine, **pp = &dcp->early;
    while (*pp != NULL) {
        client_kept_t *k = *pp;
        if (k->hdr.stream == stream && k->hdr.epoch == epoch) {
            *pp = k->next;
            k->next = NULL;
            *mine_tail = k;
            mine_tail = &k->next;
        } else {
            pp = &k->next;
        }
    }
    while (mine != NULL) {
        client_kept_t *k = mine;
        mine = k->next;
        /* keep_early wrote the sender's bound rank into the header. */
        ucp_am_recv_param_t param = {.recv_attr = k->desc != NULL ? UCP_AM_RECV_ATTR_FLAG_RNDV : 0};
        ucs_status_t st =
            atomic_load(&comm->error) != 0
                ? UCS_ERR_CANCELED
                : client_dc_peer_on_message(comm, dcp, (int)k->hdr.rank, &k->hdr,
                                            k->desc ? k->desc : k->copy, k->length, &param);
        if (st == UCS_INPROGRESS)
            k->desc = NULL; /* a receive or the early list holds it now */
        client_kept_free(comm, k);
    }
}

client_dc_peer_t *client_dc_peer_open(incmoe_comm_t *comm)
{
    client_dc_peer_t *dcp = calloc(1, sizeof(*dcp));
    if (dcp == NULL)
        return NULL;
    dcp->credits = calloc((size_t)comm->nranks, sizeof(uint32_t));
    dcp->dispatch_credits = calloc((size_t)comm->nranks, sizeof(uint32_t));
    if (dcp->credits == NULL || dcp->dispatch_credits == NULL) {
        free(dcp->credits);
        free(dcp->dispatch_credits);
        free(dcp);
        return NULL;
    }
    dcp->replay = replay_early;
    return dcp;
}

void client_dc_peer_start(incmoe_comm_t *comm, client_dc_peer_t *dcp, coll_op_t *op)
{
    const int n = comm->nranks;
    client_dcp_init_credits(comm, dcp);
    op->all_issued = 1; /* the record holds op until its sends are issued */
    if (client_mesh_open_all(comm) != INCMOE_OK)
        return;
    client_dcp_rec_t *rec = calloc(1, sizeof(*rec));
    if (rec != NULL) {
        rec->plan = calloc((size_t)n, sizeof(char *));
        rec->cursor = calloc((size_t)n, sizeof(uint64_t));
        rec->sent = calloc((size_t)n, sizeof(uint64_t));
        rec->next_in = calloc((size_t)n, sizeof(uint64_t));
    }
    if (rec == NULL || rec->plan == NULL || rec->cursor == NULL || rec->sent == NULL ||
        rec->next_in == NULL) {
        if (rec != NULL)
            client_dcp_rec_free(rec, n);
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s",
                        inc_wire_stream_name(op->stream));
        return;
    }
    rec->op = op;
    rec->ll = op->dc->ll;
    if (rec->ll && !client_ll_start(comm, op)) {
        client_dcp_rec_free(rec, n);
        return;
    }
    /* A refusal has no rows, and rows of 0 bytes: it moves none. */
    const size_t rb = op->row_bytes > 0 ? op->row_bytes : 1;
    rec->rpc = comm->chunk_size / rb > 0 ? comm->chunk_size / rb : 1;
    op->holds++;
    client_dcp_rec_t **tail = &dcp->recs;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = rec;
    for (int k = 1; k < n && !rec->ll; k++)
        client_dcp_send_plan(comm, op, (comm->rank + k) % n);
    replay_early(comm, dcp, op->stream, op->epoch);
    client_dc_peer_progress(comm, dcp);
}

void client_dc_peer_progress(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    const int n = comm->nranks;
    /* A rank takes a peer's credited messages of a stream (a combine's pieces, a low-latency
       message) in epoch order: a later collective sends it nothing while an earlier one still
       has some for it. */
    uint8_t blocked_by[2][INCMOE_MAX_RANKS] = {{0}};
    client_dcp_rec_t *rec = dcp->recs;
    while (rec != NULL && atomic_load(&comm->error) == 0) {
        client_dcp_rec_t *next = rec->next;
        uint8_t *blocked = blocked_by[rec->op->stream == INCMOE_STREAM_COMBINE];
        if (rec->ll) {
            for (int k = 1; k < n; k++) {
                int s = (comm->rank + k) % n;
                if (!blocked[s] && !client_llp_send(comm, dcp, rec, s))
                    blocked[s] = 1;
            }
        } else if (rec->decided && rec->ok && client_dcp_is_dispatch(rec->op)) {
            client_dcp_pump_dispatch(comm, dcp, rec);
        } else if (rec->op->stream == INCMOE_STREAM_COMBINE) {
            for (int k = 1; k < n; k++) {
                int s = (comm->rank + k) % n;
                if (blocked[s] || !rec->decided)
                    blocked[s] = 1; /* an undecided combine may still have pieces for s */
                else if (rec->ok)   /* a failed verdict: nothing moves */
                    while (client_dcp_send_partials(comm, dcp, rec, s))
                        ;
                blocked[s] |= client_dcp_partials_left(rec, s);
            }
        }
        client_dcp_rec_check_done(comm, dcp, rec); /* may free rec */
        rec = next;
    }
}

void client_dc_peer_close(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    if (dcp == NULL)
        return;
    while (dcp->recs != NULL) {
        client_dcp_rec_t *rec = dcp->recs;
        dcp->recs = rec->next;
        client_dcp_rec_free(rec, comm->nranks);
    }
    while (dcp->early != NULL) {
        client_kept_t *k = dcp->early;
        dcp->early = k->next;
        client_kept_free(comm, k);
    }
    for (client_dcp_recv_t *rr = dcp->landing; rr != NULL; rr = rr->next)
        rr->dcp = NULL; /* its callback, when the worker goes, only frees it */
    free(dcp->credits);
    free(dcp->dispatch_credits);
    free(dcp);
}
