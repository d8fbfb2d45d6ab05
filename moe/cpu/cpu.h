/*
 * cpu.h - the CPU backend's state: weights, the FFN team's buffers, host buffers,
 * and the thread pool that stands in for the persistent kernel's blocks.
 */
#ifndef INCMOE_MOE_CPU_H
#define INCMOE_MOE_CPU_H

#include "band.h"
#include "ctx.h"

/* Rows of one expert a GEMM takes at a time (bounds a worker's scratch). */
#define MOE_FFN_GEMM_ROWS 256
/* What a chunk's shared buffers (its SwiGLU rows twice, its sums) may take, in bytes. */
#define MOE_FFN_CHUNK_BYTES ((size_t)48 << 20)

/* Scratch of one compute worker: its GEMMs' operands, and its copy of the chunk's plan
   (every worker derives the same one). */
typedef struct {
    float *a;        /* [GEMM_ROWS][H] one expert's rows, fp32 */
    float *g, *u;    /* [GEMM_ROWS][I] gate and up of this worker's columns of I */
    float *out;      /* [GEMM_ROWS][H] down projection of this worker's columns of H */
    float *panel;    /* cpu_gemm_scratch_floats(GEMM_ROWS, max(H, I)) */
    uint8_t **rows;  /* [chunk] the chunk's rows in xg */
    int *blk;        /* [chunk] their blocks (-1: received, masked routing) */
    size_t *idx;     /* [chunk] their row in the block, or received row */
    size_t *off;     /* [n_local + 1] expert le's hits are [off[le], off[le + 1]) */
    int32_t *hit;    /* [chunk * kk] the chunk row of each hit, expert after expert */
    float *hitw;     /* [chunk * kk] its router weight */
    uint64_t chunks; /* chunks this worker ran this forward */
} ffn_scratch_t;

/* What the compute workers share: the chunk's SwiGLU outputs (two, for alternate chunks: a
   worker starts the next chunk's first GEMMs while another still reads this one's), the
   weighted sums (each worker its own columns of H), and the team's barrier counters. */
typedef struct {
    size_t chunk;   /* rows of a band's list per chunk */
    int kk;         /* most local experts of one row: min(k, n_local) */
    int32_t *le_of; /* [E * slots] local index of each wire id's expert, -1 if not served here */
    float *act[2];  /* [chunk * kk][I] */
    float *acc;     /* [chunk][H] */
    uint64_t step[INCMOE_MOE_MAX_WORKERS]; /* barriers passed this forward */
} ffn_team_t;

typedef struct cpu_pool cpu_pool_t;

typedef struct {
    int H, I, n_local;
    const int *local_ids; /* [n_local] global ids, ascending (the layer's) */
    incmoe_dtype_t dtype; /* of the weights, as the layer's */
    size_t esize;
    /* Per local expert, packed for cpu_gemm_packed (gemm.h), dtype: gate's then up's
       panels (W [I][H] each), and down's (W [H][I]). */
    void *w_gu;
    void *w_down;
    size_t gu_elems, d_elems;                      /* elements of one expert's */
    ffn_scratch_t scratch[INCMOE_MOE_MAX_WORKERS]; /* allocated up to the most workers run */
    ffn_team_t team;
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
/* Copies the local experts' weights (dtype, layout of incmoe_moe_params_t), packed, kept in
   dtype. */
incmoe_status_t ffn_weights_load(cpu_state_t *cs, const incmoe_moe_params_t *p, size_t esize);
/* The team's shared buffers for E experts, top-k, bands of at most max_rows rows; the wire
   ids e + E * slot (replica_plan.h) this rank serves are those owner[id] names it for
   (owner NULL: slots 1, every local expert). */
incmoe_status_t ffn_team_create(cpu_state_t *cs, int E, int slots, const int32_t *owner, int rank,
                                int k, size_t max_rows);
void ffn_team_destroy(cpu_state_t *cs);
/* Scratch for workers [0, C) (those not yet made); before a forward runs them. */
incmoe_status_t ffn_scratch_reserve(cpu_state_t *cs, int C);
void ffn_scratch_free(ffn_scratch_t *s);
/* Before a forward's compute workers start: the team's barriers from zero. */
void ffn_team_reset(cpu_state_t *cs);
/* ffn_probe.c: on the calling thread, the GEMMs' seconds per flop (6 H I a row) over
   MOE_FFN_GEMM_ROWS rows of one expert, and the seconds of one row through every local
   expert (a band's pass over the weights); both 0 where the rank has no expert. */
incmoe_status_t ffn_probe(const cpu_state_t *cs, double *flop_s_p, double *pass_s_p);
/*
 * Compute worker c of x->C: its part of band j's expert FFNs.  The band's row list (rows of
 * all blocks in band b, block after block; masked routing: the received rows among them,
 * plan.h) is taken in chunks; in each, every local expert's rows form one group, the
 * workers split the columns of each GEMM between them, and each row's router-weighted sum
 * goes into the reduce buffer, or for this rank's own rows in pipelined mode with full
 * routing into x->own (fp32) for the local reduction.  A row's result does not depend on
 * the chunk, the other rows or the worker count (gemm.h).  Every worker of the team must
 * call it for the band (they meet at barriers).  INCMOE_OK, or why a barrier gave up (the
 * layer's abort, the timeout).
 */
incmoe_status_t ffn_band(const moe_ctx_t *x, cpu_state_t *cs, int c, size_t j, band_t b);

/* --- ffn_plan.c --- */
/* The rows of list positions [p, p + n) of band j into s (rows, blk, idx) and their hits
   grouped by local expert (off, hit, hitw); returns how many rows. */
size_t ffn_plan_chunk(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, size_t j,
                      band_t b, size_t p, size_t n);

/* --- decode.c: the decode step's part (backend.h), over the plan in L->ctx --- */
struct incmoe_moe;
void cpu_decode_pack(struct incmoe_moe *L);
incmoe_status_t cpu_decode_experts(struct incmoe_moe *L);

/* --- pool.c --- */
incmoe_status_t cpu_pool_create(const moe_ctx_t *x, cpu_pool_t **pool_p);
void cpu_pool_destroy(cpu_pool_t *pool);
/* Runs the plan's roles on the pool's threads (compute only unless
   pipelined); returns once all finished. */
incmoe_status_t cpu_pool_run(cpu_pool_t *pool, int pipelined);

#endif
