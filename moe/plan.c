/*
 * plan.c - the host's half of the plan: expert ownership and the per-forward
 * layout the role loops read from the context (their half is plan.h).
 */
#include <stdlib.h>

#include "base/hash.h"
#include "layer.h"
#include "plan.h"

int plan_owner(const int *placement, int E, int N, int e)
{
    return placement ? placement[e] : e / (E / N);
}

incmoe_status_t plan_place_experts(incmoe_moe_t *L, const int *placement)
{
    L->local_ids = malloc((size_t)L->E * sizeof(int));
    if (L->local_ids == NULL)
        return INCMOE_ERR_NO_MEMORY;
    uint64_t h = 1469598103934665603ull;
    for (int e = 0; e < L->E; e++) {
        int owner = plan_owner(placement, L->E, L->N, e);
        h = inc_fnv1a(h, &owner, sizeof(owner));
        if (owner == L->rank)
            L->local_ids[L->n_local++] = e;
    }
    L->placement_hash = h;
    return INCMOE_OK;
}

void plan_forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, const incmoe_moe_config_t *cfg,
                  size_t tmax, const int *counts, const void *x, const int32_t *ids, const float *w)
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
    c->G = cfg->gather_workers;
    c->C = cfg->compute_workers;
    c->R = cfg->reduce_workers;
    c->tail = cfg->tail_bands;
    c->tmax = tmax;
    c->nb = (size_t)cfg->nbands;
    c->counts = L->counts;
    c->valid_g = L->valid_g;
    c->valid_z = L->valid_z;
    c->x = x;
    c->ids = ids;
    c->w = w;
    c->band_base = L->band_total;
    c->rs_base = L->rs_total;
    c->timeout_ms = L->timeout_ms;
}

void plan_retire(incmoe_moe_t *L)
{
    L->band_total += L->ctx.nb;
    L->rs_total += plan_rs_parts_before(&L->ctx, L->ctx.nb);
}
