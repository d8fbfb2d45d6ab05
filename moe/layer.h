/*
 * layer.h - the layer object shared by the role loops, the CPU backend and
 * the FFN (internal; the public API is api/incmoe_moe.h).
 */
#ifndef INCMOE_MOE_LAYER_H
#define INCMOE_MOE_LAYER_H

#include <stdint.h>

#include "api/incmoe_fifo.h"
#include "api/incmoe_moe.h"
#include "band.h"
#include "sync.h"

/* Bytes of one rank's block in the header exchange. */
#define MOE_HDR_BYTES 128

/* Rows of a band one FFN pass handles at a time (bounds the scratch memory). */
#define MOE_FFN_TILE_ROWS 512

/* Everything one forward needs, fixed before any worker starts. */
typedef struct {
    incmoe_moe_mode_t mode;
    incmoe_moe_config_t cfg; /* resolved: every field set */
    size_t tmax;             /* rows per block */
    size_t nb;               /* bands (1 in baseline mode) */
    size_t counts[INCMOE_MAX_RANKS];
    size_t valid_g[INCMOE_MAX_RANKS]; /* bytes of data per gather block */
    size_t valid_z[INCMOE_MAX_RANKS]; /* bytes of data per reduce block */
    const void *x;                    /* this rank's inputs */
    const int32_t *ids;
    const float *w;
    /* Bases of the never-reset counters at the start of this forward. */
    uint64_t band_base; /* bands finished by earlier forwards */
    uint64_t rs_base;   /* ReduceScatter parts posted by earlier forwards */
} moe_plan_t;

/* Scratch of one FFN worker (fp32). */
typedef struct {
    float *a;     /* [tile][H]  gathered rows of one expert */
    float *h;     /* [tile][2I] gate and up projections */
    float *act;   /* [tile][I]  SwiGLU */
    float *out;   /* [tile][H]  down projection */
    float *acc;   /* [tile][H]  weighted sum over local experts */
    int32_t *sel; /* [tile]     rows routed to the expert */
    float *selw;
} ffn_scratch_t;

typedef struct cpu_pool cpu_pool_t;

struct incmoe_moe {
    int E, k, H, I, N, rank;
    incmoe_dtype_t dtype;
    size_t esize;
    incmoe_comm_t *comm;
    size_t max_tokens;
    int timeout_ms;
    incmoe_moe_config_t override;
    uint64_t placement_hash;

    int n_local;
    int *local_ids;   /* [n_local] global ids, ascending */
    int *local_index; /* [E] local index or -1 */
    float *w_gu;      /* [n_local][2I][H]: gate rows then up rows, fp32 */
    float *w_down;    /* [n_local][H][I], fp32 */

    size_t grow;  /* bytes of a gather row: H elements, k ids, k weights */
    size_t zrow;  /* bytes of a reduce row: H elements */
    uint8_t *xg;  /* gather buffer: N blocks of up to max_tokens rows */
    uint8_t *z;   /* reduce buffer, same shape with zrow rows */
    uint8_t *hdr; /* N header blocks */
    float *own;   /* [max_tokens][H] this rank's own partial (pipelined mode) */
    incmoe_mr_t *xg_mr, *z_mr, *hdr_mr;
    incmoe_fifo_t *fifo;

    ffn_scratch_t scratch[INCMOE_MOE_MAX_WORKERS];
    cpu_pool_t *pool;

    /* Never-reset progress counters (paper section 3.3). */
    sync_counter_t gather_copied[INCMOE_MOE_MAX_WORKERS];
    sync_counter_t ag_ready;
    sync_counter_t compute_done[INCMOE_MOE_MAX_WORKERS];
    sync_counter_t barrier_done;
    sync_counter_t rs_turn;
    _Atomic int abort;
    int failed; /* a forward failed mid-pipeline: the layer is unusable */

    moe_plan_t plan;
    incmoe_moe_timing_t timing; /* of the last successful forward */
    uint64_t band_total;        /* bands finished so far, all forwards */
    uint64_t rs_total;          /* ReduceScatter parts posted so far */
};

/* --- config.c --- */
void config_choose(const incmoe_moe_t *L, size_t tmax, incmoe_moe_config_t *cfg_p);

/* --- ffn_cpu.c --- */
incmoe_status_t ffn_scratch_alloc(const incmoe_moe_t *L, ffn_scratch_t *s);
void ffn_scratch_free(ffn_scratch_t *s);
/*
 * The FFNs of every local expert over rows [first, first + n) of the band's
 * row list (rows of all blocks in band b, block after block), written as
 * router-weighted sums: into the reduce buffer, or for this rank's own rows in
 * pipelined mode into L->own (fp32) for the local reduction.
 */
void ffn_band_rows(incmoe_moe_t *L, ffn_scratch_t *s, band_t b, size_t first, size_t n);

/* --- roles.c --- */
void role_gather(incmoe_moe_t *L, int g);
void role_compute(incmoe_moe_t *L, int c);
void role_reduce(incmoe_moe_t *L, int q);
/* Reduce worker q's share of bands from..nb-1: the band barrier (worker 0),
   its ReduceScatter parts, the root's local reduction; 0, or -1 once aborted. */
int moe_reduce_bands(incmoe_moe_t *L, size_t from, int q);
/* Rows in band b over all blocks (the compute roles' work list). */
size_t band_total_rows(const incmoe_moe_t *L, band_t b);
/* Copies this rank's rows b of x, ids and weights into its gather block. */
void moe_pack_rows(incmoe_moe_t *L, band_t b);
/* The collectives of rows b of every block, as FIFO triggers. */
void moe_ag_trigger(const incmoe_moe_t *L, band_t b, incmoe_fifo_trigger_t *t);
void moe_rs_trigger(const incmoe_moe_t *L, band_t b, incmoe_fifo_trigger_t *t);

/* --- cpu_backend.c --- */
incmoe_status_t cpu_pool_create(incmoe_moe_t *L, cpu_pool_t **pool_p);
void cpu_pool_destroy(cpu_pool_t *pool);
/* Runs the plan's roles on the pool's threads; returns once all finished. */
incmoe_status_t cpu_pool_run(cpu_pool_t *pool, int pipelined);

/* Row r of gather block s / reduce block s. */
static inline uint8_t *xg_row(const incmoe_moe_t *L, size_t s, size_t r)
{
    return L->xg + (s * L->plan.tmax + r) * L->grow;
}
static inline uint8_t *z_row(const incmoe_moe_t *L, size_t s, size_t r)
{
    return L->z + (s * L->plan.tmax + r) * L->zrow;
}

#endif
