/*
 * state.h - what the CUDA backend's kernel reads through moe_ctx_t.be: one
 * struct in device memory, filled by the host at create (backend.c).
 */
#ifndef INCMOE_MOE_CUDA_STATE_H
#define INCMOE_MOE_CUDA_STATE_H

#include "cuda/devfifo.h"

/* Threads of every role block. */
#define MOE_CUDA_THREADS 256
/* Rows of a band's row list one FFN pass holds (fp32 sums in scratch). */
#define MOE_CUDA_FFN_TILE 64
/* Rows of one GEMM (the WMMA m dimension). */
#define MOE_CUDA_FFN_M 16
/* Columns of the hidden dimension staged in shared memory at a time. */
#define MOE_CUDA_FFN_KC 256

typedef struct {
    int I, n_local;
    int tensor_cores;     /* 1: WMMA for the 16-bit types (H and I multiples of 16) */
    const int *local_ids; /* [n_local] global ids, ascending */
    const void *w_gu;     /* [n_local][2I][H] in the layer's dtype: gate rows, then up rows */
    const void *w_down;   /* [n_local][H][I] in the layer's dtype */
    float *scratch;       /* [compute workers][scratch_floats] */
    size_t scratch_floats;
    devfifo_words_t *fifo_words; /* the producers' words of the FIFO (device memory) */
} cuda_state_t;

/* Floats of one compute block's scratch: fp32 sums of a tile, then the SwiGLU rows. */
static inline size_t cuda_scratch_floats(int H, int I)
{
    size_t n = (size_t)MOE_CUDA_FFN_TILE * (size_t)H + (size_t)MOE_CUDA_FFN_M * (size_t)I;
    return (n + 63) & ~(size_t)63; /* 256-byte aligned per block (WMMA loads need 32) */
}

#endif
