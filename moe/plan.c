/*
 * plan.c - the host's half of the plan: expert ownership and the per-forward
 * layout the role loops read from the context (their half is plan.h).
 */
#include "plan.h"

#include <stdlib.h>

#include "layer.h"

#include "base/config.h"
#include "base/hash.h"
#include "base/wire.h"

int plan_owner(const int *placement, int E, int N, int e)
{
    return placement ? placement[e] : e / (E / N);
}

/* Expert e's replicas into L->owner (wire ids e + E * slot), and e into the local ids if
   this rank holds one; the placement's hash continued with them. */
static uint64_t plan_place_replicas(incmoe_moe_t *L, int e, uint64_t h)
{
    const incmoe_moe_placement_t *p = &L->placement;
    int n = p->offsets[e + 1] - p->offsets[e];
    h = inc_fnv1a(h, &n, sizeof(n));
    for (int slot = 0; slot < n; slot++) {
        int r = p->ranks[p->offsets[e] + slot];
        h = inc_fnv1a(h, &r, sizeof(r));
        L->owner[e + L->E * slot] = r;
        if (r == L->rank)
            L->local_ids[L->n_local++] = e;
    }
    return h;
}

incmoe_status_t plan_place_experts(incmoe_moe_t *L, const int *placement)
{
    const size_t ids = (size_t)L->E * (size_t)L->slots;
    L->local_ids = malloc((size_t)L->E * sizeof(int));
    L->owner = malloc(ids * sizeof(int32_t));
    if (L->local_ids == NULL || L->owner == NULL)
        return INCMOE_ERR_NO_MEMORY;
    for (size_t id = 0; id < ids; id++)
        L->owner[id] = -1;
    uint64_t h = 1469598103934665603ull;
    for (int e = 0; e < L->E; e++) {
        if (L->placement.offsets != NULL) {
            h = plan_place_replicas(L, e, h);
            continue;
        }
        int owner = plan_owner(placement, L->E, L->N, e);
        h = inc_fnv1a(h, &owner, sizeof(owner));
        L->owner[e] = owner;
        if (owner == L->rank)
            L->local_ids[L->n_local++] = e;
    }
    L->placement_hash = h;
    return INCMOE_OK;
}

/*
 * Bands between two band barriers, or 0 when the forward needs none.
 *
 * No band needs a barrier for its data (roles.h), but the switch keeps only
 * INCMOE_WIRE_OPEN_EPOCHS epochs of a stream open past the oldest it has not
 * retired and fails the job on a later one.  A ReduceScatter part in which a
 * rank receives nothing completes on that rank without the others, so
 * nothing else bounds how many parts a fast rank posts ahead.  At the
 * forward's header exchange every rank had completed every earlier
 * collective; at a barrier before band j every rank had completed every part
 * of bands before j - MOE_MAX_DEPTH - 1 (a reduce worker finishes band i
 * before posting i + depth, and posts in turn).  So a fast rank is at most
 * (sync_every + MOE_MAX_DEPTH + 1) bands of parts ahead of what every rank
 * completed, which this keeps within half the window: the other half covers
 * what the switch has forwarded but not yet seen delivered.  The AllGathers
 * (at most INCMOE_MOE_MAX_BANDS + 1 a forward) always fit.  Only ranks' agreed
 * values enter, so every rank places the barriers alike.
 */
static size_t plan_sync_every(const moe_ctx_t *c)
{
    const uint64_t limit = INCMOE_WIRE_OPEN_EPOCHS / 2;
    const uint64_t per_band = (uint64_t)c->R + (uint64_t)c->G;
    if (!c->pipelined || plan_rs_parts_before(c, c->nb) <= limit)
        return 0;
    uint64_t k = limit / per_band;
    k = k > MOE_MAX_DEPTH + 2 ? k - MOE_MAX_DEPTH - 1 : 1;
    return (size_t)k;
}

/* INCMOE_MOE_DEPTH: collectives one poster keeps in flight (a setting out of range is
   logged and its default used). */
static int plan_depth(void)
{
    long long d;
    (void)inc_config_get_int("INCMOE_MOE_DEPTH", &d);
    return d < 1 ? 1 : d > MOE_MAX_DEPTH ? MOE_MAX_DEPTH : (int)d;
}

/* Masked routing: band j's dispatch block names the sets of its rows; R and the source table
   (at the band's received rows) come back in it. */
static void plan_dispatch_blocks(moe_ctx_t *c)
{
    incmoe_fifo_dispatch_t *dcb = (incmoe_fifo_dispatch_t *)(uintptr_t)c->dcb_host;
    for (size_t j = 0; j < c->nb; j++) {
        band_t b = band_get(c->tmax, c->nb, j);
        dcb[j] = (incmoe_fifo_dispatch_t){
            .sets = (const uint64_t *)(uintptr_t)c->sets_host + b.start * c->words,
            .source = (uint32_t *)(uintptr_t)c->src_host + 2 * (size_t)c->N * b.start,
            .source_rows = plan_band_rows(c, b)};
    }
}

void plan_forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, int masked,
                  const incmoe_moe_config_t *cfg, size_t tmax, const int *counts, const void *x,
                  const int32_t *ids, const float *w)
{
    moe_ctx_t *c = &L->ctx;
    L->cfg = *cfg;
    for (int s = 0; s < L->N; s++) {
        L->counts[s] = (size_t)counts[s];
        L->valid_g[s] = L->counts[s] * L->grow;
        L->valid_z[s] = L->counts[s] * L->zrow;
    }
    c->N = L->N;
    c->rank = L->rank;
    c->H = L->H;
    c->k = L->k;
    c->dtype = (int32_t)L->dtype;
    c->esize = L->esize;
    c->grow = L->grow;
    c->zrow = L->zrow;
    c->pipelined = mode == INCMOE_MOE_PIPELINED;
    c->masked = masked;
    c->G = cfg->gather_workers;
    c->C = cfg->compute_workers;
    c->R = cfg->reduce_workers;
    c->tail = cfg->tail_bands;
    c->tmax = tmax;
    c->nb = (size_t)cfg->nbands;
    c->depth = plan_depth();
    c->sync_every = plan_sync_every(c);
    c->counts = L->counts;
    c->valid_g = L->valid_g;
    c->valid_z = L->valid_z;
    c->x = x;
    c->ids = ids;
    c->w = w;
    c->band_base = L->band_total;
    c->rs_base = L->rs_total;
    c->dc_base = L->lanes[L->cur_lane].dc_total;
    c->timeout_ms = L->timeout_ms;
    c->region_rows = 0; /* decode.c's plan sets its own */
    if (masked)
        plan_dispatch_blocks(c);
}

void plan_retire(incmoe_moe_t *L)
{
    L->band_total += L->ctx.nb;
    L->rs_total += plan_rs_parts_before(&L->ctx, L->ctx.nb);
    if (L->ctx.masked)
        L->lanes[L->cur_lane].dc_total += L->ctx.nb;
}
