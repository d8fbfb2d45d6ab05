/*
 * plan.h - the row layout and band arithmetic of one forward, in one place,
 * for the role loops on every backend (host and device functions).
 *
 * Every role on every rank derives band boundaries from band.h only; the
 * ReduceScatter parts of a band (reduce workers, plus gather workers in the
 * tail) are counted here only, by the loops and by the host alike.
 */
#ifndef INCMOE_MOE_PLAN_H
#define INCMOE_MOE_PLAN_H

#include "band.h"
#include "ctx.h"

/* Row r of gather block s / reduce block s. */
BAND_FN uint8_t *xg_row(const moe_ctx_t *x, size_t s, size_t r)
{
    return x->xg + (s * x->tmax + r) * x->grow;
}
BAND_FN uint8_t *z_row(const moe_ctx_t *x, size_t s, size_t r)
{
    return x->z + (s * x->tmax + r) * x->zrow;
}

/* Masked routing: the row of xg (and of z, its partial's) holding received row i of band b:
   the bulk form's band b from row N * b.start on, one after the other; the decode step's
   in its source's region (ctx.h: region_rows). */
BAND_FN size_t recv_at(const moe_ctx_t *x, band_t b, size_t i)
{
    if (x->region_rows == 0)
        return (size_t)x->N * b.start + i;
    uint32_t s = x->src[2 * i];
    return (size_t)s * x->region_rows + (i - x->region_first[s]);
}
BAND_FN uint8_t *recv_row(const moe_ctx_t *x, band_t b, size_t i)
{
    return x->xg + recv_at(x, b, i) * x->grow;
}
BAND_FN uint8_t *partial_row(const moe_ctx_t *x, band_t b, size_t i)
{
    return x->z + recv_at(x, b, i) * x->zrow;
}

/* The destination set of a token: the ranks hosting its k experts, set[0..words). */
BAND_FN void plan_token_set(const int32_t *owner, const int32_t *ids, int k, uint64_t *set,
                            size_t words)
{
    for (size_t w = 0; w < words; w++)
        set[w] = 0;
    for (int a = 0; a < k; a++) {
        int r = owner[ids[a]];
        set[r / 64] |= (uint64_t)1 << (r % 64);
    }
}

/* First band whose reduction the gather workers help with. */
BAND_FN size_t plan_tail_from(const moe_ctx_t *x)
{
    return x->nb - (size_t)x->tail;
}

/* ReduceScatter parts of band j. */
BAND_FN size_t plan_rs_parts(const moe_ctx_t *x, size_t j)
{
    return (size_t)x->R + (j >= plan_tail_from(x) ? (size_t)x->G : 0);
}

/* ReduceScatter parts posted before band j in this forward (j = nb: all). */
BAND_FN uint64_t plan_rs_parts_before(const moe_ctx_t *x, size_t j)
{
    size_t t0 = plan_tail_from(x);
    uint64_t n = (uint64_t)j * (uint64_t)x->R;
    if (j > t0)
        n += (uint64_t)(j - t0) * (uint64_t)x->G;
    return n;
}

/* Rows in band b over all blocks (full routing: the compute roles' work list; masked: the
   most a rank can receive of the band). */
BAND_FN size_t plan_band_rows(const moe_ctx_t *x, band_t b)
{
    size_t n = 0;
    for (int s = 0; s < x->N; s++)
        n += band_valid_rows(b, x->counts[s]);
    return n;
}

/*
 * Masked routing: the compute roles split band j by positions of the full
 * routing's row list (plan_band_rows: block after block) and take, of each
 * tile of positions, the rows this rank received.  Those are exactly the rows
 * of the tile routed to a local expert, so every expert's GEMM gets the same
 * rows, in the same order, as with full routing, and the outputs are bitwise
 * the same whatever the worker split.  Read once the band's dispatch
 * completed (its R and source table).
 */

/* The list position of received row i of band b (its source rank's block, then its row). */
BAND_FN size_t plan_recv_pos(const moe_ctx_t *x, band_t b, size_t i)
{
    const uint32_t *src = x->src + 2 * ((size_t)x->N * b.start + i);
    size_t pos = src[1]; /* the row within the source's dispatch of the band */
    for (uint32_t s = 0; s < src[0]; s++)
        pos += band_valid_rows(b, x->counts[s]);
    return pos;
}

/* The first received row of band j (of rows b) at list position p or later (R if none).
   The decode step's list is its received rows themselves (a row's result does not depend
   on the rows beside it, cpu/gemm.h), so it needs no other rank's count. */
BAND_FN size_t plan_recv_lower(const moe_ctx_t *x, size_t j, band_t b, size_t p)
{
    size_t lo = 0, hi = (size_t)x->dcb[j].nrecv;
    if (x->region_rows != 0)
        return p < hi ? p : hi;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (plan_recv_pos(x, b, mid) < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Positions of band j's row list (plan_band_rows; the decode step's: its received rows). */
BAND_FN size_t plan_list_rows(const moe_ctx_t *x, size_t j, band_t b)
{
    return x->region_rows != 0 ? (size_t)x->dcb[j].nrecv : plan_band_rows(x, b);
}

BAND_FN void plan_trigger_clear(incmoe_fifo_trigger_t *t)
{
    t->desc.op = 0;
    t->desc.dtype = 0;
    t->desc.redop = 0;
    t->desc.send_mr = t->desc.send_offset = 0;
    t->desc.recv_mr = t->desc.recv_offset = 0;
    t->desc.block_stride = t->desc.offset = t->desc.length = 0;
    t->valid = NULL;
}

/* The AllGather of band b: own rows in place in block `rank`, everyone's into X^. */
BAND_FN void plan_ag_trigger(const moe_ctx_t *x, band_t b, incmoe_fifo_trigger_t *t)
{
    size_t stride = x->tmax * x->grow;
    plan_trigger_clear(t);
    t->desc.op = INCMOE_FIFO_OP_ALLGATHER;
    t->desc.send_mr = x->xg_mr;
    t->desc.send_offset = (size_t)x->rank * stride + b.start * x->grow;
    t->desc.recv_mr = x->xg_mr;
    t->desc.recv_offset = 0;
    t->desc.block_stride = stride;
    t->desc.offset = b.start * x->grow;
    t->desc.length = b.rows * x->grow;
    t->valid = x->valid_g;
}

/* The ReduceScatter of rows b of every block of Z; this rank's rows reduced in place. */
BAND_FN void plan_rs_trigger(const moe_ctx_t *x, band_t b, incmoe_fifo_trigger_t *t)
{
    size_t stride = x->tmax * x->zrow;
    plan_trigger_clear(t);
    t->desc.op = INCMOE_FIFO_OP_REDUCESCATTER;
    t->desc.dtype = (uint16_t)x->dtype;
    t->desc.redop = (uint16_t)INCMOE_SUM;
    t->desc.send_mr = x->z_mr;
    t->desc.send_offset = 0;
    t->desc.recv_mr = x->z_mr;
    t->desc.recv_offset = (size_t)x->rank * stride + b.start * x->zrow;
    t->desc.block_stride = stride;
    t->desc.offset = b.start * x->zrow;
    t->desc.length = b.rows * x->zrow;
    t->valid = x->valid_z;
}

/* Band j's dispatch: this rank's rows of band b with their sets, into xg at the band's
   received rows, as many as every rank's rows of the band (so it never runs short). */
BAND_FN void plan_dispatch_trigger(const moe_ctx_t *x, size_t j, band_t b, incmoe_fifo_trigger_t *t)
{
    plan_trigger_clear(t);
    t->desc.op = INCMOE_FIFO_OP_DISPATCH;
    t->desc.send_mr = x->xs_mr;
    t->desc.send_offset = b.start * x->grow;
    t->desc.recv_mr = x->xg_mr;
    t->desc.recv_offset = (size_t)x->N * b.start * x->grow;
    t->desc.block_stride = x->grow;                          /* row bytes */
    t->desc.length = band_valid_rows(b, x->counts[x->rank]); /* rows */
    t->desc.offset = plan_band_rows(x, b);                   /* capacity */
    t->dispatch =
        (incmoe_fifo_dispatch_t *)(uintptr_t)(x->dcb_host + j * sizeof(incmoe_fifo_dispatch_t));
}

/* Band j's combine: the partials of its received rows back to their owners; this rank's
   outputs of the band into zo. */
BAND_FN void plan_combine_trigger(const moe_ctx_t *x, size_t j, band_t b, incmoe_fifo_trigger_t *t)
{
    plan_trigger_clear(t);
    t->desc.op = INCMOE_FIFO_OP_COMBINE;
    t->desc.dtype = (uint16_t)x->dtype;
    t->desc.redop = (uint16_t)INCMOE_SUM;
    t->desc.send_mr = x->z_mr;
    t->desc.send_offset = (size_t)x->N * b.start * x->zrow;
    t->desc.recv_mr = x->zo_mr;
    t->desc.recv_offset = b.start * x->zrow;
    t->desc.block_stride = (uint64_t)x->H; /* elements of a row */
    t->desc.offset = x->dc_base + j + 1;   /* the band's dispatch, by its ticket */
}

/* Whether band j's ReduceScatter waits for a barrier of every rank (ctx.h: sync_every). */
BAND_FN int plan_band_syncs(const moe_ctx_t *x, size_t j)
{
    return x->pipelined && x->sync_every > 0 && j > 0 && j % x->sync_every == 0;
}

/* The barrier between ranks before a band's ReduceScatter. */
BAND_FN void plan_barrier_trigger(incmoe_fifo_trigger_t *t)
{
    plan_trigger_clear(t);
    t->desc.op = INCMOE_FIFO_OP_BARRIER;
}

#endif
