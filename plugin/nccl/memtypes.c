/*
 * memtypes.c - ptrSupport of the net and of the CollNet, from the memory
 * types the UCX found at run time can move (ptr_support.h says why).
 */
#include "plugin.h"
#include "ptr_support.h"

#include <pthread.h>
#include <ucp/api/ucp.h>

static pthread_once_t memtypes_once = PTHREAD_ONCE_INIT;
static uint64_t memtypes;

/* A context of its own: NCCL asks getProperties before any comm exists, and the
   answer depends only on the UCX library and its UCX_* settings, not on a comm. */
static void memtypes_query(void)
{
    memtypes = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        PWARN("ucp_config_read failed: %s; offering host memory only", ucs_status_string(st));
        return;
    }
    ucp_params_t prm = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                        .features = UCP_FEATURE_TAG | UCP_FEATURE_AM};
    ucp_context_h ctx;
    st = ucp_init(&prm, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        PWARN("ucp_init failed: %s; offering host memory only", ucs_status_string(st));
        return;
    }
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    st = ucp_context_query(ctx, &attr);
    if (st == UCS_OK)
        memtypes = attr.memory_types;
    else
        PWARN("ucp_context_query failed: %s; offering host memory only", ucs_status_string(st));
    ucp_cleanup(ctx);
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
