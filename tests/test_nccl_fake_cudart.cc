/*
 * test_nccl_fake_cudart.cc - a stand-in CUDA runtime for machines without a
 * GPU: one "device" whose memory is ordinary host memory, so the plugin's
 * pinned-staging path (INCMOE_CUDART=this library) runs and can be checked.
 * It counts what the plugin asked of it.
 */
#include <stdlib.h>
#include <string.h>

extern "C" {

__attribute__((visibility("default"))) int fake_cudart_host_allocs;
__attribute__((visibility("default"))) int fake_cudart_to_host;
__attribute__((visibility("default"))) int fake_cudart_to_device;

__attribute__((visibility("default"))) int cudaGetDeviceCount(int *count)
{
    *count = 1;
    return 0;
}

__attribute__((visibility("default"))) int cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    *p = malloc(bytes);
    if (*p == nullptr)
        return 2; /* cudaErrorMemoryAllocation */
    fake_cudart_host_allocs++;
    return 0;
}

__attribute__((visibility("default"))) int cudaFreeHost(void *p)
{
    free(p);
    return 0;
}

__attribute__((visibility("default"))) int cudaMemcpy(void *dst, const void *src, size_t bytes,
                                                      int kind)
{
    if (kind == 1)
        fake_cudart_to_device++;
    else if (kind == 2)
        fake_cudart_to_host++;
    else
        return 1; /* cudaErrorInvalidValue: the plugin names the direction */
    memcpy(dst, src, bytes);
    return 0;
}
}
