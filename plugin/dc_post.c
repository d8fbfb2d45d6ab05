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
#include "ll_post.h"
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
    if (comm->ops->dc_check == NULL || op->dc->ll) /* the form has bounds of its own */
        return INCMOE_OK;
    incmoe_status_t st = comm->ops->dc_check(comm, op, why, sizeof(why));
    if (st != INCMOE_OK)
        return client_post_reject(comm, op, st, "%s: %s", inc_wire_stream_name(op->stream), why);
    return INCMOE_OK;
}

/* A dispatch's or combine's signature names only its stream: the plan compares the shapes,
   dtype and op included, so a disagreement fails this collective alone. */
static uint64_t stream_signature(incmoe_comm_t *comm, const coll_op_t *op)
{
    return inc_wire_signature(op->stream, INCMOE_UINT8, INCMOE_SUM, op->bytes, comm->nranks);
}

/* The end of posting a dispatch or combine whose shape op holds: its buffers' offsets, its
   signature, the algorithm's checks and the low-latency form's bound, then submission. */
static incmoe_status_t dc_submit(incmoe_comm_t *comm, coll_op_t *op, size_t send_offset,
                                 size_t recv_offset, incmoe_req_t *req_p)
{
    client_op_set_buffers(op, send_offset, recv_offset);
    op->sig = stream_signature(comm, op);
    incmoe_status_t st = algo_check(comm, op);
    if (st == INCMOE_OK && op->dc->ll)
        st = client_ll_post_bound(comm, op);
    return st != INCMOE_OK ? st : client_post_submit(comm, op, req_p);
}

/* ------------------------------------------------------------------------ */
/* a refusal (incmoe.h, "A refusal")                                         */

/* Post op (a dispatch or combine) as this rank's refusal: no rows, no buffers, an empty record
   of its own (a combine names no dispatch), and the reason its plan carries, which fails the
   collective on every rank.  Nothing of the caller's is read but the reason, and the form's
   bound (ll_max_tokens, 0 for the bulk form). */
static incmoe_status_t post_refused(incmoe_comm_t *comm, coll_op_t *op, const char *why,
                                    size_t ll_max_tokens, incmoe_req_t *req_p)
{
    const char *name = inc_wire_stream_name(op->stream);
    op->refused = strndup(why != NULL ? why : "(no reason given)", INCMOE_REFUSAL_MAX - 1);
    op->refused_status = INCMOE_ERR_INVALID_ARG;
    op->dc = client_dc_new(comm->nranks, 0, 1);
    if (op->refused == NULL || op->dc == NULL || !client_ll_post_refused(comm, op, ll_max_tokens))
        return client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    op->dtype = INCMOE_UINT8;
    op->redop = INCMOE_SUM;
    op->sig = stream_signature(comm, op);
    return client_post_submit(comm, op, req_p);
}

/* What dc_open needs of the caller's params. */
typedef struct {
    uint32_t field_mask;
    uint32_t known;       /* the stream's field_mask bits */
    uint32_t refused_bit; /* the refusal's bit, with its reason */
    const char *refused;
    size_t ll_max_tokens; /* > 0: the low-latency form (a refusal takes it too) */
} dc_open_t;

/* The start of a dispatch or combine: the algorithm's support (of the form too), a new op,
   the known field_mask bits and the refusal the caller may ask for.  The op to check and post,
   or NULL when the call is over, *st_p saying how (unsupported, rejected, or the refusal
   posted). */
static coll_op_t *dc_open(incmoe_comm_t *comm, incmoe_stream_t stream, const dc_open_t *o,
                          incmoe_req_t *req_p, incmoe_status_t *st_p)
{
    const char *name = inc_wire_stream_name(stream);
    *st_p = INCMOE_ERR_UNSUPPORTED; /* the same on every rank: nothing posted anywhere */
    if (!comm->ops->has_dc || (o->ll_max_tokens > 0 && comm->ops->ll_bytes == NULL))
        return NULL;
    coll_op_t *op = client_op_new(comm, stream);
    if (op == NULL)
        *st_p = client_post_reject(comm, NULL, INCMOE_ERR_NO_MEMORY, "%s: out of memory", name);
    else if ((o->field_mask & ~o->known) != 0)
        *st_p = client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                   "%s: unknown field_mask bits 0x%x", name, o->field_mask);
    else if (o->field_mask & o->refused_bit)
        *st_p = post_refused(comm, op, o->refused, o->ll_max_tokens, req_p);
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
    char why[160];
    if (!client_dc_take_sets(op->dc, comm->nranks, sets, why, sizeof(why)))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG, "dispatch: %s", why);
    client_dc_count_sets(comm, op->dc);
    return INCMOE_OK;
}

/* Shapes and ranges of a dispatch; INCMOE_OK or a rejection (op freed). */
static incmoe_status_t check_dispatch(incmoe_comm_t *comm, coll_op_t *op,
                                      const incmoe_dispatch_params_t *p)
{
    const int ll = (p->field_mask & INCMOE_DISPATCH_PARAM_LOW_LATENCY) != 0;
    if (p->row_bytes == 0 || (!ll && p->nrows > 0 && p->sets == NULL))
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: %zu rows of %zu bytes with %s sets", p->nrows,
                                  p->row_bytes, p->sets == NULL ? "NULL" : "given");
    if ((p->field_mask & INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT) && !ll)
        return client_post_reject(comm, op, INCMOE_ERR_INVALID_ARG,
                                  "dispatch: the expert layout without the low-latency form");
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
    const dc_open_t o = {.field_mask = params->field_mask,
                         .known = INCMOE_DISPATCH_PARAM_REFUSED |
                                  INCMOE_DISPATCH_PARAM_LOW_LATENCY |
                                  INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT,
                         .refused_bit = INCMOE_DISPATCH_PARAM_REFUSED,
                         .refused = params->refused,
                         .ll_max_tokens = (params->field_mask & INCMOE_DISPATCH_PARAM_LOW_LATENCY)
                                              ? (params->max_tokens > 0 ? params->max_tokens : 1)
                                              : 0};
    coll_op_t *op = dc_open(comm, INCMOE_STREAM_DISPATCH, &o, req_p, &st);
    if (op == NULL)
        return st;
    st = check_dispatch(comm, op, params);
    if (st != INCMOE_OK)
        return st;
    if (params->field_mask & INCMOE_DISPATCH_PARAM_LOW_LATENCY) {
        st = client_ll_post_dispatch(comm, op, params);
    } else if ((op->dc = client_dc_new(comm->nranks, params->nrows, params->row_bytes)) == NULL) {
        st = client_post_reject(comm, op, INCMOE_ERR_NO_MEMORY,
                                "dispatch: out of memory for %zu rows", params->nrows);
    } else {
        st = copy_sets(comm, op, params->sets);
    }
    if (st != INCMOE_OK)
        return st;
    op->rows = op->dc->nrows;
    op->row_bytes = params->row_bytes;
    op->capacity = params->capacity;
    op->dtype = INCMOE_UINT8;
    op->redop = INCMOE_SUM;
    return dc_submit(comm, op, params->send_offset, params->recv_offset, req_p);
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

/* The form a combine's refusal takes: the low-latency form's bound when its dispatch field
   names a kept low-latency dispatch (so it meets the others' messages), else 0. */
static size_t refused_form(incmoe_comm_t *comm, const incmoe_combine_params_t *p)
{
    if (!(p->field_mask & INCMOE_COMBINE_PARAM_REFUSED) ||
        p->dispatch.stream != INCMOE_STREAM_DISPATCH)
        return 0;
    pthread_mutex_lock(&comm->lock);
    const client_dc_t *dc = client_dc_find_locked(comm, p->dispatch.epoch);
    size_t max_tokens = dc != NULL && dc->ll ? dc->max_tokens : 0;
    pthread_mutex_unlock(&comm->lock);
    return max_tokens;
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
    const dc_open_t o = {.field_mask = params->field_mask,
                         .known = INCMOE_COMBINE_PARAM_REFUSED,
                         .refused_bit = INCMOE_COMBINE_PARAM_REFUSED,
                         .refused = params->refused,
                         .ll_max_tokens = refused_form(comm, params)};
    coll_op_t *op = dc_open(comm, INCMOE_STREAM_COMBINE, &o, req_p, &st);
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
    st =
        check_combine(comm, op, params, dc->ll ? client_ll_partial_rows(dc) : dc->nrecv, dc->nrows);
    if (st != INCMOE_OK)
        return st;
    op->rows = dc->nrecv;
    op->row_bytes = params->row_count * incmoe_dtype_size(params->dtype);
    op->dtype = params->dtype;
    op->redop = params->op;
    return dc_submit(comm, op, params->send_offset, params->recv_offset, req_p);
}

/* ------------------------------------------------------------------------ */
/* a kept dispatch                                                           */

/* Under comm->lock: the completed dispatch req names, its status in *st_p (INCMOE_IN_PROGRESS
   while it runs); NULL (with *st_p) when it is not kept or not complete. */
static const client_dc_t *completed_dispatch_locked(incmoe_comm_t *comm, const incmoe_req_t *req,
                                                    incmoe_status_t *st_p)
{
    const client_dc_t *dc = client_dc_find_locked(comm, req->epoch);
    if (dc == NULL) {
        *st_p = INCMOE_ERR_INVALID_ARG;
    } else if (!dc->complete) {
        *st_p = (incmoe_status_t)atomic_load(&comm->error);
        if (*st_p == INCMOE_OK)
            *st_p = INCMOE_IN_PROGRESS;
        return NULL;
    } else {
        *st_p = dc->status;
    }
    return dc;
}

/* The first n (source rank, source row) pairs of the received rows: the bulk form's table as
   it is, the low-latency form's region by region. */
static void copy_sources(const client_dc_t *dc, uint32_t *out, size_t n)
{
    if (!dc->ll) {
        memcpy(out, dc->source, 2 * n * sizeof(uint32_t));
        return;
    }
    size_t at = 0;
    for (size_t j = 0; j < dc->nregions && at < n; j++) {
        size_t k = dc->counts[j] < n - at ? dc->counts[j] : n - at;
        memcpy(out + 2 * at, dc->source + 2 * j * dc->region_rows, 2 * k * sizeof(uint32_t));
        at += k;
    }
}

incmoe_status_t incmoe_dispatch_result(incmoe_comm_t *comm, const incmoe_req_t *dispatch,
                                       size_t *nrecv_p, uint32_t *source_p, size_t source_rows)
{
    if (comm == NULL || dispatch == NULL || nrecv_p == NULL ||
        dispatch->stream != INCMOE_STREAM_DISPATCH)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st;
    pthread_mutex_lock(&comm->lock);
    const client_dc_t *dc = completed_dispatch_locked(comm, dispatch, &st);
    if (dc != NULL) {
        if (st == INCMOE_OK || st == INCMOE_ERR_NO_MEMORY)
            *nrecv_p = dc->nrecv;
        size_t n = source_rows < dc->nrecv ? source_rows : dc->nrecv;
        if (st == INCMOE_OK && source_p != NULL && n > 0)
            copy_sources(dc, source_p, n);
    }
    pthread_mutex_unlock(&comm->lock);
    return st;
}

incmoe_status_t incmoe_dispatch_counts(incmoe_comm_t *comm, const incmoe_req_t *dispatch,
                                       uint32_t *counts, size_t ncounts, size_t *nregions_p)
{
    if (comm == NULL || dispatch == NULL || (counts == NULL && ncounts > 0) ||
        dispatch->stream != INCMOE_STREAM_DISPATCH)
        return INCMOE_ERR_INVALID_ARG;
    incmoe_status_t st;
    pthread_mutex_lock(&comm->lock);
    const client_dc_t *dc = completed_dispatch_locked(comm, dispatch, &st);
    if (dc != NULL && (st == INCMOE_OK || st == INCMOE_ERR_NO_MEMORY)) {
        /* The bulk form's regions are its sources: recvd is their rows. */
        const size_t regions = dc->ll ? dc->nregions : (size_t)comm->nranks;
        const uint32_t *rows = dc->ll ? dc->counts : dc->recvd;
        if (nregions_p != NULL)
            *nregions_p = regions;
        for (size_t j = 0; j < regions && j < ncounts; j++)
            counts[j] = rows[j];
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
