/*
 * decode.c - the CPU backend's part of the decode step (moe/decode.h): this
 * rank's rows packed as a masked forward packs them, and the experts on the
 * rows received, through the same FFN as a band (ffn.c).
 */
#include "layer.h"

#include "cpu/prims.h"

/* Below this many flops the experts run on the calling thread: waking the compute team costs
   tens of microseconds, about what one thread computes of a small step in that time (the
   INCMOE_MOE_GFLOPS default, 20 per worker, puts 2 Mflop at 100 us). */
#define DECODE_TEAM_FLOPS 2e6

void cpu_decode_pack(incmoe_moe_t *L)
{
    const moe_ctx_t *x = &L->ctx;
    prim_pack_rows(x, (band_t){0, x->counts[x->rank]});
}

incmoe_status_t cpu_decode_experts(incmoe_moe_t *L)
{
    moe_ctx_t *x = &L->ctx;
    cpu_state_t *cs = L->be;
    size_t R = (size_t)x->dcb[0].nrecv;
    if (R == 0)
        return INCMOE_OK;
    double flops = (double)R * cs->team.kk * 6.0 * L->H * L->I;
    if (flops < DECODE_TEAM_FLOPS)
        x->C = 1;
    incmoe_status_t st = ffn_scratch_reserve(cs, x->C);
    if (st != INCMOE_OK)
        return st;
    ffn_team_reset(cs);
    if (x->C == 1)
        return ffn_band(x, cs, 0, 0, band_get(x->tmax, 1, 0));
    /* The team's workers start on the band's arrival, which this thread saw. */
    prim_publish(x, &x->cnt->ag_ready, x->band_base + 1);
    if ((st = cpu_pool_run(cs->pool, 0)) != INCMOE_OK)
        return st;
    return (incmoe_status_t)incmoe_atomic_load_acquire32(&x->cnt->abort);
}
