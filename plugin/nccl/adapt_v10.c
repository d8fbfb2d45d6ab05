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
    .name = PLUGIN_NAME,
    .init = net_init_v10,
    .devices = net_devices,
    .getProperties = net_props_v10,
    .listen = net_listen,
    .connect = net_connect_v10,
    .accept = net_accept_v10,
    .regMr = net_reg_mr,
    .regMrDmaBuf = net_reg_mr_dmabuf,
    .deregMr = net_dereg_mr,
    .isend = net_isend_v10,
    .irecv = net_irecv_v10,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = plugin_make_vdevice,
};

static ncclResult_t collnet_init_v10(ncclDebugLogger_t logger)
{
    plugin_set_logger(logger);
    return collnet_init();
}

static ncclResult_t collnet_props_v10(int dev, ncclNetProperties_v10_t *props)
{
    return plugin_get_props_v9(dev, props, plugin_collnet_ptr_support());
}

static ncclResult_t collnet_listen_v10(int dev, void *handle, void **listen_comm)
{
    return collnet_listen(0, dev, handle, listen_comm);
}

PLUGIN_EXPORT ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
    .name = PLUGIN_NAME,
    .init = collnet_init_v10,
    .devices = collnet_devices,
    .getProperties = collnet_props_v10,
    .listen = collnet_listen_v10,
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
