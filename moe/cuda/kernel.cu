/*
 * kernel.cu - the persistent kernel of the CUDA backend (paper section 4,
 * Algorithm 1): one launch per forward, block b takes a role by its index,
 * gather blocks first, then compute, then reduce, and runs the role loop of
 * roles.h that the CPU backend runs on its threads.  The blocks wait on each
 * other, so all of them must be resident at once: the host checks that with
 * moe_cuda_blocks_per_sm before every launch.
 */
#include "cuda/kernel.h"
#include "cuda/prims.cuh"

extern "C" __global__ void __launch_bounds__(MOE_CUDA_THREADS) moe_roles_kernel(moe_ctx_t ctx)
{
    const moe_ctx_t *x = &ctx;
    int b = (int)blockIdx.x;
    if (b < x->G)
        role_gather(x, b);
    else if (b < x->G + x->C)
        role_compute(x, b - x->G);
    else if (b < x->G + x->C + x->R)
        role_reduce(x, b - x->G - x->C);
}

extern "C" int moe_cuda_blocks_per_sm(int *blocks_p)
{
    return (int)cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_p, moe_roles_kernel,
                                                              MOE_CUDA_THREADS, 0);
}

extern "C" int moe_cuda_launch(const moe_ctx_t *x, cudaStream_t stream)
{
    int blocks = x->G + x->C + x->R;
    moe_roles_kernel<<<blocks, MOE_CUDA_THREADS, 0, stream>>>(*x);
    return (int)cudaGetLastError();
}
