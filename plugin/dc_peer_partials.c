/*
 * dc_peer_partials.c - a combine's partials between the ranks.  A contributor
 * sends each owner its partials of the owner's rows, one PEER_PARTIALS per
 * owner chunk, each taking a credit toward that owner; the owner stages a
 * chunk until every contributor's piece landed, reduces each row over its
 * contributors in ascending rank order (inc_reduce_ordered, as the switch
 * does), applies its own partial last (dc_shared.c) and returns the credits
 * (dc_peer.c has the whole protocol and why the credits cannot deadlock).
 */
#include "dc_peer_partials.h"

#include <stdlib.h>

#include "dc_peer_land.h"
#include "dc_peer_rec.h"
#include "dc_shared.h"
#include "mesh.h"
#include "send.h"

#include "base/reduce.h"

/* The owner chunk of a received row of owner s at position pos of its block. */
static size_t owner_chunk_of(const client_dcp_rec_t *rec, int s, uint64_t pos)
{
    const client_dc_t *dc = rec->op->dc;
    return dc->source[2 * (dc->base[s] + pos) + 1] / rec->rpc;
}

int client_dcp_send_partials(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                             int s)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const uint64_t total = dc->recvd[s], pos = rec->cursor[s];
    if (!rec->ok || pos >= total || dcp->credits[s] == 0)
        return 0; /* a failed verdict moves no partials */
    size_t c = owner_chunk_of(rec, s, pos);
    uint64_t end = pos + 1;
    while (end < total && owner_chunk_of(rec, s, end) == c)
        end++;
    struct inc_wire_hdr f = {.root = (uint32_t)s,
                             .offset = pos,
                             .total = total,
                             .length = (end - pos) * op->row_bytes,
                             .chunk = (uint32_t)c};
    rec->cursor[s] = end;
    dcp->credits[s]--;
    client_dcp_send_piece(comm, op, WIRE_MSG_PEER_PARTIALS, s, &f,
                          op_send_at(op, (size_t)(dc->base[s] + pos) * op->row_bytes),
                          op->send_memh, NULL);
    return 1;
}

int client_dcp_partials_left(const client_dcp_rec_t *rec, int s)
{
    return rec->decided && rec->ok && rec->cursor[s] < rec->op->dc->recvd[s];
}

/* Every piece of owner chunk c landed: reduce each row over its other contributors in
   ascending rank order, then this rank's own partial (dc_shared.c); credits back. */
static void reduce_chunk(incmoe_comm_t *comm, client_dcp_rec_t *rec, size_t c)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    const uint32_t *cnt = &rec->cnt[c * (size_t)n];
    size_t slot[INCMOE_MAX_RANKS], at = 0;
    for (int d = 0; d < n; d++) {
        slot[d] = at; /* where d's piece starts in the stage, then its next partial */
        at += cnt[d];
    }
    const void *srcs[INCMOE_MAX_RANKS];
    size_t end = (c + 1) * rec->rpc < dc->nrows ? (c + 1) * rec->rpc : dc->nrows;
    uint64_t rows = 0;
    char *stage = rec->chunks[c].stage;
    for (size_t i = c * rec->rpc; i < end; i++) {
        int k = 0;
        for (int d = 0; d < n; d++)
            if (d != me && client_dc_in_set(dc, i, d))
                srcs[k++] = stage + slot[d]++ * op->row_bytes;
        if (k == 0)
            continue; /* written at the plan (dc_shared.c) */
        char *dst = op_recv_at(op, i * op->row_bytes);
        inc_reduce_ordered(dst, srcs, k, op->row_bytes / incmoe_dtype_size(op->dtype), op->dtype,
                           op->redop);
        client_dc_combine_row(comm, op, i, dst);
        rows++;
    }
    free(stage);
    rec->chunks[c].stage = NULL;
    op->recv_done += rows;
    for (int d = 0; d < n; d++)
        if (cnt[d] > 0)
            client_dcp_credit_back(comm, op, d, 1);
}

static void piece_landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                         size_t c)
{
    const int n = comm->nranks;
    uint32_t pieces = 0;
    for (int d = 0; d < n; d++)
        pieces += rec->cnt[c * (size_t)n + (size_t)d] > 0;
    if (++rec->chunks[c].landed == pieces)
        reduce_chunk(comm, rec, c);
    client_dcp_rec_check_done(comm, dcp, rec);
}

/* A rendezvous PEER_PARTIALS is in the stage. */
static void partials_landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_recv_t *rr,
                            size_t length)
{
    (void)length;
    piece_landed(comm, dcp, rr->rec, rr->chunk);
}

ucs_status_t client_dcp_on_partials(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                    client_dcp_rec_t *rec, int from, const struct inc_wire_hdr *h,
                                    void *data, size_t length, int rndv)
{
    coll_op_t *op = rec->op;
    const int n = comm->nranks;
    size_t c = h->chunk;
    const uint32_t *cnt = c < rec->nchunks ? &rec->cnt[c * (size_t)n] : NULL;
    if (cnt == NULL || cnt[from] == 0 || h->offset != rec->next_in[from] ||
        h->total != op->dc->sent[from] || length != (size_t)cnt[from] * op->row_bytes ||
        h->dtype != op->dtype || h->redop != op->redop)
        return client_dcp_refuse(comm, h, from, "partials this rank's plan does not expect there");
    client_dcp_chunk_t *ch = &rec->chunks[c];
    size_t at = 0, all = 0;
    for (int d = 0; d < n; d++) {
        at += d < from ? cnt[d] : 0;
        all += cnt[d];
    }
    if (ch->stage == NULL && (ch->stage = malloc(all * op->row_bytes)) == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY,
                        "combine epoch %llu: no memory to stage a chunk",
                        (unsigned long long)op->epoch);
        return UCS_ERR_NO_MEMORY;
    }
    rec->next_in[from] += cnt[from];
    client_dcp_recv_t *rr = client_dcp_recv_ctx(comm, dcp, rec, from, h, partials_landed);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    rr->chunk = c;
    if (!client_dcp_land(comm, data, length, rndv, ch->stage + at * op->row_bytes, NULL, rr))
        return UCS_INPROGRESS;
    piece_landed(comm, dcp, rec, c);
    return UCS_OK;
}
