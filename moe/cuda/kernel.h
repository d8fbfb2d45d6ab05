/*
 * kernel.h - the host's view of kernel.cu (C linkage, cudaError_t as int).
 */
#ifndef INCMOE_MOE_CUDA_KERNEL_H
#define INCMOE_MOE_CUDA_KERNEL_H

#include <cuda_runtime_api.h>

#include "ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Role blocks one SM holds at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor). */
int moe_cuda_blocks_per_sm(int *blocks_p);
/* Enqueues the persistent kernel (G + C + R blocks) for the plan in *x. */
int moe_cuda_launch(const moe_ctx_t *x, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
