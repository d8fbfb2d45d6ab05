/*
 * ll_post.c - the posting checks of the low-latency form of dispatch and
 * combine (incmoe.h, "The low-latency form"), on the caller's thread, for
 * dc_post.c: max_tokens, the layouts, the capacity their regions take, the
 * expert ids and their table.  Wrong arguments are rejected as every
 * collective's are (the job fails with the reason).  The form's own bounds are
 * refusals instead (incmoe.h, "A refusal"): a rank over max_tokens, or whose
 * message would take more than the credits, still sends its description, so
 * the collective fails on every rank alike and the communicator carries on.
 */
#include "ll_post.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "dc_shared.h"
#include "ll_shared.h"
#include "submit.h"

#include "base/hash.h"
#include "base/vformat.h"

/* This rank refuses op in the form with status and the reason the verdict prints after
   "<stream> epoch E: ": it sends no row. */
static incmoe_status_t refuse(coll_op_t *op, incmoe_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static incmoe_status_t refuse(coll_op_t *op, incmoe_status_t status, const char *fmt, ...)
{
    char text[INCMOE_REFUSAL_MAX];
    INC_VFORMAT(text, sizeof(text), fmt);
    free(op->refused);
    op->refused = strdup(text);
    op->refused_status = status;
    return op->refused != NULL ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
}

int client_ll_post_refused(incmoe_comm_t *comm, coll_op_t *op, size_t max_tokens)
{
    if (max_tokens == 0 || max_tokens > UINT32_MAX)
        return 1; /* no bound to size regions by: the bulk form's refusal */
    return client_dc_set_low_latency(op->dc, comm->nranks, max_tokens);
}

size_t client_ll_partial_rows(const client_dc_t *dc)
{
    return dc->nregions * dc->region_rows;
}

incmoe_status_t client_ll_post_bound(incmoe_comm_t *comm, coll_op_t *op)
{
    if (op->refused != NULL)
        return INCMOE_OK;
    const uint64_t bytes = comm->ops->ll_bytes(comm, op);
    if (client_ll_credits(comm, bytes) <= comm->credits)
        return INCMOE_OK;
    /* A dispatch sends no row now; a combine's record is its dispatch's, kept as it is. */
    if (op->stream == INCMOE_STREAM_DISPATCH)
        memset(op->dc->sent, 0, (size_t)comm->nranks * sizeof(uint32_t));
    if (refuse(op, INCMOE_ERR_NO_MEMORY,
               "rank %d's message of %llu bytes exceeds the %u x %llu bytes granted per stream",
               comm->rank, (unsigned long long)bytes, comm->credits,
               (unsigned long long)comm->chunk_size) == INCMOE_OK)
        return INCMOE_OK;
    return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "%s: out of memory",
                              inc_wire_stream_name(op->stream));
}

/* ------------------------------------------------------------------------ */
/* by expert                                                                 */

/* The expert table: each rank < N, this rank's experts numbered, the layout's signature. */
static incmoe_status_t take_table(incmoe_comm_t *comm, coll_op_t *op,
                                  const incmoe_dispatch_params_t *p)
{
    client_dc_t *dc = op->dc;
    dc->local = malloc((size_t)p->num_experts * sizeof(int32_t));
    if (dc->local == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "dispatch: out of memory");
    /* The row's bytes too: the ids follow them on the wire, where the padding could hide two
       sizes. */
    uint64_t sig = inc_fnv1a_u64(INC_FNV1A_INIT, (uint64_t)p->num_experts);
    sig = inc_fnv1a_u64(sig, (uint64_t)p->topk);
    sig = inc_fnv1a_u64(sig, (uint64_t)p->row_bytes);
    int nlocal = 0;
    for (int e = 0; e < p->num_experts; e++) {
        int32_t r = p->expert_rank[e];
        if (r < 0 || r >= comm->nranks)
            return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                      "dispatch: expert_rank[%d] is %d, not a rank of %d", e,
                                      (int)r, comm->nranks);
        dc->local[e] = r == comm->rank ? nlocal++ : -1;
        sig = inc_fnv1a_u64(sig, (uint64_t)r);
    }
    dc->by_expert = 1;
    dc->topk = p->topk;
    dc->num_experts = p->num_experts;
    dc->layout_sig = sig;
    dc->nregions = (size_t)nlocal;
    dc->region_rows = (size_t)comm->nranks * dc->max_tokens;
    free(dc->counts);
    dc->counts = calloc((size_t)nlocal + 1, sizeof(uint32_t));
    if (dc->counts == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "dispatch: out of memory");
    return INCMOE_OK;
}

/* The rows' expert ids copied, each < num_experts or -1, and the sets made from them. */
static incmoe_status_t take_experts(incmoe_comm_t *comm, coll_op_t *op,
                                    const incmoe_dispatch_params_t *p)
{
    client_dc_t *dc = op->dc;
    const size_t k = (size_t)p->topk;
    dc->experts = malloc(dc->nrows * k * sizeof(int32_t) + 1);
    if (dc->experts == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "dispatch: out of memory");
    if (dc->nrows > 0)
        memcpy(dc->experts, p->experts, dc->nrows * k * sizeof(int32_t));
    for (size_t i = 0; i < dc->nrows; i++) {
        for (size_t j = 0; j < k; j++) {
            int32_t e = dc->experts[i * k + j];
            if (e < -1 || e >= p->num_experts)
                return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                          "dispatch: row %zu names expert %d of %d", i, (int)e,
                                          p->num_experts);
            if (e >= 0) {
                int r = p->expert_rank[e];
                dc->sets[i * dc->words + (size_t)r / 64] |= (uint64_t)1 << (r % 64);
            }
        }
    }
    return INCMOE_OK;
}

/* The layout's own arguments: by expert, the experts and the table, and no sets. */
static incmoe_status_t check_expert_args(incmoe_comm_t *comm, coll_op_t *op,
                                         const incmoe_dispatch_params_t *p)
{
    if (p->sets != NULL || (p->nrows > 0 && p->experts == NULL) || p->expert_rank == NULL ||
        p->topk < 1 || p->topk > INCMOE_MAX_TOPK || p->num_experts < 1 ||
        p->num_experts > INCMOE_MAX_EXPERTS)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch by expert: sets %s (must be NULL), experts %s, "
                                  "expert_rank %s, topk %d (1..%d), num_experts %d (1..%d)",
                                  p->sets ? "given" : "NULL", p->experts ? "given" : "NULL",
                                  p->expert_rank ? "given" : "NULL", p->topk, INCMOE_MAX_TOPK,
                                  p->num_experts, INCMOE_MAX_EXPERTS);
    if (p->nrows > SIZE_MAX / sizeof(int32_t) / (size_t)p->topk)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch by expert: %zu rows of %d experts is too many",
                                  p->nrows, p->topk);
    return INCMOE_OK;
}

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

/* max_tokens, the layout's arguments and the capacity its regions take. */
static incmoe_status_t check_form(incmoe_comm_t *comm, coll_op_t *op,
                                  const incmoe_dispatch_params_t *p)
{
    const int by_expert = (p->field_mask & INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT) != 0;
    const size_t n = (size_t)comm->nranks;
    if (p->max_tokens == 0 || p->max_tokens > UINT32_MAX / n / (by_expert ? n : 1))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: max_tokens %zu (1..%zu for %zu ranks)", p->max_tokens,
                                  (size_t)UINT32_MAX / n / (by_expert ? n : 1), n);
    if (by_expert)
        return check_expert_args(comm, op, p);
    if (p->nrows > 0 && p->sets == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: %zu rows with NULL sets", p->nrows);
    return INCMOE_OK;
}

/* The receive range holds every region: N max_tokens rows by source, L N max_tokens by
   expert (L known once the table is read). */
static incmoe_status_t check_capacity(incmoe_comm_t *comm, coll_op_t *op,
                                      const incmoe_dispatch_params_t *p)
{
    const client_dc_t *dc = op->dc;
    const size_t need = client_ll_partial_rows(dc);
    if (p->capacity >= need)
        return INCMOE_OK;
    return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                              "dispatch: capacity %zu rows, the low-latency form %s needs %zu (%zu "
                              "regions of %zu rows)",
                              p->capacity, dc->by_expert ? "by expert" : "by source", need,
                              dc->nregions, dc->region_rows);
}

incmoe_status_t client_ll_post_dispatch(incmoe_comm_t *comm, coll_op_t *op,
                                        const incmoe_dispatch_params_t *p)
{
    incmoe_status_t st = check_form(comm, op, p);
    if (st != INCMOE_OK)
        return st;
    const int over = p->nrows > p->max_tokens;
    /* A rank over the bound sends no row: its record holds none. */
    op->dc = client_dc_new(comm->nranks, over ? 0 : p->nrows, p->row_bytes);
    if (op->dc == NULL || !client_dc_set_low_latency(op->dc, comm->nranks, p->max_tokens))
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY,
                                  "dispatch: out of memory for %zu rows", p->nrows);
    if (p->field_mask & INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT) {
        if ((st = take_table(comm, op, p)) != INCMOE_OK)
            return st;
    }
    if ((st = check_capacity(comm, op, p)) != INCMOE_OK)
        return st;
    if (over)
        return refuse(op, INCMOE_ERR_NO_MEMORY, "rank %d has %zu rows, max_tokens %zu", comm->rank,
                      p->nrows, p->max_tokens) == INCMOE_OK
                   ? INCMOE_OK
                   : client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "dispatch: out of memory");
    if (op->dc->by_expert) {
        if ((st = take_experts(comm, op, p)) != INCMOE_OK)
            return st;
    } else {
        char why[160];
        if (!client_dc_take_sets(op->dc, comm->nranks, p->sets, why, sizeof(why)))
            return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG, "dispatch: %s", why);
    }
    client_dc_count_sets(comm, op->dc);
    return INCMOE_OK;
}
