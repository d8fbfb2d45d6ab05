/*
 * dc_peer_rows.c - a dispatch's rows between the ranks: after an OK verdict a
 * source sends each receiver the rows whose set holds it, in row order,
 * max(1, chunk_size / row bytes) per PEER_ROWS (packed when they are not side
 * by side, at most `credits` messages of a collective in flight); the
 * receiver lands them at their final place (dc_peer.c has the whole protocol).
 */
#include "dc_peer_rows.h"

#include <stdlib.h>
#include <string.h>

#include "dc_peer_land.h"
#include "dc_peer_rec.h"
#include "dc_shared.h"

/* The next chunk of a dispatch's rows for peer: straight from the send range when they lie
   side by side, else packed.  0 when none is left. */
static int send_rows_chunk(incmoe_comm_t *comm, client_dcp_rec_t *rec, int peer)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const uint64_t total = dc->sent[peer];
    if (rec->sent[peer] >= total)
        return 0;
    const uint64_t n = total - rec->sent[peer] < rec->rpc ? total - rec->sent[peer] : rec->rpc;
    size_t first = SIZE_MAX, last = 0;
    uint64_t k = 0;
    for (size_t i = (size_t)rec->cursor[peer]; k < n; i++) {
        if (client_dc_in_set(dc, i, peer)) {
            first = k++ == 0 ? i : first;
            last = i;
        }
    }
    struct inc_wire_hdr f = {.root = (uint32_t)peer,
                             .offset = rec->sent[peer],
                             .total = total,
                             .length = n * op->row_bytes,
                             .chunk = (uint32_t)(rec->sent[peer] / rec->rpc)};
    rec->cursor[peer] = last + 1;
    rec->sent[peer] += n;
    if (last - first + 1 == n) {
        client_dcp_send_piece(comm, op, WIRE_MSG_PEER_ROWS, peer, &f,
                              op_send_at(op, first * op->row_bytes), op->send_memh, NULL);
        return 1;
    }
    char *pack = malloc(f.length);
    if (pack == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY,
                        "dispatch epoch %llu: no memory to pack %llu rows",
                        (unsigned long long)op->epoch, (unsigned long long)n);
        return 0;
    }
    k = 0;
    for (size_t i = first; i <= last; i++)
        if (client_dc_in_set(dc, i, peer))
            memcpy(pack + k++ * op->row_bytes, op_send_at(op, i * op->row_bytes), op->row_bytes);
    client_dcp_send_piece(comm, op, WIRE_MSG_PEER_ROWS, peer, &f, pack, NULL, pack);
    return 1;
}

void client_dcp_pump_dispatch(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec)
{
    const int n = comm->nranks;
    int more = 1;
    while (more && rec->op->sent.count < dcp->window && atomic_load(&comm->error) == 0) {
        more = 0;
        for (int k = 1; k < n && rec->op->sent.count < dcp->window; k++)
            more |= send_rows_chunk(comm, rec, (comm->rank + k) % n);
    }
}

/* A rendezvous PEER_ROWS is in place. */
static void rows_landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_recv_t *rr,
                        size_t length)
{
    (void)length;
    rr->rec->op->recv_done += rr->rows;
    client_dcp_rec_check_done(comm, dcp, rr->rec);
}

ucs_status_t client_dcp_on_rows(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                                int from, const struct inc_wire_hdr *h, void *data, size_t length,
                                int rndv)
{
    coll_op_t *op = rec->op;
    uint64_t n = length / op->row_bytes;
    char *dst = NULL;
    if (length % op->row_bytes == 0 && h->offset == rec->next_in[from] &&
        h->total == op->dc->recvd[from] && n <= rec->rpc)
        dst = client_dc_recv_rows(op, from, h->offset, n);
    if (dst == NULL)
        return client_dcp_refuse(comm, h, from, "rows this rank's plan does not expect there");
    rec->next_in[from] += n;
    client_dcp_recv_t *rr = client_dcp_recv_ctx(comm, dcp, rec, from, h, rows_landed);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    rr->rows = n;
    if (!client_dcp_land(comm, data, length, rndv, dst, op->recv_memh, rr))
        return UCS_INPROGRESS;
    op->recv_done += n;
    client_dcp_rec_check_done(comm, dcp, rec);
    return UCS_OK;
}
