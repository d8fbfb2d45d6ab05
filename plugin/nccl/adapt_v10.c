/* adapt_v10.c - the v10 structs (NCCL 2.26-2.27) over the one implementation. */
#include "plugin.h"

static ncclResult_t net_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler)
{
    plugin_set_logger(logger);
    return net_init();
}

static ncclResult_t net_props_v10(int dev, ncclNetProperties_v10_t *props)
{
    return plugin_get_props_v9(dev, props, plugin_net_ptr_support());
}

/* The traffic class in config has no UCX equivalent we could honour per endpoint. */
static ncclResult_t net_connect_v10(int dev, ncclNetCommConfig_t *config, void *handle,
                                    void **send_comm, ncclNetDeviceHandle_t **send_dev_comm)
{
    return net_connect(dev, handle, send_comm);
}

ncclResult_t net_accept_v10(void *listen_comm, void **recv_comm,
                            ncclNetDeviceHandle_t **recv_dev_comm)
{
    return net_accept(listen_comm, recv_comm);
}

/* phandle is NCCL's profiler handle; we record no profiler events. */
ncclResult_t net_isend_v10(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void *phandle, void **request)
{
    return net_isend(send_comm, data, size, tag, mhandle, request);
}

ncclResult_t net_irecv_v10(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **phandles, void **request)
{
    return net_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

PLUGIN_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    PLUGIN_NET_SHARED_ENTRIES, .init = net_init_v10,       .getProperties = net_props_v10,
    .listen = net_listen,      .connect = net_connect_v10, .accept = net_accept_v10,
    .isend = net_isend_v10,    .irecv = net_irecv_v10,
};

/* The CollNet struct of v10 is v9's (abi.h), and so are its calls. */
PLUGIN_EXPORT ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
    PLUGIN_COLLNET_SHARED_ENTRIES,
    .init = collnet_init_v9,
    .getProperties = collnet_props_v9,
    .listen = collnet_listen_v9,
};
