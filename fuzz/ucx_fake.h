/*
 * ucx_fake.h - the UCX the fuzz targets link instead of libucp/libucs: no
 * transport at all.  The calls on the message path (active-message send and
 * rendezvous receive, request completion and free, worker progress and
 * destroy, endpoint flush and close, status names) keep their requests in one
 * queue that the harness completes when its input says so; the calls that set
 * a transport up (contexts, workers, listeners, endpoints, memory mapping)
 * are not on any path a harness drives and abort, naming themselves, if
 * reached.
 */
#ifndef INCMOE_FUZZ_UCX_FAKE_H
#define INCMOE_FUZZ_UCX_FAKE_H

#include <stddef.h>

#include <ucp/api/ucp.h>

/* Handles a harness puts where the code expects a worker, a context and an endpoint. */
#define FAKE_UCX_WORKER  ((ucp_worker_h)(uintptr_t)0x1000)
#define FAKE_UCX_CONTEXT ((ucp_context_h)(uintptr_t)0x2000)
#define FAKE_UCX_EP      ((ucp_ep_h)(uintptr_t)0x3000)

/* Called on every ucp_am_send_nbx before it is queued: the harness checks the message. */
typedef void (*fake_ucx_send_hook_t)(ucp_ep_h ep, const void *header, size_t header_length,
                                     const void *payload, size_t length,
                                     const ucp_request_param_t *param);
/* Called on every ucp_am_recv_data_nbx: the harness checks where the data goes. */
typedef void (*fake_ucx_recv_hook_t)(void *buf, size_t length, ucp_mem_h memh);

void fake_ucx_set_hooks(fake_ucx_send_hook_t send, fake_ucx_recv_hook_t recv);

/* A rendezvous payload: what the data descriptor of a receive callback stands for. */
void *fake_ucx_desc_new(const void *payload, size_t length);
/* The descriptor was refused (the callback did not answer UCS_INPROGRESS). */
void fake_ucx_desc_free(void *desc);

/* The next n sends fail at once with status (UCX returns an error pointer). */
void fake_ucx_fail_sends(int n, ucs_status_t status);
/* Complete the n oldest pending sends / receives with status; returns how many. */
int fake_ucx_complete_sends(int n, ucs_status_t status);
int fake_ucx_complete_recvs(int n, ucs_status_t status);
/* Receives posted since the last call (to tie a receive to the message that posted it). */
int fake_ucx_take_recvs_posted(void);
/* Requests not yet completed, and requests completed but never freed. */
int fake_ucx_pending(void);
int fake_ucx_unfreed(void);

#endif
