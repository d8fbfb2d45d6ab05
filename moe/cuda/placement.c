/* placement.c - see placement.h. */
#include "cuda/placement.h"

#include <stdio.h>
#include <ucp/api/ucp.h>

#include "base/log.h"

incmoe_status_t moe_cuda_ucx_memory_types(uint64_t *types_p)
{
    ucp_config_t *config;
    ucs_status_t s = ucp_config_read(NULL, NULL, &config);
    if (s != UCS_OK) {
        log_error("moe", "reading UCX's configuration failed: %s", ucs_status_string(s));
        return INCMOE_ERR_TRANSPORT;
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_context_h ctx;
    s = ucp_init(&params, config, &ctx);
    ucp_config_release(config);
    if (s != UCS_OK) {
        log_error("moe", "a UCX context to ask its memory types failed: %s", ucs_status_string(s));
        return INCMOE_ERR_TRANSPORT;
    }
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    s = ucp_context_query(ctx, &attr);
    ucp_cleanup(ctx);
    if (s != UCS_OK) {
        log_error("moe", "ucp_context_query failed: %s", ucs_status_string(s));
        return INCMOE_ERR_TRANSPORT;
    }
    *types_p = attr.memory_types;
    return INCMOE_OK;
}

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
