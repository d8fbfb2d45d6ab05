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

/* Rows in band b over all blocks (the compute roles' work list). */
BAND_FN size_t plan_band_rows(const moe_ctx_t *x, band_t b)
{
    size_t n = 0;
    for (int s = 0; s < x->N; s++)
        n += band_valid_rows(b, x->counts[s]);
    return n;
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
