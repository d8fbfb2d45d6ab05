/*
 * roles.h - the band pipeline of paper Algorithm 1, one loop per role,
 * written once for every backend.
 *
 * The loops are host and device functions over the plain-old-data context of
 * ctx.h and a small set of primitives each backend defines before including
 * this header (moe/cpu/prims.h for threads, moe/cuda/prims.cuh for thread
 * blocks of one persistent kernel):
 *   incmoe_status_t prim_wait_geq(x, const uint64_t *c, uint64_t v)
 *       until *c >= v (acquire), bounded by x->timeout_ms, abort-aware
 *   void prim_publish(x, uint64_t *c, uint64_t v)       raise *c to v (release)
 *   incmoe_status_t prim_post(x, const incmoe_fifo_trigger_t *, uint64_t *ticket)
 *   incmoe_status_t prim_wait_ticket(x, int stream, uint64_t ticket)
 *   void prim_abort(x, incmoe_status_t, moe_fail_t what, size_t band)
 *       record the first failure in x->cnt and wake every waiter
 *   void prim_pack_rows(x, band_t rows)      this rank's rows into its gather block
 *   void prim_ffn_rows(x, int c, band_t b, size_t first, size_t n)
 *       compute worker c: the local experts over positions [first, first + n)
 *       of band b's row list, router-weighted, into Z (or x->own)
 *   void prim_local_reduce(x, band_t part)   own rows of Z += own partial
 *
 * Rules every loop keeps:
 * - band boundaries come only from band_get (band.h), part counts from plan.h;
 * - counters only increase; a threshold is this forward's base plus the band;
 * - an empty band, or a band with no rows for a local expert, still advances
 *   every counter and posts every collective (with zero bytes where a rank
 *   has no rows), so ranks and workers never disagree on a count;
 * - each collective stream has one poster at a time, in band order: the
 *   AllGather from gather worker 0, the barrier from reduce worker 0, the
 *   ReduceScatter parts from the reduce workers in turn (the rs_turn ticket);
 * - a loop that fails calls prim_abort and returns; it never reports.
 *
 * Baseline mode is the same loops with one band, no band barrier and no
 * local reduction (its own rows go through the ReduceScatter like the
 * others'), so both modes post through the FIFO.
 */
#ifndef INCMOE_MOE_ROLES_H
#define INCMOE_MOE_ROLES_H

#include "plan.h"

/* Host and device by default; a backend whose primitives exist on one side
   only (device code for CUDA) defines ROLE_FN first. */
#ifndef ROLE_FN
#define ROLE_FN BAND_FN
#endif

/* Gather worker g: its share of this rank's rows of every band, then (worker
   0) the band's AllGather, one queued behind the one in flight. */
ROLE_FN int role_gather_bands(const moe_ctx_t *x, int g)
{
    uint64_t prev = 0; /* ticket of the AllGather still in flight */
    for (size_t j = 0; j < x->nb; j++) {
        band_t b = band_get(x->tmax, x->nb, j);
        band_t own = {b.start, band_valid_rows(b, x->counts[x->rank])};
        prim_pack_rows(x, band_split(own, (size_t)x->G, (size_t)g));
        prim_publish(x, &x->cnt->gather_copied[g], x->band_base + j + 1);
        if (g != 0)
            continue;
        for (int g2 = 1; g2 < x->G; g2++) {
            incmoe_status_t st = prim_wait_geq(x, &x->cnt->gather_copied[g2], x->band_base + j + 1);
            if (st != INCMOE_OK) {
                prim_abort(x, st, MOE_FAIL_GATHER_COPY, j);
                return -1;
            }
        }
        incmoe_fifo_trigger_t t;
        uint64_t ticket = 0;
        plan_ag_trigger(x, b, &t);
        incmoe_status_t st = prim_post(x, &t, &ticket);
        if (st != INCMOE_OK) {
            prim_abort(x, st, MOE_FAIL_AG_POST, j);
            return -1;
        }
        /* Keep one AllGather queued behind the one in flight, so the receive
           direction never idles while a completion travels back. */
        if (j > 0) {
            st = prim_wait_ticket(x, INCMOE_STREAM_ALLGATHER, prev);
            if (st != INCMOE_OK) {
                prim_abort(x, st, MOE_FAIL_AG, j - 1);
                return -1;
            }
            prim_publish(x, &x->cnt->ag_ready, x->band_base + j);
        }
        prev = ticket;
    }
    if (g == 0 && x->nb > 0) {
        incmoe_status_t st = prim_wait_ticket(x, INCMOE_STREAM_ALLGATHER, prev);
        if (st != INCMOE_OK) {
            prim_abort(x, st, MOE_FAIL_AG, x->nb - 1);
            return -1;
        }
        prim_publish(x, &x->cnt->ag_ready, x->band_base + x->nb);
    }
    return 0;
}

/* Compute worker c: its share of every band's rows, once the band arrived. */
ROLE_FN void role_compute(const moe_ctx_t *x, int c)
{
    const size_t C = (size_t)x->C;
    for (size_t j = 0; j < x->nb; j++) {
        incmoe_status_t st = prim_wait_geq(x, &x->cnt->ag_ready, x->band_base + j + 1);
        if (st != INCMOE_OK) {
            prim_abort(x, st, MOE_FAIL_WAIT_AG, j);
            return;
        }
        band_t b = band_get(x->tmax, x->nb, j);
        size_t n = plan_band_rows(x, b);
        size_t first = n * (size_t)c / C, last = n * ((size_t)c + 1) / C;
        prim_ffn_rows(x, c, b, first, last - first);
        prim_publish(x, &x->cnt->compute_done[c], x->band_base + j + 1);
    }
}

/* A ReduceScatter part posted and not yet reduced locally. */
typedef struct {
    int live;
    size_t band;
    band_t part;
    uint64_t ticket;
} rs_pending_t;

/* Barrier (worker 0) and the post of part q of band j's ReduceScatter. */
ROLE_FN int role_reduce_post(const moe_ctx_t *x, size_t j, int q, rs_pending_t *out)
{
    moe_counters_t *k = x->cnt;
    uint64_t bandc = x->band_base + j + 1;
    incmoe_status_t st;
    if (q == 0) {
        for (int c = 0; c < x->C; c++) {
            if ((st = prim_wait_geq(x, &k->compute_done[c], bandc)) != INCMOE_OK) {
                prim_abort(x, st, MOE_FAIL_WAIT_FFN, j);
                return -1;
            }
        }
        /* Cross-rank band barrier: no rank's ReduceScatter of band j starts
           before every rank has written its partials of band j. */
        if (x->pipelined) {
            incmoe_fifo_trigger_t t;
            uint64_t ticket = 0;
            plan_barrier_trigger(&t);
            st = prim_post(x, &t, &ticket);
            if (st == INCMOE_OK)
                st = prim_wait_ticket(x, INCMOE_STREAM_BARRIER, ticket);
            if (st != INCMOE_OK) {
                prim_abort(x, st, MOE_FAIL_BARRIER, j);
                return -1;
            }
        }
        prim_publish(x, &k->barrier_done, bandc);
    } else if ((st = prim_wait_geq(x, &k->barrier_done, bandc)) != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_WAIT_BARRIER, j);
        return -1;
    }
    band_t b = band_get(x->tmax, x->nb, j);
    band_t part = band_split(b, plan_rs_parts(x, j), (size_t)q);
    uint64_t turn = x->rs_base + plan_rs_parts_before(x, j) + (uint64_t)q;
    if ((st = prim_wait_geq(x, &k->rs_turn, turn)) != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_WAIT_RS_TURN, j);
        return -1;
    }
    incmoe_fifo_trigger_t t;
    plan_rs_trigger(x, part, &t);
    st = prim_post(x, &t, &out->ticket);
    prim_publish(x, &k->rs_turn, turn + 1);
    if (st != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_RS_POST, j);
        return -1;
    }
    out->live = 1;
    out->band = j;
    out->part = part;
    return 0;
}

/* Waits for a posted part and does the root's local reduction of its rows. */
ROLE_FN int role_reduce_finish(const moe_ctx_t *x, rs_pending_t *pd)
{
    if (!pd->live)
        return 0;
    pd->live = 0;
    incmoe_status_t st = prim_wait_ticket(x, INCMOE_STREAM_REDUCESCATTER, pd->ticket);
    if (st != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_RS, pd->band);
        return -1;
    }
    if (x->pipelined)
        prim_local_reduce(x, pd->part);
    return 0;
}

/* Reduce worker q's share of bands from..nb-1: the band barrier (worker 0),
   its ReduceScatter parts, the root's local reduction; 0, or -1 once aborted. */
ROLE_FN int role_reduce_bands(const moe_ctx_t *x, size_t from, int q)
{
    rs_pending_t pend = {0, 0, {0, 0}, 0};
    /* Post band j before finishing band j-1, so the send direction does not
       idle while a completion travels back (and worker 0's barrier for band j
       overlaps band j-1's ReduceScatter). */
    for (size_t j = from; j < x->nb; j++) {
        rs_pending_t cur = {0, 0, {0, 0}, 0};
        if (role_reduce_post(x, j, q, &cur) != 0 || role_reduce_finish(x, &pend) != 0)
            return -1;
        pend = cur;
    }
    return role_reduce_finish(x, &pend);
}

/* Gather worker g, then tail assistance: it joins the reduction of the last bands. */
ROLE_FN void role_gather(const moe_ctx_t *x, int g)
{
    if (role_gather_bands(x, g) == 0 && x->tail > 0)
        role_reduce_bands(x, plan_tail_from(x), x->R + g);
}

ROLE_FN void role_reduce(const moe_ctx_t *x, int q)
{
    role_reduce_bands(x, 0, q);
}

#endif
