/*
 * placement.h - where the CUDA backend puts the buffers the collectives touch.
 *
 * Rule: host-mapped pinned memory (cudaHostAlloc, cudaHostAllocMapped),
 * which every UCX can register and move, unless UCX reports CUDA memory
 * among its memory types (ucp_context_query) and the client library moves
 * and reduces device memory without touching it from the host.  The client
 * adds the root's own partial and copies eager payloads on the host today,
 * so device memory is not chosen yet; the reason is part of the answer.
 */
#ifndef INCMOE_MOE_CUDA_PLACEMENT_H
#define INCMOE_MOE_CUDA_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MOE_CUDA_BUF_HOST_MAPPED = 0,
    MOE_CUDA_BUF_DEVICE = 1,
} moe_cuda_buf_t;

/* The rule above, pure: ucx_types as from inc_ucx_memory_types (base/ucx_util.h),
   client_device_ok whether the client handles device memory.  why gets
   one line for the configuration string. */
moe_cuda_buf_t moe_cuda_placement(uint64_t ucx_types, int client_device_ok, char *why,
                                  size_t why_len);

/* "host-mapped" or "device". */
const char *moe_cuda_buf_name(moe_cuda_buf_t b);

#ifdef __cplusplus
}
#endif
#endif
