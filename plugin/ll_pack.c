/*
 * ll_pack.c - the messages a rank sends in the low-latency form (base/wire.h,
 * "The low-latency form of dispatch and combine"): its description (struct
 * inc_wire_ll) and the payloads of PEER_LL and LL, laid out by
 * base/ll_wire.h, so a receiver's parser accepts exactly what is packed here.
 *
 *   dispatch  PEER_LL to d: the source rows of its rows for d, then those rows
 *             (by expert each followed by its expert ids, padded to 8);
 *             LL: every set, then its network rows.
 *   combine   PEER_LL to owner o: its partials of o's rows (the slots of o's
 *             region, by expert after the fold); LL: its dispatch's sets, the
 *             partials it gives each owner (recvd), then those partials.
 */
#include <stdlib.h>
#include <string.h>

#include "ll_place.h"
#include "ll_shared.h"
#include "notify.h"

/* Bytes of a dispatched row on the wire: the caller's row, by expert its ids after it,
   padded to 8. */
static uint64_t wire_row_bytes(const client_dc_t *dc)
{
    if (!dc->by_expert)
        return dc->row_bytes;
    return (dc->row_bytes + 4 * (uint64_t)dc->topk + 7) & ~(uint64_t)7;
}

void client_ll_describe(const incmoe_comm_t *comm, const coll_op_t *op, struct inc_wire_ll *d)
{
    const client_dc_t *dc = op->dc;
    memset(d, 0, sizeof(*d));
    d->nranks = (uint32_t)comm->nranks;
    d->max_tokens = dc->max_tokens;
    if (op->refused != NULL) {
        d->status = op->refused_status;
        d->refused = (uint16_t)strlen(op->refused);
        return;
    }
    d->rows = dc->nrows;
    d->layout = (uint8_t)dc->by_expert;
    d->topk = (uint16_t)(dc->by_expert ? dc->topk : 0);
    d->layout_sig = dc->layout_sig;
    if (op->stream == INCMOE_STREAM_DISPATCH) {
        d->row_bytes = wire_row_bytes(dc);
        return;
    }
    d->row_bytes = op->row_bytes;
    d->dispatch_epoch = dc->epoch;
    d->row_count = op->row_bytes / incmoe_dtype_size(op->dtype);
    d->dtype = (uint8_t)op->dtype;
    d->redop = (uint8_t)op->redop;
}

/* Rows (or partials) after the arrays of op's message msg to peer; none when refused. */
static uint64_t rows_of(const incmoe_comm_t *comm, const coll_op_t *op, unsigned msg, int peer)
{
    const client_dc_t *dc = op->dc;
    uint64_t n = 0;
    if (op->refused != NULL)
        return 0;
    if (msg == WIRE_MSG_PEER_LL)
        return op->stream == INCMOE_STREAM_DISPATCH ? dc->sent[peer] : dc->recvd[peer];
    if (op->stream == INCMOE_STREAM_COMBINE) {
        for (int o = 0; o < comm->nranks; o++)
            n += o != comm->rank ? dc->recvd[o] : 0;
        return n;
    }
    for (size_t i = 0; i < dc->nrows; i++)
        n += (uint64_t)client_dc_goes_out(dc, i, comm->rank);
    return n;
}

uint64_t client_ll_length(const incmoe_comm_t *comm, const coll_op_t *op, unsigned msg, int peer)
{
    struct inc_wire_ll d;
    inc_wire_ll_layout_t at;
    client_ll_describe(comm, op, &d);
    if (inc_wire_ll_layout(msg, op->stream, comm->nranks, &d, rows_of(comm, op, msg, peer), &at) !=
        0)
        return UINT64_MAX;
    return at.length;
}

uint64_t client_ll_peer_largest(const incmoe_comm_t *comm, const coll_op_t *op)
{
    uint64_t most = 0;
    for (int r = 0; r < comm->nranks; r++) {
        uint64_t len = r != comm->rank ? client_ll_length(comm, op, WIRE_MSG_PEER_LL, r) : 0;
        most = len > most ? len : most;
    }
    return most;
}

uint64_t client_ll_up_length(const incmoe_comm_t *comm, const coll_op_t *op)
{
    return client_ll_length(comm, op, WIRE_MSG_LL, -1);
}

uint32_t client_ll_credits(const incmoe_comm_t *comm, uint64_t length)
{
    uint64_t c = (length + comm->chunk_size - 1) / comm->chunk_size;
    return c == 0 ? 1 : c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

/* A dispatch's rows for peer (PEER_LL; peer -1: its network rows, LL) at rows, their source
   rows at src (NULL: none). */
static void fill_rows(const incmoe_comm_t *comm, const coll_op_t *op, int peer, char *rows,
                      char *src)
{
    const client_dc_t *dc = op->dc;
    const uint64_t wrb = wire_row_bytes(dc);
    uint32_t k = 0;
    for (size_t i = 0; i < dc->nrows; i++) {
        if (peer >= 0 ? !client_dc_in_set(dc, i, peer) : !client_dc_goes_out(dc, i, comm->rank))
            continue;
        char *row = rows + (size_t)k * wrb;
        memcpy(row, op_send_at(op, i * dc->row_bytes), dc->row_bytes);
        if (dc->by_expert)
            memcpy(row + dc->row_bytes, &dc->experts[i * (size_t)dc->topk], 4 * (size_t)dc->topk);
        if (src != NULL) {
            uint32_t r = (uint32_t)i;
            memcpy(src + 4 * (size_t)k, &r, 4);
        }
        k++;
    }
}

/* A combine's partials for owner o (PEER_LL; o -1: for every other owner, ascending, LL). */
static void fill_partials(const incmoe_comm_t *comm, const coll_op_t *op, int o, char *rows)
{
    const client_dc_t *dc = op->dc;
    for (int s = 0; s < comm->nranks; s++) {
        if (s == comm->rank || (o >= 0 && s != o) || dc->recvd[s] == 0)
            continue;
        const size_t bytes = (size_t)dc->recvd[s] * op->row_bytes;
        memcpy(rows, client_ll_partial_at(op, dc->base[s]), bytes);
        rows += bytes;
    }
}

char *client_ll_payload(incmoe_comm_t *comm, const coll_op_t *op, unsigned msg, int peer,
                        uint64_t *length_p, uint64_t *total_p)
{
    const client_dc_t *dc = op->dc;
    struct inc_wire_ll d;
    inc_wire_ll_layout_t at;
    client_ll_describe(comm, op, &d);
    const uint64_t n = rows_of(comm, op, msg, peer);
    char *p = NULL;
    if (inc_wire_ll_layout(msg, op->stream, comm->nranks, &d, n, &at) == 0)
        p = calloc(1, (size_t)at.length);
    if (p == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "%s epoch %llu: no memory for its message",
                    inc_wire_stream_name(op->stream), (unsigned long long)op->epoch);
        return NULL;
    }
    memcpy(p, &d, sizeof(d));
    if (op->refused != NULL)
        memcpy(p + at.reason, op->refused, d.refused);
    else if (at.sets != 0)
        memcpy(p + at.sets, dc->sets, dc->nrows * dc->words * sizeof(uint64_t));
    if (op->refused == NULL && at.recvd != 0)
        for (int r = 0; r < comm->nranks; r++)
            memcpy(p + at.recvd + 4 * (size_t)r, r != comm->rank ? &dc->recvd[r] : &(uint32_t){0},
                   4);
    if (op->refused == NULL && op->stream == INCMOE_STREAM_DISPATCH)
        fill_rows(comm, op, msg == WIRE_MSG_PEER_LL ? peer : -1, p + at.rows,
                  at.src_row != 0 ? p + at.src_row : NULL);
    else if (op->refused == NULL)
        fill_partials(comm, op, msg == WIRE_MSG_PEER_LL ? peer : -1, p + at.rows);
    *length_p = at.length;
    *total_p = msg == WIRE_MSG_LL ? d.rows : n;
    return p;
}
