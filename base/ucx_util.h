/* ucx_util.h - the UCX plumbing shared by the client, the switch and the tools. */
#ifndef INC_UCX_UTIL_H
#define INC_UCX_UTIL_H

#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "incmoe/incmoe.h"

/* A UCX context and its one worker. */
typedef struct {
    ucp_context_h context;
    ucp_worker_h worker;
    int event_fd; /* the worker's wakeup fd; -1 when opened without UCP_FEATURE_WAKEUP */
} inc_ucx_node_t;

/*
 * The client's and the switch's node: active messages and wakeup, one single-threaded worker.
 * served: the address this process serves on (the switch's --listen, the one a rank reaches
 * the switch from), or NULL; UCX's network devices are then those inc_ucx_served_devices
 * names, so that UCX's own TCP ports open on that interface only, unless the user set
 * UCX_NET_DEVICES.
 */
incmoe_status_t inc_ucx_node_open(inc_ucx_node_t *node, const struct sockaddr *served);
/*
 * A node with other UCP_FEATURE_* features and another worker thread mode (the NCCL net's:
 * tags, a worker its callers serialize).  Without UCP_FEATURE_WAKEUP, which also narrows
 * UCX's choice of transports, the node has no event fd and inc_ucx_node_wait naps instead.
 * Both come from the environment's UCX_* settings (served as above); on failure logs why.
 */
incmoe_status_t inc_ucx_node_open_with(inc_ucx_node_t *node, uint64_t features,
                                       ucs_thread_mode_t thread_mode,
                                       const struct sockaddr *served);

/*
 * UCX_NET_DEVICES for a process serving on `served`: the interface holding that address and
 * every RDMA port (so verbs stay on a fabric); "" for a wildcard address or one no interface
 * holds (UCX's default: every device).
 */
void inc_ucx_served_devices(const struct sockaddr *served, char *out, size_t out_len);

/* The memory types (UCS_BIT(UCS_MEMORY_TYPE_*)) the UCX found at run time can move, from a
   throwaway context: the answer depends on the library and its UCX_* settings only.  On
   failure logs why, leaves *types untouched and returns INCMOE_ERR_TRANSPORT. */
incmoe_status_t inc_ucx_memory_types(uint64_t *types);

/* How long inc_ucx_node_close lets the worker settle (inc_ucx_worker_settle) before
   destroying it: endpoints the owner already closed have nothing left, so this bounds only a
   peer that stopped reading. */
#define INC_UCX_CLOSE_SETTLE_MS 1000

/* Settles and destroys the worker, then the context; either may be NULL (not opened, or
   destroyed by the owner after its own settle). */
void inc_ucx_node_close(inc_ucx_node_t *node);

incmoe_status_t inc_ucx_status(ucs_status_t status);

/* "host:port" -> sockaddr; port 0 allowed only when allow_any_port. */
incmoe_status_t inc_ucx_parse_hostport(const char *text, struct sockaddr_storage *addr,
                                       socklen_t *addr_len, int allow_any_port);
/* The local address this host sends from toward peer (a connected UDP socket's own name: no
   packet leaves); port 0.  0, or -1 when there is no route. */
int inc_ucx_local_toward(const struct sockaddr *peer, socklen_t peer_len,
                         struct sockaddr_storage *local, socklen_t *local_len);
/* sockaddr -> "host:port" */
void inc_ucx_format_sockaddr(const struct sockaddr *sa, char *out, size_t out_len);

/*
 * Sleep until the worker has events or extra_fd (if >= 0) is readable, at most
 * timeout_ms.  Progresses the worker before arming it, as UCX requires.  A node
 * without an event fd sleeps 100 us instead (none when timeout_ms is 0), so its
 * caller sees a readable extra_fd that late at most.
 * Returns 1 when it progressed something, 0 otherwise.
 */
int inc_ucx_node_wait(inc_ucx_node_t *node, int extra_fd, int timeout_ms);

/* Drive a request to completion (bounded by timeout_ms); frees it. */
ucs_status_t inc_ucx_request_wait(inc_ucx_node_t *node, ucs_status_ptr_t request, int timeout_ms);

/* Flushes the worker: what UCX itself still has to send on any endpoint (a wire-up reply to a
   peer that connected last) goes out or fails, within timeout_ms.  Call it before
   ucp_worker_destroy: UCX 1.13 aborts on an assertion when its worker goes with a wire-up reply
   still pending (the assertion was removed upstream, openucx/ucx pull request 8175). */
ucs_status_t inc_ucx_worker_settle(inc_ucx_node_t *node, int timeout_ms);

/*
 * Close an endpoint so that no request is left queued on it (UCX's worker
 * destroy aborts on one).  Graceful: flush, then close, each bounded by
 * timeout_ms; a flush that fails or cannot finish (a stopped peer) turns it
 * into a forced close, which fails what is still queued.  force: no flush.
 */
void inc_ucx_ep_close(inc_ucx_node_t *node, ucp_ep_h ep, int force, int timeout_ms);

/*
 * Send an incmoe message to ep as active message INCMOE_AM_ID: hdr (hdr_len bytes, left in
 * place until cb), then payload (length bytes, registered as memh when memh is not NULL),
 * with flags (UCP_AM_SEND_FLAG_*).  cb runs exactly once: from UCX when the send completed
 * or failed, never within this call when it is posted; at once with the error when it cannot
 * be posted (then with request NULL).  cb frees a non-NULL request.  Returns UCS_OK when the
 * send was posted, else the error cb was given.
 */
ucs_status_t inc_ucx_am_send(ucp_ep_h ep, const void *hdr, size_t hdr_len, const void *payload,
                             size_t length, uint32_t flags, ucp_mem_h memh,
                             ucp_send_nbx_callback_t cb, void *arg);

/*
 * Receive the data of an active message (desc, from the receive callback) into
 * buf, registered as memh when memh is not NULL.  cb runs exactly once: from
 * UCX when the data has landed or failed, or at once with the error when the
 * receive cannot be posted (then with request NULL).  cb frees a non-NULL request.
 */
void inc_ucx_am_recv_data(ucp_worker_h worker, void *desc, void *buf, size_t length, ucp_mem_h memh,
                          ucp_am_recv_data_nbx_callback_t cb, void *arg);

#endif
