/*
 * dc_post.c - the posting calls of dispatch and combine on the caller's
 * threads, and the calls on a kept dispatch (its result, its release).
 * Every argument is checked against the registered regions and the
 * communicator before anything is queued; the sets are copied (the caller
 * may reuse them once the call returns) and counted per destination, which
 * is this rank's part of the plan.  What the algorithm cannot carry it says
 * through its dc_check.  Rejections fail the job, as for the other
 * collectives (post.c); a refusal the caller asks for fails only the
 * collective, through its plan.
 */
#include <stdio.h>
#include <string.h>

#include "algo.h"
#include "dc_shared.h"
#include "mr.h"
#include "submit.h"

/* Do two byte ranges of registered memory overlap? */
static int ranges_overlap(const struct incmoe_mr *a, size_t aoff, size_t alen,
                          const struct incmoe_mr *b, size_t boff, size_t blen)
{
    if (alen == 0 || blen == 0)
        return 0;
    const char *a0 = a->base + aoff, *b0 = b->base + boff;
    return a0 < b0 + blen && b0 < a0 + alen;
}

/* The buffers of a dispatch or combine: registered with this communicator (held for op), the
   ranges inside their regions and apart; INCMOE_OK or a rejection (op freed). */
static incmoe_status_t check_buffers(incmoe_comm_t *comm, coll_op_t *op, struct incmoe_mr *smr,
                                     size_t soff, size_t sbytes, struct incmoe_mr *rmr, size_t roff,
                                     size_t rbytes)
{
    const char *name = inc_wire_stream_name(op->stream);
    if (smr == NULL || rmr == NULL || !client_mr_hold(comm, op, smr, rmr))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "%s: buffer NULL or not registered with this communicator", name);
    if (!client_range_ok(smr, soff, sbytes) || !client_range_ok(rmr, roff, rbytes))
        return client_post_reject(comm, op, INCMOE_ERR_OUT_OF_RANGE,
                                  "%s: %zu bytes at send %zu / %zu at recv %zu exceed the "
                                  "registered %zu / %zu",
                                  name, sbytes, soff, rbytes, roff, smr->length, rmr->length);
    if (ranges_overlap(smr, soff, sbytes, rmr, roff, rbytes))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "%s: the send and receive ranges overlap", name);
    return INCMOE_OK;
}

/* The algorithm's own limits; INCMOE_OK or a rejection (op freed). */
static incmoe_status_t algo_check(incmoe_comm_t *comm, coll_op_t *op)
{
    char why[200];
    if (comm->ops->dc_check == NULL)
        return INCMOE_OK;
    incmoe_status_t st = comm->ops->dc_check(comm, op, why, sizeof(why));
    if (st != INCMOE_OK)
        return client_post_reject(comm, op, st, "%s: %s", inc_wire_stream_name(op->stream), why);
    return INCMOE_OK;
}

/* ------------------------------------------------------------------------ */
/* a refusal (incmoe.h, "A refusal")                                         */

/* Post op (a dispatch or combine) as this rank's refusal: no rows, no buffers, an empty record
   of its own (a combine names no dispatch), and the reason its plan carries, which fails the
   collective on every rank.  Nothing of the caller's is read but the reason. */
static incmoe_status_t post_refused(incmoe_comm_t *comm, coll_op_t *op, const char *why,
                                    incmoe_req_t *req_p)
{
    const char *name = inc_wire_stream_name(op->stream);
    op->refused = strndup(why != NULL ? why : "(no reason given)", INCMOE_REFUSAL_MAX - 1);
    op->dc = client_dc_new(comm->nranks, 0, 1);
    if (op->refused == NULL || op->dc == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    op->dtype = INCMOE_UINT8;
    op->redop = INCMOE_SUM;
    op->sig = inc_wire_signature(op->stream, INCMOE_UINT8, INCMOE_SUM, op->bytes, comm->nranks);
    return client_post_submit(comm, op, req_p);
}

/* The start of a dispatch or combine: the algorithm's support, a new op, the known field_mask
   bits and the refusal the caller may ask for (refused_bit, with its reason refused).  The op
   to check and post, or NULL when the call is over, *st_p saying how (unsupported, rejected,
   or the refusal posted). */
static coll_op_t *dc_open(incmoe_comm_t *comm, incmoe_stream_t stream, uint32_t field_mask,
                          uint32_t refused_bit, const char *refused, incmoe_req_t *req_p,
                          incmoe_status_t *st_p)
{
    const char *name = inc_wire_stream_name(stream);
    *st_p = INCMOE_ERR_UNSUPPORTED; /* the same on every rank: nothing posted anywhere */
    if (!comm->ops->has_dc)
        return NULL;
    coll_op_t *op = client_op_new(comm, stream);
    if (op == NULL)
        *st_p = client_post_reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    else if ((field_mask & ~refused_bit) != 0)
        *st_p = client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                   "%s: unknown field_mask bits 0x%x", name, field_mask);
    else if (field_mask & refused_bit)
        *st_p = post_refused(comm, op, refused, req_p);
    else
        return op;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

/* Copy the sets into the record, refusing a bit for a rank >= N, and count this rank's rows
   for each destination; where its own rows land in its own source block. */
static incmoe_status_t copy_sets(incmoe_comm_t *comm, coll_op_t *op, const uint64_t *sets)
{
    client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    const size_t words = dc->words;
    const uint64_t last_mask = n % 64 == 0 ? ~(uint64_t)0 : ((uint64_t)1 << (n % 64)) - 1;
    uint32_t own = 0;
    if (dc->nrows > 0)
        memcpy(dc->sets, sets, dc->nrows * words * sizeof(uint64_t));
    for (size_t i = 0; i < dc->nrows; i++) {
        const uint64_t *set = &dc->sets[i * words];
        if ((set[words - 1] & ~last_mask) != 0)
            return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                      "dispatch: row %zu's set names a rank >= %d (word %zu is "
                                      "0x%016llx)",
                                      i, n, words - 1, (unsigned long long)set[words - 1]);
        for (size_t w = 0; w < words; w++)
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
                dc->sent[w * 64 + (size_t)__builtin_ctzll(bits)]++;
        dc->own_at[i] = client_dc_in_set(dc, i, me) ? own++ : UINT32_MAX;
    }
    return INCMOE_OK;
}

/* Shapes and ranges of a dispatch; INCMOE_OK or a rejection (op freed). */
static incmoe_status_t check_dispatch(incmoe_comm_t *comm, coll_op_t *op,
                                      const incmoe_dispatch_params_t *p)
{
    if (p->row_bytes == 0 || (p->nrows > 0 && p->sets == NULL))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: %zu rows of %zu bytes with %s sets", p->nrows,
                                  p->row_bytes, p->sets == NULL ? "NULL" : "given");
    if (p->nrows > UINT32_MAX || p->nrows > SIZE_MAX / p->row_bytes ||
        p->nrows > SIZE_MAX / sizeof(uint64_t) / INCMOE_SET_WORDS(comm->nranks) ||
        p->capacity > SIZE_MAX / p->row_bytes)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: %zu rows or a capacity of %zu rows of %zu bytes is "
                                  "too large",
                                  p->nrows, p->capacity, p->row_bytes);
    return check_buffers(comm, op, p->send_mr, p->send_offset, p->nrows * p->row_bytes, p->recv_mr,
                         p->recv_offset, p->capacity * p->row_bytes);
}

incmoe_status_t incmoe_dispatch(incmoe_comm_t *comm, const incmoe_dispatch_params_t *params,
                                incmoe_req_t *req_p)
{
    if (comm == NULL || params == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st;
    coll_op_t *op = dc_open(comm, INCMOE_STREAM_DISPATCH, params->field_mask,
                            INCMOE_DISPATCH_PARAM_REFUSED, params->refused, req_p, &st);
    if (op == NULL)
        return st;
    st = check_dispatch(comm, op, params);
    if (st != INCMOE_OK)
        return st;
    op->dc = client_dc_new(comm->nranks, params->nrows, params->row_bytes);
    if (op->dc == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY,
                                  "dispatch: out of memory for %zu rows", params->nrows);
    if ((st = copy_sets(comm, op, params->sets)) != INCMOE_OK)
        return st;
    client_op_set_buffers(op, params->send_offset, params->recv_offset);
    op->rows = params->nrows;
    op->row_bytes = params->row_bytes;
    op->capacity = params->capacity;
    op->dtype = INCMOE_UINT8;
    op->redop = INCMOE_SUM;
    /* The shapes are the plan's to compare (a disagreement fails this dispatch alone), so the
       signature names only the stream. */
    op->sig =
        inc_wire_signature(INCMOE_STREAM_DISPATCH, op->dtype, op->redop, op->bytes, comm->nranks);
    if ((st = algo_check(comm, op)) != INCMOE_OK)
        return st;
    return client_post_submit(comm, op, req_p);
}

/* ------------------------------------------------------------------------ */
/* combine                                                                   */

/* Under comm->lock: the dispatch a combine names, completed, kept and free; else NULL with
   the reason in why. */
static client_dc_t *named_dispatch_locked(incmoe_comm_t *comm, const incmoe_req_t *req, char *why,
                                          size_t why_len)
{
    const unsigned long long e = (unsigned long long)req->epoch;
    client_dc_t *dc =
        req->stream == INCMOE_STREAM_DISPATCH ? client_dc_find_locked(comm, req->epoch) : NULL;
    if (dc == NULL)
        snprintf(why, why_len,
                 "names dispatch epoch %llu, which is not kept (never posted, not a dispatch, "
                 "released or combined)",
                 e);
    else if (!dc->complete)
        snprintf(why, why_len, "names dispatch epoch %llu, which has not completed", e);
    else if (dc->status != INCMOE_OK)
        snprintf(why, why_len, "names dispatch epoch %llu, which failed (%s)", e,
                 incmoe_strerror(dc->status));
    else if (dc->combining)
        snprintf(why, why_len, "names dispatch epoch %llu, which a combine in flight names", e);
    else
        return dc;
    return NULL;
}

/* Shapes and ranges of a combine of a dispatch of R received and T own rows. */
static incmoe_status_t check_combine(incmoe_comm_t *comm, coll_op_t *op,
                                     const incmoe_combine_params_t *p, size_t nrecv, size_t nrows)
{
    if (!incmoe_reduce_supported(p->dtype, p->op))
        return client_post_reject(comm, op, INCMOE_ERR_UNSUPPORTED,
                                  "combine: datatype %d / operation %d", (int)p->dtype, (int)p->op);
    const size_t esize = incmoe_dtype_size(p->dtype);
    const size_t most = nrecv > nrows ? nrecv : nrows;
    if (p->row_count == 0 || p->row_count > SIZE_MAX / esize ||
        (most > 0 && p->row_count * esize > SIZE_MAX / most))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "combine: rows of %zu %s elements", p->row_count,
                                  incmoe_dtype_name(p->dtype));
    const size_t rb = p->row_count * esize;
    return check_buffers(comm, op, p->send_mr, p->send_offset, nrecv * rb, p->recv_mr,
                         p->recv_offset, nrows * rb);
}

incmoe_status_t incmoe_combine(incmoe_comm_t *comm, const incmoe_combine_params_t *params,
                               incmoe_req_t *req_p)
{
    if (comm == NULL || params == NULL || req_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st;
    coll_op_t *op = dc_open(comm, INCMOE_STREAM_COMBINE, params->field_mask,
                            INCMOE_COMBINE_PARAM_REFUSED, params->refused, req_p, &st);
    if (op == NULL)
        return st;
    char why[200];
    pthread_mutex_lock(&comm->lock);
    client_dc_t *dc = named_dispatch_locked(comm, &params->dispatch, why, sizeof(why));
    if (dc != NULL) {
        dc->combining = 1; /* from here op->dc: a rejection below lets it go */
        op->dc = dc;
    }
    pthread_mutex_unlock(&comm->lock);
    if (dc == NULL)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG, "combine: %s", why);
    st = check_combine(comm, op, params, dc->nrecv, dc->nrows);
    if (st != INCMOE_OK)
        return st;
    client_op_set_buffers(op, params->send_offset, params->recv_offset);
    op->rows = dc->nrecv;
    op->row_bytes = params->row_count * incmoe_dtype_size(params->dtype);
    op->dtype = params->dtype;
    op->redop = params->op;
    /* As for dispatch: the plan compares the shapes, dtype and op included. */
    op->sig = inc_wire_signature(INCMOE_STREAM_COMBINE, INCMOE_UINT8, INCMOE_SUM, op->bytes,
                                 comm->nranks);
    if ((st = algo_check(comm, op)) != INCMOE_OK)
        return st;
    return client_post_submit(comm, op, req_p);
}

/* ------------------------------------------------------------------------ */
/* a kept dispatch                                                           */

incmoe_status_t incmoe_dispatch_result(incmoe_comm_t *comm, const incmoe_req_t *dispatch,
                                       size_t *nrecv_p, uint32_t *source_p, size_t source_rows)
{
    if (comm == NULL || dispatch == NULL || nrecv_p == NULL ||
        dispatch->stream != INCMOE_STREAM_DISPATCH)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st;
    pthread_mutex_lock(&comm->lock);
    const client_dc_t *dc = client_dc_find_locked(comm, dispatch->epoch);
    if (dc == NULL) {
        st = INCMOE_ERR_INVALID_ARG;
    } else if (!dc->complete) {
        st = (incmoe_status_t)atomic_load(&comm->error);
        if (st == INCMOE_OK)
            st = INCMOE_IN_PROGRESS;
    } else {
        st = dc->status;
        if (st == INCMOE_OK || st == INCMOE_ERR_NO_MEMORY)
            *nrecv_p = dc->nrecv;
        if (st == INCMOE_OK && source_p != NULL) {
            size_t n = source_rows < dc->nrecv ? source_rows : dc->nrecv;
            if (n > 0)
                memcpy(source_p, dc->source, 2 * n * sizeof(uint32_t));
        }
    }
    pthread_mutex_unlock(&comm->lock);
    return st;
}

incmoe_status_t incmoe_dispatch_release(incmoe_comm_t *comm, const incmoe_req_t *dispatch)
{
    if (comm == NULL || dispatch == NULL || dispatch->stream != INCMOE_STREAM_DISPATCH)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st = INCMOE_OK;
    pthread_mutex_lock(&comm->lock);
    client_dc_t *dc = client_dc_find_locked(comm, dispatch->epoch);
    if (dc == NULL)
        st = INCMOE_ERR_INVALID_ARG;
    else if (!dc->complete || dc->combining)
        st = INCMOE_ERR_BUSY;
    else
        client_dc_unkeep_locked(comm, dc);
    pthread_mutex_unlock(&comm->lock);
    return st;
}
