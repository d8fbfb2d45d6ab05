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
    .name = PLUGIN_NAME,
    .init = net_init_v9,
    .devices = net_devices,
    .getProperties = net_props_v9,
    .listen = net_listen,
    .connect = net_connect_v9,
    .accept = net_accept_v9,
    .regMr = net_reg_mr,
    .regMrDmaBuf = net_reg_mr_dmabuf,
    .deregMr = net_dereg_mr,
    .isend = net_isend,
    .irecv = net_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL, /* host-side net: no device offload */
    .irecvConsumed = NULL,
    .makeVDevice = plugin_make_vdevice,
};

static ncclResult_t collnet_init_v9(ncclDebugLogger_t logger)
{
    plugin_set_logger(logger);
    return collnet_init();
}

static ncclResult_t collnet_props_v9(int dev, ncclNetProperties_v9_t *props)
{
    return plugin_get_props_v9(dev, props, plugin_collnet_ptr_support());
}

static ncclResult_t collnet_listen_v9(int dev, void *handle, void **listen_comm)
{
    return collnet_listen(0, dev, handle, listen_comm);
}

PLUGIN_EXPORT ncclCollNet_v9_t ncclCollNetPlugin_v9 = {
    .name = PLUGIN_NAME,
    .init = collnet_init_v9,
    .devices = collnet_devices,
    .getProperties = collnet_props_v9,
    .listen = collnet_listen_v9,
    .connect = collnet_connect,
    .reduceSupport = collnet_reduce_support,
    .regMr = collnet_reg_mr,
    .regMrDmaBuf = collnet_reg_mr_dmabuf,
    .deregMr = collnet_dereg_mr,
    .iallreduce = collnet_iallreduce,
    .iallgather = collnet_iallgather,
    .ireducescatter = collnet_ireducescatter,
    .iflush = collnet_iflush,
    .test = collnet_test,
    .closeColl = collnet_close_coll,
    .closeListen = collnet_close_listen,
    .makeVDevice = plugin_make_vdevice,
};
