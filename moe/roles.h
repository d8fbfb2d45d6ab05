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
 *       (masked: into xs, with their destination sets)
 *   int prim_ffn_band(x, int c, size_t j, band_t b)
 *       compute worker c of x->C: its part of the local experts over band j's
 *       row list (masked: the received rows among them, plan.h), router-weighted,
 *       into Z (or x->own); how the workers share a band is the backend's (rows
 *       per worker on the GPU, the columns of every GEMM on the CPU); -1 once it
 *       called prim_abort
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
 * - masked routing swaps the AllGather for the band's dispatch and the
 *   ReduceScatter for its combine, one per band (a band's combine has one
 *   part: the plan runs one reduce worker and no tail), and leaves the own
 *   rows' reduction to the combine;
 * - a poster keeps at most x->depth of its collectives posted and not yet
 *   waited for, so a completion travelling back never idles its link while
 *   it still has data to send;
 * - a loop that fails calls prim_abort and returns; it never reports.
 *
 * No rank waits for the others between bands: what this rank receives for a
 * band lands only once it posted that band itself (in-network, the switch
 * forwards nothing of a collective before every rank posted it and holds the
 * early contributions within their credits; in the ring, chunks of a
 * collective this rank has not posted wait at the sender or in its pending
 * list), and it posts a band's ReduceScatter only after its own partials are
 * written.  What bounds a fast rank's lead is the switch's window of open
 * epochs; plan_band_syncs says when a band barrier keeps a long forward
 * inside it.
 *
 * Baseline mode is the same loops with one band, no band barrier and no
 * local reduction (its own rows go through the ReduceScatter like the
 * others'), so both modes post through the FIFO.  With masked routing the
 * baseline is dispatch, FFN, combine in sequence.
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
   0) the band's AllGather, up to x->depth of them in flight. */
ROLE_FN int role_gather_bands(const moe_ctx_t *x, int g)
{
    const size_t D = (size_t)x->depth;
    uint64_t tickets[MOE_MAX_DEPTH]; /* band i's AllGather: tickets[i % MOE_MAX_DEPTH] */
    for (size_t j = 0; j < x->nb + D - 1; j++) {
        if (j < x->nb) {
            band_t b = band_get(x->tmax, x->nb, j);
            band_t own = {b.start, band_valid_rows(b, x->counts[x->rank])};
            prim_pack_rows(x, band_split(own, (size_t)x->G, (size_t)g));
            prim_publish(x, &x->cnt->gather_copied[g], x->band_base + j + 1);
            if (g != 0)
                continue;
            for (int g2 = 1; g2 < x->G; g2++) {
                incmoe_status_t st =
                    prim_wait_geq(x, &x->cnt->gather_copied[g2], x->band_base + j + 1);
                if (st != INCMOE_OK) {
                    prim_abort(x, st, MOE_FAIL_GATHER_COPY, j);
                    return -1;
                }
            }
            incmoe_fifo_trigger_t t;
            if (x->masked)
                plan_dispatch_trigger(x, j, b, &t);
            else
                plan_ag_trigger(x, b, &t);
            incmoe_status_t st = prim_post(x, &t, &tickets[j % MOE_MAX_DEPTH]);
            if (st != INCMOE_OK) {
                prim_abort(x, st, MOE_FAIL_AG_POST, j);
                return -1;
            }
        } else if (g != 0) {
            break;
        }
        /* Band w = j - (D - 1) is waited for once D - 1 later ones are queued behind
           it, so the receive direction never idles while its completion travels back. */
        if (j + 1 < D)
            continue;
        size_t w = j + 1 - D;
        incmoe_status_t st =
            prim_wait_ticket(x, x->masked ? INCMOE_STREAM_DISPATCH : INCMOE_STREAM_ALLGATHER,
                             tickets[w % MOE_MAX_DEPTH]);
        /* A dispatch may fail alone (a rank short of capacity; the plan sizes the receive
           range so that none is). */
        if (st == INCMOE_OK && x->masked)
            st = (incmoe_status_t)x->dcb[w].status;
        if (st != INCMOE_OK) {
            prim_abort(x, st, MOE_FAIL_AG, w);
            return -1;
        }
        prim_publish(x, &x->cnt->ag_ready, x->band_base + w + 1);
    }
    return 0;
}

/* Compute worker c: its share of every band's rows, once the band arrived. */
ROLE_FN void role_compute(const moe_ctx_t *x, int c)
{
    for (size_t j = 0; j < x->nb; j++) {
        incmoe_status_t st = prim_wait_geq(x, &x->cnt->ag_ready, x->band_base + j + 1);
        if (st != INCMOE_OK) {
            prim_abort(x, st, MOE_FAIL_WAIT_AG, j);
            return;
        }
        if (prim_ffn_band(x, c, j, band_get(x->tmax, x->nb, j)) != 0)
            return;
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

/* Part q of band j's ReduceScatter, posted once every compute worker wrote
   the band (worker 0 checks and, where plan_band_syncs asks, first meets the
   other ranks at a barrier; the others wait for its word). */
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
        /* Not for correctness (see the top of this file): it keeps the epochs a
           fast rank posts ahead of the slowest within the switch's open window. */
        if (plan_band_syncs(x, j)) {
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
        prim_publish(x, &k->rs_ready, bandc);
    } else if ((st = prim_wait_geq(x, &k->rs_ready, bandc)) != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_WAIT_RS_READY, j);
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
    if (x->masked)
        plan_combine_trigger(x, j, b, &t);
    else
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
    incmoe_status_t st = prim_wait_ticket(
        x, x->masked ? INCMOE_STREAM_COMBINE : INCMOE_STREAM_REDUCESCATTER, pd->ticket);
    if (st != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_RS, pd->band);
        return -1;
    }
    if (x->pipelined && !x->masked)
        prim_local_reduce(x, pd->part);
    return 0;
}

/* Reduce worker q's share of bands from..nb-1: the band barrier where needed
   (worker 0), its ReduceScatter parts, up to x->depth in flight, and the
   root's local reduction of each once it completed; 0, or -1 once aborted. */
ROLE_FN int role_reduce_bands(const moe_ctx_t *x, size_t from, int q)
{
    const size_t D = (size_t)x->depth;
    rs_pending_t pend[MOE_MAX_DEPTH]; /* band i's part: pend[i % MOE_MAX_DEPTH] */
    for (size_t i = 0; i < MOE_MAX_DEPTH; i++)
        pend[i].live = 0;
    /* Band j is posted before band j - (D - 1) is finished, so the send
       direction does not idle while a completion travels back. */
    for (size_t j = from; j < x->nb + D - 1; j++) {
        if (j < x->nb && role_reduce_post(x, j, q, &pend[j % MOE_MAX_DEPTH]) != 0)
            return -1;
        if (j + 1 >= from + D && role_reduce_finish(x, &pend[(j + 1 - D) % MOE_MAX_DEPTH]) != 0)
            return -1;
    }
    return 0;
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
