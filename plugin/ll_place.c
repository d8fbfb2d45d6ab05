/*
 * ll_place.c - where the rows of the low-latency form go (incmoe.h, "The
 * low-latency form").  By source, region s holds source s's rows for this
 * rank from row s * max_tokens.  By expert, region j (this rank's j-th expert)
 * holds every row routed to it, by source rank then source row, from row
 * j * N * max_tokens; the record also keeps, for the k-th row received from s
 * (its by-source slot s * max_tokens + k), the region rows it went to, so the
 * combine folds their partials back into one per received row and then goes
 * on as by source.
 */
#include "ll_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reduce.h"

const char *client_ll_partial_at(const coll_op_t *op, uint64_t slot)
{
    if (op->dc->by_expert)
        return op->ll->fold + slot * op->row_bytes;
    return op_send_at(op, (size_t)slot * op->row_bytes);
}

/* One row for this rank from source s: its bytes (the caller's row first), its source row and,
   by expert, its expert ids. */
typedef struct {
    const char *bytes;
    uint32_t src_row;
    const char *ids; /* topk int32 (unaligned), or NULL */
} ll_row_t;

/* The k-th row for this rank from s: an own row (s == this rank) or one of s's message. */
static ll_row_t row_of(const incmoe_comm_t *comm, const coll_op_t *op, int s, uint64_t k,
                       const uint32_t *own_rows)
{
    const client_dc_t *dc = op->dc;
    ll_row_t r;
    if (s == comm->rank) {
        r.src_row = own_rows[k];
        r.bytes = op_send_at(op, (size_t)r.src_row * dc->row_bytes);
        r.ids =
            dc->by_expert ? (const char *)&dc->experts[(size_t)r.src_row * (size_t)dc->topk] : NULL;
        return r;
    }
    const inc_wire_ll_view_t *v = &op->ll->view[s];
    r.src_row = inc_wire_ll_src_row(v, k);
    r.bytes = v->rows + k * v->ll.row_bytes;
    r.ids = dc->by_expert ? r.bytes + dc->row_bytes : NULL;
    return r;
}

static uint64_t rows_from(const incmoe_comm_t *comm, const coll_op_t *op, int s)
{
    return s == comm->rank ? op->dc->sent[s] : op->ll->view[s].n;
}

/* The distinct local experts of a row's ids, ascending, into out; -1 if an id is not an
   expert. */
static int row_locals(const client_dc_t *dc, const char *ids, int32_t *out)
{
    int n = 0;
    for (int j = 0; j < dc->topk; j++) {
        int32_t e;
        memcpy(&e, ids + 4 * (size_t)j, 4);
        if (e < -1 || e >= dc->num_experts)
            return -1;
        int32_t l = e >= 0 ? dc->local[e] : -1;
        if (l < 0)
            continue;
        int at = n;
        while (at > 0 && out[at - 1] > l)
            at--;
        if (at > 0 && out[at - 1] == l)
            continue; /* an expert named twice takes the row once */
        memmove(&out[at + 1], &out[at], (size_t)(n - at) * sizeof(int32_t));
        out[at] = l;
        n++;
    }
    return n;
}

/* Row r (the k-th from s) into each region it goes to; the slot's region rows kept. */
static void put_row(coll_op_t *op, int s, const ll_row_t *r, const int32_t *locals, int nl,
                    uint32_t *cursor)
{
    client_dc_t *dc = op->dc;
    for (int m = 0; m < nl; m++) {
        size_t j = dc->by_expert ? (size_t)locals[m] : (size_t)s;
        size_t pos = j * dc->region_rows + dc->counts[j]++;
        char *dst = op_recv_at(op, pos * dc->row_bytes);
        if (dst != r->bytes)
            memmove(dst, r->bytes, dc->row_bytes);
        dc->source[2 * pos] = (uint32_t)s;
        dc->source[2 * pos + 1] = r->src_row;
        if (dc->by_expert)
            dc->slots[(*cursor)++] = (uint32_t)pos;
    }
}

/* The record's tables for the placement: the source table by slot, and by expert the region
   rows of each slot.  0 out of memory. */
static int alloc_tables(const incmoe_comm_t *comm, client_dc_t *dc, uint64_t region_rows)
{
    const size_t slots = (size_t)comm->nranks * dc->max_tokens;
    dc->source = malloc(2 * dc->nregions * dc->region_rows * sizeof(uint32_t) + 1);
    if (dc->source == NULL || !dc->by_expert)
        return dc->source != NULL;
    dc->slot_first = calloc(slots + 1, sizeof(uint32_t));
    dc->slots = malloc((size_t)region_rows * sizeof(uint32_t) + 1);
    return dc->slot_first != NULL && dc->slots != NULL;
}

/* This rank's own rows for itself, ascending (the k-th own row received). */
static uint32_t *own_rows(const incmoe_comm_t *comm, const client_dc_t *dc)
{
    uint32_t *rows = malloc((size_t)dc->sent[comm->rank] * sizeof(uint32_t) + 1);
    for (size_t i = 0, k = 0; rows != NULL && i < dc->nrows; i++)
        if (client_dc_in_set(dc, i, comm->rank))
            rows[k++] = (uint32_t)i;
    return rows;
}

/* The region rows every source's rows take (by expert, a row per local expert it names); -1
   and the source at fault in *bad. */
static int64_t count_region_rows(const incmoe_comm_t *comm, const coll_op_t *op,
                                 const uint32_t *own, int *bad)
{
    const client_dc_t *dc = op->dc;
    int32_t locals[INCMOE_MAX_TOPK];
    int64_t total = 0;
    for (int s = 0; s < comm->nranks; s++) {
        for (uint64_t k = 0; k < rows_from(comm, op, s); k++) {
            ll_row_t r = row_of(comm, op, s, k, own);
            int nl = dc->by_expert ? row_locals(dc, r.ids, locals) : 1;
            if (nl <= 0) {
                *bad = s;
                return -1;
            }
            total += nl;
        }
    }
    return total;
}

int client_ll_place(incmoe_comm_t *comm, coll_op_t *op, char *why, size_t why_len)
{
    client_dc_t *dc = op->dc;
    int32_t locals[INCMOE_MAX_TOPK];
    int bad = -1;
    uint32_t *own = own_rows(comm, dc), cursor = 0;
    int64_t total = own != NULL ? count_region_rows(comm, op, own, &bad) : 0;
    if (own == NULL || (total >= 0 && !alloc_tables(comm, dc, (uint64_t)total))) {
        free(own);
        snprintf(why, why_len, "no memory to place its rows");
        return comm->rank;
    }
    if (total < 0) {
        free(own);
        snprintf(why, why_len, "a row routed to none of this rank's experts, or to no expert");
        return bad;
    }
    for (int s = 0; s < comm->nranks; s++) {
        const uint64_t n = rows_from(comm, op, s);
        for (uint64_t k = 0; k < dc->max_tokens; k++) {
            if (dc->by_expert)
                dc->slot_first[dc->base[s] + k] = cursor;
            if (k >= n)
                continue;
            ll_row_t r = row_of(comm, op, s, k, own);
            int nl = dc->by_expert ? row_locals(dc, r.ids, locals) : 1;
            put_row(op, s, &r, locals, nl, &cursor);
        }
        dc->recvd[s] = (uint32_t)n;
    }
    if (dc->by_expert)
        dc->slot_first[dc->base[comm->nranks]] = cursor;
    dc->nrecv = (size_t)total;
    free(own);
    return -1;
}

void client_ll_count_would(const incmoe_comm_t *comm, coll_op_t *op)
{
    uint64_t rows = 0;
    for (int s = 0; s < comm->nranks; s++)
        rows += rows_from(comm, op, s);
    op->dc->nrecv = (size_t)rows;
}

int client_ll_fold(const incmoe_comm_t *comm, coll_op_t *op)
{
    const client_dc_t *dc = op->dc;
    if (!dc->by_expert)
        return 1;
    const size_t pb = op->row_bytes, count = pb / incmoe_dtype_size(op->dtype);
    op->ll->fold = malloc((size_t)comm->nranks * dc->max_tokens * pb + 1);
    if (op->ll->fold == NULL)
        return 0;
    for (int s = 0; s < comm->nranks; s++) {
        for (uint64_t k = 0; k < dc->recvd[s]; k++) {
            const uint64_t slot = dc->base[s] + k;
            char *dst = op->ll->fold + slot * pb;
            uint32_t first = dc->slot_first[slot], end = dc->slot_first[slot + 1];
            memcpy(dst, op_send_at(op, (size_t)dc->slots[first] * pb), pb);
            for (uint32_t m = first + 1; m < end; m++)
                inc_reduce_pair(dst, dst, op_send_at(op, (size_t)dc->slots[m] * pb), count,
                                op->dtype, op->redop);
        }
    }
    return 1;
}

void client_ll_own_last(const incmoe_comm_t *comm, coll_op_t *op, size_t i, const void *others)
{
    const client_dc_t *dc = op->dc;
    char *dst = op_recv_at(op, i * op->row_bytes);
    const char *own = client_dc_in_set(dc, i, comm->rank)
                          ? client_ll_partial_at(op, dc->base[comm->rank] + dc->own_at[i])
                          : NULL;
    if (others != NULL && own != NULL)
        inc_reduce_pair(dst, own, others, op->row_bytes / incmoe_dtype_size(op->dtype), op->dtype,
                        op->redop);
    else if (others != NULL || own != NULL) {
        const void *from = others != NULL ? others : own;
        if (dst != from)
            memmove(dst, from, op->row_bytes);
    } else {
        memset(dst, 0, op->row_bytes);
    }
}

/* Does the row's set hold a rank other than this one? */
static int has_others(const incmoe_comm_t *comm, const client_dc_t *dc, size_t row)
{
    for (int d = 0; d < comm->nranks; d++)
        if (d != comm->rank && client_dc_in_set(dc, row, d))
            return 1;
    return 0;
}

uint64_t client_ll_rows_with_others(const incmoe_comm_t *comm, const coll_op_t *op)
{
    uint64_t n = 0;
    for (size_t i = 0; i < op->dc->nrows; i++)
        n += (uint64_t)has_others(comm, op->dc, i);
    return n;
}

void client_ll_apply_result(const incmoe_comm_t *comm, coll_op_t *op, const char *rows)
{
    for (size_t i = 0; i < op->dc->nrows; i++) {
        int others = has_others(comm, op->dc, i);
        client_ll_own_last(comm, op, i, others ? rows : NULL);
        rows += others ? op->row_bytes : 0;
    }
}
