/*
 * roles.c - the band pipeline of paper Algorithm 1, one loop per role.
 *
 * Written once over sync.h's counters and the FIFO's triggers so a GPU
 * backend can run the same loops in thread blocks.  Rules every loop keeps:
 * - band boundaries come only from band_get (band.h);
 * - counters only increase; a threshold is this forward's base plus the band;
 * - an empty band, or a band with no rows for a local expert, still advances
 *   every counter and posts every collective (with zero bytes where a rank
 *   has no rows), so ranks and workers never disagree on a count;
 * - each collective stream has one poster at a time, in band order: the
 *   AllGather from gather worker 0, the barrier from reduce worker 0, the
 *   ReduceScatter parts from the reduce workers in turn (the rs_turn ticket).
 */
#include "layer.h"

#include <string.h>

#include "elem.h"
#include "base/log.h"

#define SUBSYS "moe"

size_t band_total_rows(const incmoe_moe_t *L, band_t b)
{
    size_t n = 0;
    for (int s = 0; s < L->N; s++)
        n += band_valid_rows(b, L->plan.counts[s]);
    return n;
}

static int fail(incmoe_moe_t *L, incmoe_status_t st, const char *what, size_t band)
{
    if (atomic_load(&L->abort) == 0 && st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: %s of band %zu failed: %s (%s)", L->rank, what, band,
                  incmoe_strerror(st), why);
    }
    sync_abort(&L->abort, st);
    return -1;
}

static int wait_geq(incmoe_moe_t *L, const sync_counter_t *c, uint64_t target, const char *what,
                    size_t band)
{
    incmoe_status_t st = sync_wait_geq(c, target, &L->abort, L->timeout_ms);
    return st == INCMOE_OK ? 0 : fail(L, st, what, band);
}

static incmoe_status_t push(incmoe_moe_t *L, const incmoe_fifo_trigger_t *t, uint64_t *ticket)
{
    return incmoe_fifo_push(L->fifo, t, ticket, L->timeout_ms);
}

/* The AllGather of band b: own rows in place in block `rank`, everyone's into X^. */
void moe_ag_trigger(const incmoe_moe_t *L, band_t b, incmoe_fifo_trigger_t *t)
{
    const moe_plan_t *p = &L->plan;
    size_t stride = p->tmax * L->grow;
    memset(t, 0, sizeof(*t));
    t->desc.op = INCMOE_FIFO_OP_ALLGATHER;
    t->desc.send_mr = (uint64_t)(uintptr_t)L->xg_mr;
    t->desc.send_offset = (size_t)L->rank * stride + b.start * L->grow;
    t->desc.recv_mr = (uint64_t)(uintptr_t)L->xg_mr;
    t->desc.recv_offset = 0;
    t->desc.block_stride = stride;
    t->desc.offset = b.start * L->grow;
    t->desc.length = b.rows * L->grow;
    t->valid = p->valid_g;
}

/* The ReduceScatter of rows b of every block of Z; this rank's rows reduced in place. */
void moe_rs_trigger(const incmoe_moe_t *L, band_t b, incmoe_fifo_trigger_t *t)
{
    const moe_plan_t *p = &L->plan;
    size_t stride = p->tmax * L->zrow;
    memset(t, 0, sizeof(*t));
    t->desc.op = INCMOE_FIFO_OP_REDUCESCATTER;
    t->desc.dtype = (uint16_t)L->dtype;
    t->desc.redop = (uint16_t)INCMOE_SUM;
    t->desc.send_mr = (uint64_t)(uintptr_t)L->z_mr;
    t->desc.send_offset = 0;
    t->desc.recv_mr = (uint64_t)(uintptr_t)L->z_mr;
    t->desc.recv_offset = (size_t)L->rank * stride + b.start * L->zrow;
    t->desc.block_stride = stride;
    t->desc.offset = b.start * L->zrow;
    t->desc.length = b.rows * L->zrow;
    t->valid = p->valid_z;
}

/* Copies this rank's rows [b.start, +b.rows) into its gather block: hidden
   state, then the routing (ids, weights) the other ranks need. */
void moe_pack_rows(incmoe_moe_t *L, band_t b)
{
    const moe_plan_t *p = &L->plan;
    size_t hb = (size_t)L->H * L->esize, kb = (size_t)L->k * 4;
    for (size_t t = b.start; t < b.start + b.rows; t++) {
        uint8_t *dst = xg_row(L, L->rank, t);
        memcpy(dst, (const uint8_t *)p->x + t * hb, hb);
        memcpy(dst + hb, p->ids + t * L->k, kb);
        memcpy(dst + hb + kb, p->w + t * L->k, kb);
    }
}

static size_t tail_from(const moe_plan_t *p)
{
    return p->nb - (size_t)p->cfg.tail_bands;
}

/* ReduceScatter parts posted before band j in this forward. */
static uint64_t rs_parts_before(const moe_plan_t *p, size_t j)
{
    size_t t0 = tail_from(p);
    uint64_t n = (uint64_t)j * (uint64_t)p->cfg.reduce_workers;
    if (j > t0)
        n += (uint64_t)(j - t0) * (uint64_t)p->cfg.gather_workers;
    return n;
}

static size_t rs_parts(const moe_plan_t *p, size_t j)
{
    return (size_t)p->cfg.reduce_workers + (j >= tail_from(p) ? (size_t)p->cfg.gather_workers : 0);
}

void role_gather(incmoe_moe_t *L, int g)
{
    const moe_plan_t *p = &L->plan;
    const int G = p->cfg.gather_workers;
    uint64_t prev = 0; /* ticket of the AllGather still in flight */
    for (size_t j = 0; j < p->nb; j++) {
        band_t b = band_get(p->tmax, p->nb, j);
        band_t own = {b.start, band_valid_rows(b, p->counts[L->rank])};
        moe_pack_rows(L, band_split(own, (size_t)G, (size_t)g));
        sync_publish(&L->gather_copied[g], p->band_base + j + 1);
        if (g != 0)
            continue;
        for (int g2 = 1; g2 < G; g2++)
            if (wait_geq(L, &L->gather_copied[g2], p->band_base + j + 1, "gather copy", j) != 0)
                return;
        incmoe_fifo_trigger_t t;
        uint64_t ticket;
        moe_ag_trigger(L, b, &t);
        incmoe_status_t st = push(L, &t, &ticket);
        if (st != INCMOE_OK) {
            fail(L, st, "AllGather post", j);
            return;
        }
        /* Keep one AllGather queued behind the one in flight, so the receive
           direction never idles while a completion travels back. */
        if (j > 0) {
            st = incmoe_fifo_wait(L->fifo, INCMOE_STREAM_ALLGATHER, prev, L->timeout_ms);
            if (st != INCMOE_OK) {
                fail(L, st, "AllGather", j - 1);
                return;
            }
            sync_publish(&L->ag_ready, p->band_base + j);
        }
        prev = ticket;
    }
    if (g == 0 && p->nb > 0) {
        incmoe_status_t st =
            incmoe_fifo_wait(L->fifo, INCMOE_STREAM_ALLGATHER, prev, L->timeout_ms);
        if (st != INCMOE_OK) {
            fail(L, st, "AllGather", p->nb - 1);
            return;
        }
        sync_publish(&L->ag_ready, p->band_base + p->nb);
    }
    /* Tail assistance: join the reduction of the last bands. */
    if (p->cfg.tail_bands > 0)
        moe_reduce_bands(L, tail_from(p), p->cfg.reduce_workers + g);
}

void role_compute(incmoe_moe_t *L, int c)
{
    const moe_plan_t *p = &L->plan;
    const size_t C = (size_t)p->cfg.compute_workers;
    for (size_t j = 0; j < p->nb; j++) {
        if (wait_geq(L, &L->ag_ready, p->band_base + j + 1, "wait for AllGather", j) != 0)
            return;
        band_t b = band_get(p->tmax, p->nb, j);
        size_t n = band_total_rows(L, b);
        size_t first = n * (size_t)c / C, last = n * ((size_t)c + 1) / C;
        ffn_band_rows(L, &L->scratch[c], b, first, last - first);
        sync_publish(&L->compute_done[c], p->band_base + j + 1);
    }
}

/* The root's local reduction: own rows of part += own partial (fp32), in place in Z. */
static void local_reduce(incmoe_moe_t *L, band_t part)
{
    const moe_plan_t *p = &L->plan;
    size_t rows = band_valid_rows(part, p->counts[L->rank]);
    for (size_t t = part.start; t < part.start + rows; t++)
        elem_add_float(z_row(L, L->rank, t), L->own + t * (size_t)L->H, (size_t)L->H, L->dtype);
}

/* A ReduceScatter part posted and not yet reduced locally. */
typedef struct {
    int live;
    size_t band;
    band_t part;
    uint64_t ticket;
} rs_pending_t;

/* Barrier (worker 0) and the post of part q of band j's ReduceScatter. */
static int reduce_post(incmoe_moe_t *L, size_t j, int q, rs_pending_t *out)
{
    const moe_plan_t *p = &L->plan;
    uint64_t bandc = p->band_base + j + 1;
    if (q == 0) {
        for (int c = 0; c < p->cfg.compute_workers; c++)
            if (wait_geq(L, &L->compute_done[c], bandc, "wait for expert FFNs", j) != 0)
                return -1;
        /* Cross-rank band barrier: no rank's ReduceScatter of band j starts
           before every rank has written its partials of band j. */
        incmoe_fifo_trigger_t t;
        uint64_t ticket;
        memset(&t, 0, sizeof(t));
        t.desc.op = INCMOE_FIFO_OP_BARRIER;
        incmoe_status_t st = push(L, &t, &ticket);
        if (st == INCMOE_OK)
            st = incmoe_fifo_wait(L->fifo, INCMOE_STREAM_BARRIER, ticket, L->timeout_ms);
        if (st != INCMOE_OK)
            return fail(L, st, "band barrier", j);
        sync_publish(&L->barrier_done, bandc);
    } else if (wait_geq(L, &L->barrier_done, bandc, "wait for band barrier", j) != 0) {
        return -1;
    }
    band_t b = band_get(p->tmax, p->nb, j);
    band_t part = band_split(b, rs_parts(p, j), (size_t)q);
    uint64_t turn = p->rs_base + rs_parts_before(p, j) + (uint64_t)q;
    if (wait_geq(L, &L->rs_turn, turn, "wait for ReduceScatter turn", j) != 0)
        return -1;
    incmoe_fifo_trigger_t t;
    moe_rs_trigger(L, part, &t);
    incmoe_status_t st = push(L, &t, &out->ticket);
    sync_publish(&L->rs_turn, turn + 1);
    if (st != INCMOE_OK)
        return fail(L, st, "ReduceScatter post", j);
    out->live = 1;
    out->band = j;
    out->part = part;
    return 0;
}

/* Waits for a posted part and does the root's local reduction of its rows. */
static int reduce_finish(incmoe_moe_t *L, rs_pending_t *pd)
{
    if (!pd->live)
        return 0;
    pd->live = 0;
    incmoe_status_t st =
        incmoe_fifo_wait(L->fifo, INCMOE_STREAM_REDUCESCATTER, pd->ticket, L->timeout_ms);
    if (st != INCMOE_OK)
        return fail(L, st, "ReduceScatter", pd->band);
    local_reduce(L, pd->part);
    return 0;
}

int moe_reduce_bands(incmoe_moe_t *L, size_t from, int q)
{
    const moe_plan_t *p = &L->plan;
    rs_pending_t pend = {0};
    /* Post band j before finishing band j-1, so the send direction does not
       idle while a completion travels back (and worker 0's barrier for band j
       overlaps band j-1's ReduceScatter). */
    for (size_t j = from; j < p->nb; j++) {
        rs_pending_t cur = {0};
        if (reduce_post(L, j, q, &cur) != 0 || reduce_finish(L, &pend) != 0)
            return -1;
        pend = cur;
    }
    return reduce_finish(L, &pend);
}

void role_reduce(incmoe_moe_t *L, int q)
{
    moe_reduce_bands(L, 0, q);
}
