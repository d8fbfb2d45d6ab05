/*
 * adapt_v11.c - the v11 structs (NCCL 2.28-2.29) over the one implementation.
 * v11 adds a per-communicator context to init/listen and a finalize.
 */
#include <stdlib.h>

#include "plugin.h"

typedef struct {
    uint64_t comm_id;
} v11_ctx_t;

static ncclResult_t v11_ctx_new(void **ctx, uint64_t comm_id)
{
    if (ctx == NULL)
        return ncclInvalidArgument;
    v11_ctx_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return ncclSystemError;
    c->comm_id = comm_id;
    *ctx = c;
    return ncclSuccess;
}

/* init of the net or the CollNet: NCCL's logger, a context of the communicator, the plugin's
   init; no context when that fails. */
static ncclResult_t v11_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger,
                             ncclResult_t (*init)(void))
{
    plugin_set_logger(logger);
    ncclResult_t res = v11_ctx_new(ctx, comm_id);
    if (res != ncclSuccess)
        return res;
    res = init();
    if (res != ncclSuccess) {
        free(*ctx);
        *ctx = NULL;
    }
    return res;
}

static ncclResult_t net_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_t *config,
                                 ncclDebugLogger_t logger, ncclProfilerCallback_t profiler)
{
    return v11_init(ctx, comm_id, logger, net_init);
}

static ncclResult_t net_props_v11(int dev, ncclNetProperties_v11_t *props)
{
    return plugin_get_props_v11(dev, props, plugin_net_ptr_support());
}

static ncclResult_t net_listen_v11(void *ctx, int dev, void *handle, void **listen_comm)
{
    return net_listen(dev, handle, listen_comm);
}

static ncclResult_t net_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                    ncclNetDeviceHandle_t **send_dev_comm)
{
    return net_connect(dev, handle, send_comm);
}

static ncclResult_t net_finalize_v11(void *ctx)
{
    free(ctx);
    return net_finalize();
}

/* Flow and peer-count hints: UCX sizes its own resources, so they need no action. */
static ncclResult_t net_set_attr_v11(void *ctx, ncclNetAttr_t *attr)
{
    return ncclSuccess;
}

PLUGIN_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    PLUGIN_NET_SHARED_ENTRIES,
    .init = net_init_v11,
    .getProperties = net_props_v11,
    .listen = net_listen_v11,
    .connect = net_connect_v11,
    .accept = net_accept_v10, /* accept, isend and irecv are v10's */
    .isend = net_isend_v10,
    .irecv = net_irecv_v10,
    .finalize = net_finalize_v11,
    .setNetAttr = net_set_attr_v11,
};

static ncclResult_t collnet_init_v11(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger)
{
    return v11_init(ctx, comm_id, logger, collnet_init);
}

static ncclResult_t collnet_props_v11(int dev, ncclNetProperties_v11_t *props)
{
    return plugin_get_props_v11(dev, props, plugin_collnet_ptr_support());
}

static ncclResult_t collnet_listen_v11(void *ctx, int dev, void *handle, void **listen_comm)
{
    if (ctx == NULL)
        return ncclInvalidArgument;
    return collnet_listen(((v11_ctx_t *)ctx)->comm_id, dev, handle, listen_comm);
}

static ncclResult_t collnet_finalize_v11(void *ctx)
{
    free(ctx);
    return ncclSuccess;
}

PLUGIN_EXPORT ncclCollNet_v11_t ncclCollNetPlugin_v11 = {
    PLUGIN_COLLNET_SHARED_ENTRIES,      .init = collnet_init_v11,
    .getProperties = collnet_props_v11, .listen = collnet_listen_v11,
    .finalize = collnet_finalize_v11,
};
