/* placement.c - see placement.h. */
#include "cuda/placement.h"

#include <stdio.h>

#include <ucp/api/ucp.h>

moe_cuda_buf_t moe_cuda_placement(uint64_t ucx_types, int client_device_ok, char *why,
                                  size_t why_len)
{
    int ucx_cuda = (ucx_types & (1ull << UCS_MEMORY_TYPE_CUDA)) != 0;
    if (ucx_cuda && client_device_ok) {
        snprintf(why, why_len, "UCX moves CUDA memory");
        return MOE_CUDA_BUF_DEVICE;
    }
    snprintf(why, why_len, "%s",
             !ucx_cuda ? "UCX reports no CUDA memory support"
                       : "UCX moves CUDA memory, but the client reduces and copies on the host");
    return MOE_CUDA_BUF_HOST_MAPPED;
}

const char *moe_cuda_buf_name(moe_cuda_buf_t b)
{
    return b == MOE_CUDA_BUF_DEVICE ? "device" : "host-mapped";
}
