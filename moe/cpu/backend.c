/*
 * backend.c - the CPU backend: weights and buffers in host memory, the role
 * loops on the threads of pool.c, the FFN on OpenBLAS (ffn.c, gemm.c).
 *
 * Baseline mode runs the same loops with one band: the gather and reduce
 * roles on the calling thread around the compute workers, so the phases can
 * be timed one after the other.
 */
#include <stdlib.h>
#include <string.h>

#include "layer.h"

#include "base/clock.h"
#include "cpu/prims.h"

#define FIFO_SLOTS 256

/* The registrations of the buffers with one communicator and a FIFO on it: what a path on
   that communicator needs (backend.h, lane_open). */
typedef struct cpu_lane {
    incmoe_comm_t *comm;
    incmoe_fifo_t *fifo;
    incmoe_mr_t *xg_mr, *z_mr, *xs_mr, *zo_mr;
} cpu_lane_t;

static size_t cpu_tokens(const incmoe_moe_t *L)
{
    return L->max_tokens > 0 ? L->max_tokens : 1;
}

static incmoe_status_t cpu_lane_close(incmoe_moe_t *L, void *lane)
{
    (void)L;
    cpu_lane_t *l = lane;
    if (l == NULL)
        return INCMOE_OK;
    incmoe_status_t st = l->fifo ? incmoe_fifo_destroy(l->fifo) : INCMOE_OK;
    incmoe_mr_t *mrs[] = {l->xg_mr, l->z_mr, l->xs_mr, l->zo_mr};
    for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
        if (mrs[i] != NULL)
            incmoe_mem_deregister(l->comm, mrs[i]);
    free(l);
    return st;
}

static incmoe_status_t cpu_lane_open(incmoe_moe_t *L, incmoe_comm_t *comm, void **lane_p)
{
    cpu_state_t *cs = L->be;
    cpu_lane_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return INCMOE_ERR_NO_MEMORY;
    l->comm = comm;
    size_t tokens = cpu_tokens(L), rows = (size_t)L->N * tokens;
    incmoe_status_t st;
    if ((st = incmoe_mem_register(comm, cs->xg, rows * L->grow, &l->xg_mr)) != INCMOE_OK ||
        (st = incmoe_mem_register(comm, cs->z, rows * L->zrow, &l->z_mr)) != INCMOE_OK ||
        (st = incmoe_mem_register(comm, cs->xs, tokens * L->grow, &l->xs_mr)) != INCMOE_OK ||
        (st = incmoe_mem_register(comm, cs->zo, tokens * L->zrow, &l->zo_mr)) != INCMOE_OK ||
        (st = incmoe_fifo_create(comm, FIFO_SLOTS, &l->fifo)) != INCMOE_OK) {
        cpu_lane_close(L, l);
        return st;
    }
    *lane_p = l;
    return INCMOE_OK;
}

static void cpu_lane_use(incmoe_moe_t *L, void *lane)
{
    cpu_state_t *cs = L->be;
    const cpu_lane_t *l = lane != NULL ? lane : cs->home;
    moe_ctx_t *x = &L->ctx;
    x->xg_mr = (uint64_t)(uintptr_t)l->xg_mr;
    x->z_mr = (uint64_t)(uintptr_t)l->z_mr;
    x->xs_mr = (uint64_t)(uintptr_t)l->xs_mr;
    x->zo_mr = (uint64_t)(uintptr_t)l->zo_mr;
    incmoe_fifo_device(l->fifo, &x->fifo);
    x->host_fifo = l->fifo;
}

static incmoe_status_t cpu_create(incmoe_moe_t *L, const incmoe_moe_params_t *p)
{
    cpu_state_t *cs = calloc(1, sizeof(*cs));
    if (cs == NULL)
        return INCMOE_ERR_NO_MEMORY;
    L->be = cs;
    cs->H = L->H;
    cs->I = L->I;
    cs->n_local = L->n_local;
    cs->local_ids = L->local_ids;
    incmoe_status_t st = ffn_weights_load(cs, p, L->esize);
    if (st != INCMOE_OK)
        return st;
    size_t tokens = cpu_tokens(L);
    size_t rows = (size_t)L->N * tokens;
    if ((st = ffn_team_create(cs, L->E, L->slots, L->owner, L->rank, L->k, rows)) != INCMOE_OK)
        return st;
    size_t gsize = rows * L->grow, zsize = rows * L->zrow;
    size_t words = INCMOE_SET_WORDS(L->N);
    cs->xg = aligned_alloc(64, (gsize + 63) & ~(size_t)63);
    cs->z = aligned_alloc(64, (zsize + 63) & ~(size_t)63);
    cs->own = malloc(tokens * (size_t)L->H * sizeof(float));
    cs->xs = calloc(tokens, L->grow);
    cs->zo = calloc(tokens, L->zrow);
    cs->sets = calloc(tokens * words, sizeof(uint64_t));
    cs->dcb = calloc(INCMOE_MOE_MAX_BANDS, sizeof(incmoe_fifo_dispatch_t));
    cs->src = calloc(rows * 2, sizeof(uint32_t));
    const size_t ids = (size_t)L->E * (size_t)L->slots; /* wire ids (replica_plan.h) */
    cs->owner = malloc(ids * sizeof(int32_t));
    if (cs->xg == NULL || cs->z == NULL || cs->own == NULL || cs->xs == NULL || cs->zo == NULL ||
        cs->sets == NULL || cs->dcb == NULL || cs->src == NULL || cs->owner == NULL)
        return INCMOE_ERR_NO_MEMORY;
    memset(cs->xg, 0, gsize);
    memset(cs->z, 0, zsize);
    memcpy(cs->owner, L->owner, ids * sizeof(int32_t));
    void *home;
    if ((st = cpu_lane_open(L, L->comm, &home)) != INCMOE_OK)
        return st;
    cs->home = home;
    moe_ctx_t *x = &L->ctx;
    x->xg = cs->xg;
    x->z = cs->z;
    x->own = cs->own;
    x->E = L->E;
    x->words = words;
    x->owner = cs->owner;
    x->xs = cs->xs;
    x->sets = cs->sets;
    x->zo = cs->zo;
    x->dcb = cs->dcb;
    x->dcb_host = (uint64_t)(uintptr_t)cs->dcb;
    x->sets_host = (uint64_t)(uintptr_t)cs->sets;
    x->src = cs->src;
    x->src_host = (uint64_t)(uintptr_t)cs->src;
    x->cnt = &cs->cnt;
    cpu_lane_use(L, NULL);
    x->be = cs;
    return cpu_pool_create(x, &cs->pool);
}

static incmoe_status_t cpu_destroy(incmoe_moe_t *L)
{
    cpu_state_t *cs = L->be;
    if (cs == NULL)
        return INCMOE_OK;
    cpu_pool_destroy(cs->pool);
    incmoe_status_t st = cpu_lane_close(L, cs->home);
    ffn_team_destroy(cs);
    free(cs->xg);
    free(cs->z);
    free(cs->own);
    free(cs->xs);
    free(cs->zo);
    free(cs->sets);
    free(cs->dcb);
    free(cs->src);
    free(cs->owner);
    free(cs->w_gu);
    free(cs->w_down);
    free(cs);
    L->be = NULL;
    return st;
}

static incmoe_status_t cpu_forward_baseline(incmoe_moe_t *L)
{
    const moe_ctx_t *x = &L->ctx;
    cpu_state_t *cs = L->be;
    double t0 = inc_now_ms();
    role_gather(x, 0);
    double t1 = inc_now_ms();
    incmoe_status_t st = cpu_pool_run(cs->pool, 0);
    if (st != INCMOE_OK)
        return st;
    double t2 = inc_now_ms();
    role_reduce(x, 0);
    double t3 = inc_now_ms();
    *(x->masked ? &L->timing.dispatch_ms : &L->timing.allgather_ms) = t1 - t0;
    L->timing.ffn_ms = t2 - t1;
    *(x->masked ? &L->timing.combine_ms : &L->timing.reducescatter_ms) = t3 - t2;
    return INCMOE_OK;
}

static incmoe_status_t cpu_forward(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f)
{
    (void)f;
    const moe_ctx_t *x = &L->ctx;
    cpu_state_t *cs = L->be;
    incmoe_status_t st = ffn_scratch_reserve(cs, x->C);
    if (st != INCMOE_OK)
        return st;
    ffn_team_reset(cs);
    if (!x->pipelined)
        return cpu_forward_baseline(L);
    /* This rank's block of Z is what it contributes to its own shard: zero,
       since its own partial waits in x->own for the local reduction (a
       combine adds the own partial itself). */
    if (!x->masked)
        memset(z_row(x, (size_t)x->rank, 0), 0, x->counts[x->rank] * x->zrow);
    return cpu_pool_run(cs->pool, 1);
}

static incmoe_status_t cpu_ffn_probe(incmoe_moe_t *L, double *flop_s_p, double *pass_s_p)
{
    return ffn_probe(L->be, flop_s_p, pass_s_p);
}

const moe_backend_ops_t moe_cpu_backend = {.name = "cpu",
                                           .create = cpu_create,
                                           .forward = cpu_forward,
                                           .destroy = cpu_destroy,
                                           .lane_open = cpu_lane_open,
                                           .lane_use = cpu_lane_use,
                                           .lane_close = cpu_lane_close,
                                           .decode_pack = cpu_decode_pack,
                                           .decode_experts = cpu_decode_experts,
                                           .ffn_probe = cpu_ffn_probe};
