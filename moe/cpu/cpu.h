/*
 * cpu.h - the CPU backend's state: fp32 weights, FFN scratch, host buffers,
 * and the thread pool that stands in for the persistent kernel's blocks.
 */
#ifndef INCMOE_MOE_CPU_H
#define INCMOE_MOE_CPU_H

#include "ctx.h"
#include "band.h"

/* Rows of a band one FFN pass handles at a time (bounds the scratch memory). */
#define MOE_FFN_TILE_ROWS 512

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

typedef struct {
    int H, I, n_local;
    const int *local_ids; /* [n_local] global ids, ascending (the layer's) */
    float *w_gu;          /* [n_local][2I][H]: gate rows then up rows, fp32 */
    float *w_down;        /* [n_local][H][I], fp32 */
    ffn_scratch_t scratch[INCMOE_MOE_MAX_WORKERS];
    moe_counters_t cnt;
    uint8_t *xg, *z;
    float *own;
    /* Masked routing (ctx.h): the rows to dispatch, their sets, the combined outputs, the
       dispatch blocks, the placement. */
    uint8_t *xs, *zo;
    uint64_t *sets;
    struct cpu_lane *home; /* the buffers' registrations and the FIFO on the layer's comm */
    incmoe_fifo_dispatch_t *dcb;
    uint32_t *src;
    int32_t *owner;
    cpu_pool_t *pool;
} cpu_state_t;

/* --- ffn.c --- */
incmoe_status_t ffn_scratch_alloc(const cpu_state_t *cs, ffn_scratch_t *s);
void ffn_scratch_free(ffn_scratch_t *s);
/* Converts the local experts' weights (dtype, layout of incmoe_moe_params_t) to fp32. */
incmoe_status_t ffn_weights_load(cpu_state_t *cs, const incmoe_moe_params_t *p, size_t esize);
/*
 * The FFNs of every local expert over rows [first, first + n) of band j's
 * row list (rows of all blocks in band b, block after block; masked routing:
 * the received rows among them, plan.h), written as router-weighted sums: into
 * the reduce buffer, or for this rank's own rows in pipelined mode with full
 * routing into x->own (fp32) for the local reduction.
 */
void ffn_band_rows(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, size_t j, band_t b,
                   size_t first, size_t n);

/* --- pool.c --- */
incmoe_status_t cpu_pool_create(const moe_ctx_t *x, cpu_pool_t **pool_p);
void cpu_pool_destroy(cpu_pool_t *pool);
/* Runs the plan's roles on the pool's threads (compute only unless
   pipelined); returns once all finished. */
incmoe_status_t cpu_pool_run(cpu_pool_t *pool, int pipelined);

#endif
