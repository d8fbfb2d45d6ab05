/*
 * kernel.cu - the persistent kernel of the CUDA backend (paper section 4,
 * Algorithm 1): one launch per forward, block b takes a role by its index,
 * gather blocks first, then compute, then reduce, and runs the role loop of
 * roles.h that the CPU backend runs on its threads.
 */
#include "cuda/prims.cuh"

extern "C" __global__ void moe_roles_kernel(moe_ctx_t ctx)
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
