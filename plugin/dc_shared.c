/*
 * dc_shared.c - what dispatch and combine share, whichever algorithm moves their
 * rows (incmoe.h, "Dispatch and combine"): the dispatches the library keeps
 * until they are combined or released, the plan applied (the own rows copied
 * locally, the source table, what is still expected), the rows of a combine
 * that nobody else contributes to, the owner's own partial applied last, and
 * the failures that end one collective and not the communicator, kept for
 * incmoe_test and incmoe_req_error.
 */
#include "dc_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "notify.h"

#include "base/reduce.h"

/* ------------------------------------------------------------------------ */
/* records                                                                   */

client_dc_t *client_dc_new(int nranks, size_t nrows, size_t row_bytes)
{
    client_dc_t *dc = calloc(1, sizeof(*dc));
    if (dc == NULL)
        return NULL;
    dc->nrows = nrows;
    dc->row_bytes = row_bytes;
    dc->words = INCMOE_SET_WORDS(nranks);
    dc->sets = calloc(nrows * dc->words + 1, sizeof(uint64_t));
    dc->own_at = calloc(nrows + 1, sizeof(uint32_t));
    dc->sent = calloc((size_t)nranks, sizeof(uint32_t));
    dc->recvd = calloc((size_t)nranks, sizeof(uint32_t));
    dc->base = calloc((size_t)nranks + 1, sizeof(uint64_t));
    if (dc->sets == NULL || dc->own_at == NULL || dc->sent == NULL || dc->recvd == NULL ||
        dc->base == NULL) {
        client_dc_free(dc);
        return NULL;
    }
    return dc;
}

int client_dc_take_sets(client_dc_t *dc, int nranks, const uint64_t *sets, char *why,
                        size_t why_len)
{
    const size_t words = dc->words;
    const uint64_t last_mask = nranks % 64 == 0 ? ~(uint64_t)0 : ((uint64_t)1 << (nranks % 64)) - 1;
    if (dc->nrows > 0)
        memcpy(dc->sets, sets, dc->nrows * words * sizeof(uint64_t));
    for (size_t i = 0; i < dc->nrows; i++) {
        const uint64_t last = dc->sets[i * words + words - 1];
        if ((last & ~last_mask) != 0) {
            snprintf(why, why_len, "row %zu's set names a rank >= %d (word %zu is 0x%016llx)", i,
                     nranks, words - 1, (unsigned long long)last);
            return 0;
        }
    }
    return 1;
}

void client_dc_count_sets(const incmoe_comm_t *comm, client_dc_t *dc)
{
    uint32_t own = 0;
    for (size_t i = 0; i < dc->nrows; i++) {
        const uint64_t *set = &dc->sets[i * dc->words];
        for (size_t w = 0; w < dc->words; w++)
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
                dc->sent[w * 64 + (size_t)__builtin_ctzll(bits)]++;
        dc->own_at[i] = client_dc_in_set(dc, i, comm->rank) ? own++ : UINT32_MAX;
    }
}

int client_dc_set_low_latency(client_dc_t *dc, int nranks, size_t max_tokens)
{
    dc->ll = 1;
    dc->max_tokens = max_tokens;
    dc->nregions = (size_t)nranks;
    dc->region_rows = max_tokens;
    for (int s = 0; s <= nranks; s++)
        dc->base[s] = (uint64_t)s * max_tokens;
    dc->counts = calloc((size_t)nranks, sizeof(uint32_t));
    return dc->counts != NULL;
}

void client_dc_free(client_dc_t *dc)
{
    if (dc == NULL)
        return;
    free(dc->counts);
    free(dc->experts);
    free(dc->local);
    free(dc->slot_first);
    free(dc->slots);
    free(dc->sets);
    free(dc->own_at);
    free(dc->sent);
    free(dc->recvd);
    free(dc->base);
    free(dc->source);
    free(dc);
}

int client_dc_keep_locked(incmoe_comm_t *comm, coll_op_t *op)
{
    if (comm->ndcs >= INCMOE_STREAM_WINDOW)
        return 0;
    client_dc_t *dc = op->dc;
    dc->epoch = op->epoch;
    dc->kept = 1;
    dc->next = comm->dcs;
    comm->dcs = dc;
    comm->ndcs++;
    return 1;
}

client_dc_t *client_dc_find_locked(incmoe_comm_t *comm, uint64_t epoch)
{
    for (client_dc_t *dc = comm->dcs; dc != NULL; dc = dc->next)
        if (dc->epoch == epoch)
            return dc;
    return NULL;
}

void client_dc_unkeep_locked(incmoe_comm_t *comm, client_dc_t *dc)
{
    for (client_dc_t **pp = &comm->dcs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == dc) {
            *pp = dc->next;
            comm->ndcs--;
            break;
        }
    }
    client_dc_free(dc);
}

/* The slot of a dispatch or combine's failure; NULL if none can be kept (out of memory). */
static client_outcome_t *outcome_slot_locked(incmoe_comm_t *comm, incmoe_stream_t stream,
                                             uint64_t epoch, int make)
{
    client_outcome_t **table = &comm->outcomes[stream == INCMOE_STREAM_COMBINE];
    if (*table == NULL && make)
        *table = calloc(INCMOE_STREAM_WINDOW, sizeof(client_outcome_t));
    return *table != NULL ? &(*table)[epoch % INCMOE_STREAM_WINDOW] : NULL;
}

void client_dc_retire_locked(incmoe_comm_t *comm, coll_op_t *op)
{
    if (op->status != INCMOE_OK) {
        client_outcome_t *o = outcome_slot_locked(comm, op->stream, op->epoch, 1);
        if (o != NULL) {
            free(o->why);
            *o = (client_outcome_t){.epoch = op->epoch, .status = op->status, .why = op->why};
            op->why = NULL;
        }
    }
    client_dc_t *dc = op->dc;
    if (op->stream == INCMOE_STREAM_DISPATCH) {
        dc->complete = 1;
        dc->status = op->status;
    } else {
        dc->combining = 0;
        /* a refused combine's own empty record is never kept */
        if (op->status == INCMOE_OK || !dc->kept)
            client_dc_unkeep_locked(comm, dc);
    }
    op->dc = NULL;
}

void client_dc_drop_locked(coll_op_t *op)
{
    client_dc_t *dc = op->dc;
    op->dc = NULL;
    if (dc == NULL)
        return;
    if (op->stream == INCMOE_STREAM_COMBINE)
        dc->combining = 0;
    if (!dc->kept)
        client_dc_free(dc);
    /* a kept dispatch that never completed stays until closing frees it */
}

incmoe_status_t client_dc_outcome_locked(incmoe_comm_t *comm, const incmoe_req_t *req,
                                         const char **why_p)
{
    *why_p = "";
    if (req->stream == INCMOE_STREAM_DISPATCH) {
        const client_dc_t *dc = client_dc_find_locked(comm, req->epoch);
        if (dc != NULL && dc->status == INCMOE_OK)
            return INCMOE_OK;
    }
    const client_outcome_t *o = outcome_slot_locked(comm, req->stream, req->epoch, 0);
    if (o == NULL || o->epoch != req->epoch || o->status == INCMOE_OK)
        return INCMOE_OK;
    *why_p = o->why != NULL ? o->why : "";
    return o->status;
}

void client_dc_close_all(incmoe_comm_t *comm)
{
    while (comm->dcs != NULL)
        client_dc_unkeep_locked(comm, comm->dcs);
    for (int t = 0; t < 2; t++) {
        if (comm->outcomes[t] == NULL)
            continue;
        for (size_t i = 0; i < INCMOE_STREAM_WINDOW; i++)
            free(comm->outcomes[t][i].why);
        free(comm->outcomes[t]);
        comm->outcomes[t] = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* plans                                                                     */

/* The collective fails alone with the verdict: it completes once its sends are done. */
static void op_fail_alone(coll_op_t *op, const inc_dc_verdict_t *v)
{
    op->status = v->status;
    free(op->why);
    op->why = strdup(v->reason);
    op->recv_expected = 0;
}

/* The own rows whose set holds this rank, copied into its own source block. */
static void dispatch_own_rows(incmoe_comm_t *comm, coll_op_t *op)
{
    client_dc_t *dc = op->dc;
    const int me = comm->rank;
    const uint64_t at = dc->base[me];
    for (size_t i = 0; i < dc->nrows; i++) {
        if (!client_dc_in_set(dc, i, me))
            continue;
        uint64_t pos = at + dc->own_at[i];
        const char *src = op_send_at(op, i * dc->row_bytes);
        char *dst = op_recv_at(op, (size_t)pos * dc->row_bytes);
        if (src != dst)
            memmove(dst, src, dc->row_bytes);
        dc->source[2 * pos] = (uint32_t)me;
        dc->source[2 * pos + 1] = (uint32_t)i;
    }
}

incmoe_status_t client_dc_plan_dispatch(incmoe_comm_t *comm, coll_op_t *op, const uint32_t *recvd,
                                        const inc_dc_verdict_t *v)
{
    client_dc_t *dc = op->dc;
    const int me = comm->rank, n = comm->nranks;
    uint64_t rows = 0;
    for (int s = 0; s < n; s++) {
        dc->base[s] = rows;
        dc->recvd[s] = recvd[s];
        rows += recvd[s];
    }
    dc->base[n] = rows;
    dc->nrecv = (size_t)rows;
    op->planned = 1;
    if (recvd[me] != dc->sent[me] || (v->status == INCMOE_OK && rows > op->capacity)) {
        client_fail(comm, INCMOE_ERR_PROTOCOL,
                    "dispatch epoch %llu: the plan gives this rank %llu rows (%u of its own), it "
                    "holds %u of its own and room for %zu",
                    (unsigned long long)op->epoch, (unsigned long long)rows, recvd[me],
                    dc->sent[me], op->capacity);
        return INCMOE_ERR_PROTOCOL;
    }
    if (v->status != INCMOE_OK) {
        op_fail_alone(op, v);
        return INCMOE_OK;
    }
    dc->source = malloc(2 * (size_t)rows * sizeof(uint32_t) + 1);
    if (dc->source == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "dispatch epoch %llu: no memory for %llu rows",
                    (unsigned long long)op->epoch, (unsigned long long)rows);
        return INCMOE_ERR_NO_MEMORY;
    }
    dispatch_own_rows(comm, op);
    op->recv_expected = rows - recvd[me];
    return INCMOE_OK;
}

const char *client_dc_own_partial(const incmoe_comm_t *comm, const coll_op_t *op, size_t row)
{
    const client_dc_t *dc = op->dc;
    if (!client_dc_in_set(dc, row, comm->rank))
        return NULL;
    return op_send_at(op, (size_t)(dc->base[comm->rank] + dc->own_at[row]) * op->row_bytes);
}

/* Does anyone but this rank contribute to the row? */
static int row_has_others(const incmoe_comm_t *comm, const client_dc_t *dc, size_t row)
{
    const uint64_t *set = &dc->sets[row * dc->words];
    for (size_t w = 0; w < dc->words; w++) {
        uint64_t bits = set[w];
        if (w == (size_t)comm->rank / 64)
            bits &= ~((uint64_t)1 << ((unsigned)comm->rank % 64));
        if (bits != 0)
            return 1;
    }
    return 0;
}

void client_dc_plan_combine(incmoe_comm_t *comm, coll_op_t *op, const inc_dc_verdict_t *v)
{
    op->planned = 1;
    if (v->status != INCMOE_OK) {
        op_fail_alone(op, v);
        return;
    }
    const client_dc_t *dc = op->dc;
    uint64_t expected = 0;
    for (size_t i = 0; i < dc->nrows; i++) {
        if (row_has_others(comm, dc, i)) {
            expected++;
            continue;
        }
        const char *own = client_dc_own_partial(comm, op, i);
        char *dst = op_recv_at(op, i * op->row_bytes);
        if (own == NULL)
            memset(dst, 0, op->row_bytes);
        else if (own != dst)
            memmove(dst, own, op->row_bytes);
    }
    op->recv_expected = expected;
}

void client_dc_plan_alone(incmoe_comm_t *comm, coll_op_t *op)
{
    inc_dc_verdict_t v;
    if (op->stream == INCMOE_STREAM_COMBINE) {
        inc_dc_combine_in_t in = {.dispatch_epoch = op->dc->epoch,
                                  .row_count = op->row_bytes / incmoe_dtype_size(op->dtype),
                                  .dtype = (uint32_t)op->dtype,
                                  .redop = (uint32_t)op->redop,
                                  .sent = op->dc->sent,
                                  .recvd = op->dc->recvd,
                                  .refused = op->refused};
        inc_dc_combine_verdict(op->epoch, 1, &in, &v);
        client_dc_plan_combine(comm, op, &v);
        return;
    }
    inc_dc_dispatch_in_t in = {.row_bytes = op->row_bytes,
                               .capacity = op->capacity,
                               .count = op->dc->sent,
                               .refused = op->refused};
    inc_dc_dispatch_verdict(op->epoch, 1, &in, &v);
    client_dc_plan_dispatch(comm, op, op->dc->sent, &v);
}

/* ------------------------------------------------------------------------ */
/* rows from the others                                                      */

char *client_dc_recv_rows(coll_op_t *op, int src, uint64_t pos, uint64_t n)
{
    const client_dc_t *dc = op->dc;
    if (pos > dc->recvd[src] || n > dc->recvd[src] - pos)
        return NULL;
    return op_recv_at(op, (size_t)(dc->base[src] + pos) * dc->row_bytes);
}

void client_dc_set_sources(coll_op_t *op, int src, uint64_t pos, uint64_t n, const uint32_t *rows)
{
    client_dc_t *dc = op->dc;
    for (uint64_t k = 0; k < n; k++) {
        size_t at = (size_t)(dc->base[src] + pos + k);
        dc->source[2 * at] = (uint32_t)src;
        dc->source[2 * at + 1] = rows[k];
    }
}

void client_dc_combine_row(const incmoe_comm_t *comm, coll_op_t *op, size_t row, const void *others)
{
    char *dst = op_recv_at(op, row * op->row_bytes);
    const char *own = client_dc_own_partial(comm, op, row);
    if (own != NULL)
        inc_reduce_pair(dst, own, others, op->row_bytes / incmoe_dtype_size(op->dtype), op->dtype,
                        op->redop);
    else if (dst != others)
        memmove(dst, others, op->row_bytes);
}
