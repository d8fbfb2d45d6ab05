/*
 * net_reg.c - registration for the NCCL net.  UCX's tag API takes plain
 * pointers, so a registration only records the range and the memory type:
 * isend and irecv check that a buffer lies inside the one NCCL names.
 */
#include <stdlib.h>
#include <string.h>

#include "net.h"

typedef struct {
    char magic[4]; /* "MRH\0": catches a foreign pointer passed as mhandle */
    int type;
    char *base;
    size_t size;
} net_mr_t;

ncclResult_t net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    if (comm == NULL || mhandle == NULL || (data == NULL && size != 0))
        return ncclInvalidArgument;
    /* GPU memory only where UCX moves it itself: it then goes to UCX as it is. */
    int supported = plugin_net_ptr_support();
    if ((type & supported) == 0 || (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)) {
        PWARN("regMr: memory type %d is not supported (ptrSupport %#x)", type, supported);
        return ncclInvalidArgument;
    }
    net_mr_t *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return ncclSystemError;
    memcpy(mr->magic, "MRH", 4);
    mr->type = type;
    mr->base = data;
    mr->size = size;
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle)
{
    PWARN("regMrDmaBuf: DMA-BUF memory is not supported (ptrSupport has no NCCL_PTR_DMABUF)");
    return ncclInvalidArgument;
}

ncclResult_t net_dereg_mr(void *comm, void *mhandle)
{
    net_mr_t *mr = mhandle;
    if (mr == NULL || memcmp(mr->magic, "MRH", 4) != 0)
        return ncclInvalidArgument;
    memset(mr->magic, 0, 4);
    free(mr);
    return ncclSuccess;
}

int net_mr_covers(const void *mhandle, const void *data, size_t size, const char *what)
{
    const net_mr_t *mr = mhandle;
    if (mr == NULL)
        return 1; /* NCCL may send without registration */
    if (memcmp(mr->magic, "MRH", 4) != 0) {
        PWARN("%s: mhandle %p is not a registration of this net", what, mhandle);
        return 0;
    }
    const char *p = data;
    if (size != 0 &&
        (p < mr->base || size > mr->size || p - mr->base > (ptrdiff_t)(mr->size - size))) {
        PWARN("%s: [%p, +%zu) is outside the registered [%p, +%zu)", what, data, size,
              (void *)mr->base, mr->size);
        return 0;
    }
    return 1;
}
