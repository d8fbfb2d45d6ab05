/* cuda.c - see cuda.h. */
#include "cuda.h"
#include "plugin.h"

#include "base/config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

/* The few runtime entry points we use; cudaError_t is an int enum, 0 is success. */
typedef int (*cuda_device_count_fn)(int *count);
typedef int (*cuda_host_alloc_fn)(void **p, size_t bytes, unsigned flags);
typedef int (*cuda_free_host_fn)(void *p);
typedef int (*cuda_memcpy_fn)(void *dst, const void *src, size_t bytes, int kind);
#define CUDA_MEMCPY_HOST_TO_DEVICE 1
#define CUDA_MEMCPY_DEVICE_TO_HOST 2

static struct {
    int ok;
    cuda_host_alloc_fn host_alloc;
    cuda_free_host_fn free_host;
    cuda_memcpy_fn memcpy;
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cuda_load(void)
{
#ifdef INCMOE_NCCL_CUDA
    const char *names[] = {inc_config_get_str("INCMOE_CUDART"), "libcudart.so", "libcudart.so.13",
                           "libcudart.so.12"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && lib == NULL; i++)
        if (names[i] != NULL)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PINFO("no CUDA runtime found: host memory only");
        return;
    }
    cuda_device_count_fn count = (cuda_device_count_fn)dlsym(lib, "cudaGetDeviceCount");
    cu.host_alloc = (cuda_host_alloc_fn)dlsym(lib, "cudaHostAlloc");
    cu.free_host = (cuda_free_host_fn)dlsym(lib, "cudaFreeHost");
    cu.memcpy = (cuda_memcpy_fn)dlsym(lib, "cudaMemcpy");
    int n = 0;
    if (count == NULL || cu.host_alloc == NULL || cu.free_host == NULL || cu.memcpy == NULL) {
        PWARN("the CUDA runtime lacks cudaGetDeviceCount/cudaHostAlloc/cudaFreeHost/cudaMemcpy: "
              "host memory only");
        return;
    }
    if (count(&n) != 0 || n <= 0) {
        PINFO("no CUDA device: host memory only");
        return;
    }
    cu.ok = 1;
    PINFO("GPU memory through pinned host staging (%d devices)", n);
#endif
}

int cuda_available(void)
{
    pthread_once(&cu_once, cuda_load);
    return cu.ok;
}

void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (!cuda_available() || cu.host_alloc(&p, bytes ? bytes : 1, 0) != 0) {
        PWARN("cudaHostAlloc of %zu bytes for a staging buffer failed", bytes);
        return NULL;
    }
    return p;
}

void cuda_host_free(void *p)
{
    if (p != NULL && cuda_available())
        cu.free_host(p);
}

int cuda_to_host(void *host, const void *dev, size_t bytes)
{
    if (bytes == 0)
        return 0;
    int rc = cu.memcpy(host, dev, bytes, CUDA_MEMCPY_DEVICE_TO_HOST);
    if (rc != 0)
        PWARN("cudaMemcpy of %zu bytes from the GPU failed (error %d)", bytes, rc);
    return rc == 0 ? 0 : -1;
}

int cuda_to_device(void *dev, const void *host, size_t bytes)
{
    if (bytes == 0)
        return 0;
    int rc = cu.memcpy(dev, host, bytes, CUDA_MEMCPY_HOST_TO_DEVICE);
    if (rc != 0)
        PWARN("cudaMemcpy of %zu bytes to the GPU failed (error %d)", bytes, rc);
    return rc == 0 ? 0 : -1;
}
