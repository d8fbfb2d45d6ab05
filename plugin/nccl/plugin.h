/*
 * plugin.h - the one, version-neutral implementation of the NCCL net and
 * CollNet plugins.  adapt_v*.c wrap it into the structs NCCL looks up; only
 * those structs leave the library (exports.map).
 */
#ifndef INCMOE_NCCL_PLUGIN_H
#define INCMOE_NCCL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "abi.h"

#include "incmoe/incmoe.h"

#define PLUGIN_NAME "incmoe"
/* Largest grouped receive we accept (NCCL posts at most 8). */
#define NET_MAX_RECVS 8
/* Largest single transfer: the test() size output is an int. */
#define PLUGIN_MAX_BYTES ((size_t)1 << 30)

/* ---- common.c ---------------------------------------------------------- */

/* Remember NCCL's logger and route the library's own log lines to it. */
void plugin_set_logger(ncclDebugLogger_t logger);
void plugin_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define PWARN(...) plugin_log(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define PINFO(...) plugin_log(NCCL_LOG_INFO, NCCL_NET | NCCL_INIT, __FILE__, __LINE__, __VA_ARGS__)

/* incmoe status -> ncclResult_t: the only place the two meet. */
ncclResult_t plugin_result(incmoe_status_t status);

/* Properties of our single device, shared by the net and the CollNet so NCCL
   pairs them (same index 0, name, PCI path and GUID). */
void plugin_get_props(ncclNetProperties_v11_t *props, int ptr_support);
/* Device-count bookkeeping for makeVDevice: we have one physical device. */
ncclResult_t plugin_check_dev(int dev);
ncclResult_t plugin_make_vdevice(int *d, ncclNetVDeviceProps_t *props);
/* getProperties of one version, checking the device index. */
ncclResult_t plugin_get_props_v9(int dev, ncclNetProperties_v9_t *props, int ptr_support);
ncclResult_t plugin_get_props_v11(int dev, ncclNetProperties_v11_t *props, int ptr_support);
/* ---- memtypes.c: ptrSupport (ptr_support.h) ------------------------------ */

/* What UCX can move here (ucp_context_attr_t.memory_types), queried once. */
uint64_t plugin_ucx_memory_types(void);
/* The net: host, plus CUDA where UCX moves CUDA memory itself. */
int plugin_net_ptr_support(void);
/* The CollNet: host only (its client touches the bytes with the CPU). */
int plugin_collnet_ptr_support(void);
/* ---- adapt_v10.c: the calls of the v10 net whose form v11 keeps ------------- */

ncclResult_t net_accept_v10(void *listen_comm, void **recv_comm,
                            ncclNetDeviceHandle_t **recv_dev_comm);
ncclResult_t net_isend_v10(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void *phandle, void **request);
ncclResult_t net_irecv_v10(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **phandles, void **request);

/* ---- adapt_v9.c: the CollNet calls whose form v10 keeps (its struct is v9's) - */

ncclResult_t collnet_init_v9(ncclDebugLogger_t logger);
ncclResult_t collnet_props_v9(int dev, ncclNetProperties_v9_t *props);
ncclResult_t collnet_listen_v9(int dev, void *handle, void **listen_comm);

/* Make the struct visible past -fvisibility=hidden; exports.map has the final say. */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

/* The entries of the net struct whose form no version since v9 changed; each adapt_v*.c
   adds those that differ (init, getProperties, listen, connect, accept, isend, irecv, ...).
   getDeviceMr is NULL: a host-side net has no device offload. */
#define PLUGIN_NET_SHARED_ENTRIES                                                                  \
    .name = PLUGIN_NAME, .devices = net_devices, .regMr = net_reg_mr,                              \
    .regMrDmaBuf = net_reg_mr_dmabuf, .deregMr = net_dereg_mr, .iflush = net_iflush,               \
    .test = net_test, .closeSend = net_close_send, .closeRecv = net_close_recv,                    \
    .closeListen = net_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL,                   \
    .makeVDevice = plugin_make_vdevice

/* Likewise the CollNet struct's: v10's is v9's, v11 changed init, getProperties and listen and
   added finalize. */
#define PLUGIN_COLLNET_SHARED_ENTRIES                                                              \
    .name = PLUGIN_NAME, .devices = collnet_devices, .connect = collnet_connect,                   \
    .reduceSupport = collnet_reduce_support, .regMr = collnet_reg_mr,                              \
    .regMrDmaBuf = collnet_reg_mr_dmabuf, .deregMr = collnet_dereg_mr,                             \
    .iallreduce = collnet_iallreduce, .iallgather = collnet_iallgather,                            \
    .ireducescatter = collnet_ireducescatter, .iflush = collnet_iflush, .test = collnet_test,      \
    .closeColl = collnet_close_coll, .closeListen = collnet_close_listen,                          \
    .makeVDevice = plugin_make_vdevice

/* The IPv4/IPv6 address our listeners advertise (port 0). */
int plugin_local_addr(struct sockaddr_storage *addr, unsigned *addr_len);

/* ---- net*.c: point-to-point over UCX tags (net.h says which file does what) */

ncclResult_t net_init(void);
ncclResult_t net_finalize(void);
ncclResult_t net_devices(int *ndev);
ncclResult_t net_listen(int dev, void *handle, void **listen_comm);
ncclResult_t net_connect(int dev, void *handle, void **send_comm);
ncclResult_t net_accept(void *listen_comm, void **recv_comm);
ncclResult_t net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle);
ncclResult_t net_dereg_mr(void *comm, void *mhandle);
ncclResult_t net_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                       void **request);
ncclResult_t net_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                       void **mhandles, void **request);
ncclResult_t net_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                        void **request);
ncclResult_t net_test(void *request, int *done, int *sizes);
ncclResult_t net_close_send(void *send_comm);
ncclResult_t net_close_recv(void *recv_comm);
ncclResult_t net_close_listen(void *listen_comm);

/* ---- collnet.c: CollNet over the incmoe client API --------------------- */

ncclResult_t collnet_init(void);
ncclResult_t collnet_devices(int *ndev);
/* comm_id: NCCL's commId (v11), 0 where the version does not pass one. */
ncclResult_t collnet_listen(uint64_t comm_id, int dev, void *handle, void **listen_comm);
ncclResult_t collnet_connect(void *handles[], int nranks, int rank, void *listen_comm,
                             void **coll_comm);
ncclResult_t collnet_reduce_support(ncclDataType_t dtype, ncclRedOp_t op, int *supported);
ncclResult_t collnet_reg_mr(void *coll_comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t collnet_reg_mr_dmabuf(void *coll_comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle);
ncclResult_t collnet_dereg_mr(void *coll_comm, void *mhandle);
ncclResult_t collnet_iallreduce(void *coll_comm, void *send, void *recv, size_t count,
                                ncclDataType_t dtype, ncclRedOp_t op, void *send_mh, void *recv_mh,
                                void **request);
ncclResult_t collnet_iallgather(void *coll_comm, void *send, int n_parts, ncclNetSGE_t *parts,
                                size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                                void *send_mh, void **request);
ncclResult_t collnet_ireducescatter(void *coll_comm, int n_parts, ncclNetSGE_t *parts, void *recv,
                                    size_t bytes_per_rank, size_t win_offset, size_t win_bytes,
                                    ncclDataType_t dtype, ncclRedOp_t op, void *recv_mh,
                                    void **request);
ncclResult_t collnet_iflush(void *coll_comm, void *data, int size, void *mhandle, void **request);
ncclResult_t collnet_test(void *request, int *done, int *size);
ncclResult_t collnet_close_coll(void *coll_comm);
ncclResult_t collnet_close_listen(void *listen_comm);

#endif
