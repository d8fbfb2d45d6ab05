/* adapt_v9.c - the v9 structs (NCCL 2.24-2.25) over the one implementation. */
#include "plugin.h"

static ncclResult_t net_init_v9(ncclDebugLogger_t logger)
{
    plugin_set_logger(logger);
    return net_init();
}

static ncclResult_t net_props_v9(int dev, ncclNetProperties_v9_t *props)
{
    return plugin_get_props_v9(dev, props, plugin_net_ptr_support());
}

static ncclResult_t net_connect_v9(int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_t **send_dev_comm)
{
    return net_connect(dev, handle, send_comm);
}

static ncclResult_t net_accept_v9(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_t **recv_dev_comm)
{
    return net_accept(listen_comm, recv_comm);
}

PLUGIN_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    PLUGIN_NET_SHARED_ENTRIES, .init = net_init_v9,       .getProperties = net_props_v9,
    .listen = net_listen,      .connect = net_connect_v9, .accept = net_accept_v9,
    .isend = net_isend,        .irecv = net_irecv,
};

ncclResult_t collnet_init_v9(ncclDebugLogger_t logger)
{
    plugin_set_logger(logger);
    return collnet_init();
}

ncclResult_t collnet_props_v9(int dev, ncclNetProperties_v9_t *props)
{
    return plugin_get_props_v9(dev, props, plugin_collnet_ptr_support());
}

ncclResult_t collnet_listen_v9(int dev, void *handle, void **listen_comm)
{
    return collnet_listen(0, dev, handle, listen_comm);
}

PLUGIN_EXPORT ncclCollNet_v9_t ncclCollNetPlugin_v9 = {
    PLUGIN_COLLNET_SHARED_ENTRIES,
    .init = collnet_init_v9,
    .getProperties = collnet_props_v9,
    .listen = collnet_listen_v9,
};
