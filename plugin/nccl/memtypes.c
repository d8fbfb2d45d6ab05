/*
 * memtypes.c - ptrSupport of the net and of the CollNet, from the memory
 * types the UCX found at run time can move (ptr_support.h says why).
 */
#include <pthread.h>

#include <ucp/api/ucp.h>

#include "plugin.h"
#include "ptr_support.h"

#include "base/ucx_util.h"

static pthread_once_t memtypes_once = PTHREAD_ONCE_INIT;
static uint64_t memtypes;

/* Asked once: NCCL asks getProperties before any comm exists, and the answer depends only
   on the UCX library and its UCX_* settings, not on a comm. */
static void memtypes_query(void)
{
    memtypes = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    if (inc_ucx_memory_types(&memtypes) != INCMOE_OK)
        PWARN("cannot ask UCX which memory it moves; offering host memory only");
    PINFO("UCX moves %s memory: the net takes %s buffers, the CollNet host buffers",
          (memtypes & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) ? "host and CUDA" : "host",
          (memtypes & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) ? "host and GPU" : "host");
}

uint64_t plugin_ucx_memory_types(void)
{
    pthread_once(&memtypes_once, memtypes_query);
    return memtypes;
}

int plugin_net_ptr_support(void)
{
    return plugin_ptr_support_of(plugin_ucx_memory_types(), 0);
}

int plugin_collnet_ptr_support(void)
{
    return plugin_ptr_support_of(plugin_ucx_memory_types(), 1);
}
