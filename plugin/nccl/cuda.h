/*
 * cuda.h - GPU buffers through pinned host staging.
 *
 * The CUDA runtime is loaded at run time (INCMOE_CUDART, else libcudart.so),
 * and only in builds made with CUDA: the plugin links no CUDA library and a
 * host without a GPU simply offers host memory.  Debian's UCX cannot touch
 * GPU memory, so a GPU region gets a pinned host twin: bytes to send are
 * copied to the twin before posting, bytes received are copied back once the
 * operation completed.  Offsets in the twin equal offsets in the GPU region.
 */
#ifndef INCMOE_NCCL_CUDA_H
#define INCMOE_NCCL_CUDA_H

#include <stddef.h>

/* 1 when GPU memory can be registered (a CUDA build, a runtime, a device). */
int cuda_available(void);
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);
/* 0 on success; -1 (logged) when the copy failed. */
int cuda_to_host(void *host, const void *dev, size_t bytes);
int cuda_to_device(void *dev, const void *host, size_t bytes);

#endif
