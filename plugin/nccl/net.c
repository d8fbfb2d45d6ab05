/*
 * net.c - the NCCL net's data path: tagged sends and receives on the comms
 * the handshake (net_handshake.c) made, their completion, and a comm's end.
 *
 * A data tag carries the connection's data id in its upper half and NCCL's
 * tag in the lower (net.h), so every comm's receives match on the one
 * process-wide worker without mixing two connections, and a sender without
 * the connection's bootstrap token hits one only by chance.  Nothing here blocks:
 * test() only progresses the worker.
 */
#include "net.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

typedef struct net_req {
    net_comm_t *comm;
    struct net_req *prev, *next; /* in comm->reqs */
    int n;
    net_slot_t slot[NET_MAX_RECVS];
} net_req_t;

static uint64_t data_tag(uint32_t id, int tag)
{
    return ((uint64_t)id << 32) | (uint32_t)tag;
}

/* ---- UCX callbacks (run inside ucp_worker_progress, under net_proc.lock) ---- */

static void net_send_cb(void *request, ucs_status_t status, void *user_data)
{
    net_slot_t *s = user_data;
    s->status = status;
    s->ucx = NULL;
    s->done = 1;
    ucp_request_free(request);
}

static void net_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    net_slot_t *s = user_data;
    s->status = status;
    s->length = status == UCS_OK ? info->length : 0;
    s->ucx = NULL;
    s->done = 1;
    ucp_request_free(request);
}

/* ---- posting ---------------------------------------------------------- */

void net_slot_send(ucp_ep_h ep, uint64_t tag, const void *buf, size_t len, net_slot_t *s)
{
    memset(s, 0, sizeof(*s));
    s->posted = 1;
    s->length = len;
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = net_send_cb,
        .user_data = s,
    };
    ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &prm);
    if (r == NULL) {
        s->done = 1;
    } else if (UCS_PTR_IS_ERR(r)) {
        s->status = UCS_PTR_STATUS(r);
        s->done = 1;
    } else {
        s->ucx = r;
    }
}

void net_slot_recv(uint64_t tag, void *buf, size_t len, net_slot_t *s)
{
    memset(s, 0, sizeof(*s));
    s->posted = 1;
    /* UCX 1.13 leaves recv_info unset on immediate completion: always take the callback. */
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = net_recv_cb,
        .user_data = s,
        .recv_info.tag_info = &s->info,
    };
    ucs_status_ptr_t r = ucp_tag_recv_nbx(net_proc.node.worker, buf, len, tag, UINT64_MAX, &prm);
    if (r == NULL) {
        s->length = s->info.length;
        s->done = 1;
    } else if (UCS_PTR_IS_ERR(r)) {
        s->status = UCS_PTR_STATUS(r);
        s->done = 1;
    } else if (!s->done) {
        s->ucx = r; /* else the callback already ran (and released it) */
    }
}

/* Cancel a pending operation and wait (bounded) for its callback, so the slot can be freed. */
void net_slot_cancel(net_slot_t *s)
{
    if (!s->posted || s->done || s->ucx == NULL)
        return;
    ucp_request_cancel(net_proc.node.worker, s->ucx);
    double deadline = inc_now_s() + net_proc.timeout_ms / 1000.0;
    while (!s->done && inc_now_s() < deadline)
        inc_ucx_node_wait(&net_proc.node, -1, 10);
}

static ncclResult_t ucs_result(ucs_status_t st)
{
    switch (st) {
    case UCS_OK:
        return ncclSuccess;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_MESSAGE_TRUNCATED:
        return ncclRemoteError;
    case UCS_ERR_INVALID_PARAM:
        return ncclInvalidArgument;
    default:
        return ncclSystemError;
    }
}

static ncclResult_t comm_failure(net_comm_t *c, const char *what)
{
    if (!c->fail_reported) {
        c->fail_reported = 1;
        PWARN("%s: the connection to the peer failed (%s)", what,
              ucs_status_string(c->fail_status));
    }
    return ncclRemoteError;
}

/* Requests are listed on their comm until test() completes them or the comm closes. */
static void req_track(net_comm_t *c, net_req_t *r)
{
    r->comm = c;
    r->prev = NULL;
    r->next = c->reqs;
    if (c->reqs != NULL)
        c->reqs->prev = r;
    c->reqs = r;
    c->outstanding++;
}

static void req_release(net_req_t *r)
{
    net_comm_t *c = r->comm;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    c->outstanding--;
    free(r);
}

/*
 * Closing the endpoint completes its pending sends; pending receives are
 * cancelled.  Requests NCCL never completed (it closes after an error without
 * testing them again) are released here: their pointers die with the comm.
 */
void net_comm_destroy(net_comm_t *c, int force)
{
    inc_ucx_ep_close(&net_proc.node, c->ep, force || c->failed, net_proc.timeout_ms);
    if (!c->is_send)
        net_data_id_release(c->data_id);
    while (c->reqs != NULL) {
        for (int i = 0; i < c->reqs->n; i++)
            net_slot_cancel(&c->reqs->slot[i]);
        req_release(c->reqs);
    }
    free(c);
}

/* ---- data ------------------------------------------------------------- */

ncclResult_t net_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                       void **request)
{
    net_comm_t *c = send_comm;
    if (c == NULL || request == NULL || !c->is_send || (data == NULL && size != 0))
        return ncclInvalidArgument;
    if (size > PLUGIN_MAX_BYTES) {
        PWARN("isend: %zu bytes exceed maxP2pBytes %zu", size, PLUGIN_MAX_BYTES);
        return ncclInvalidArgument;
    }
    if (!net_mr_covers(mhandle, data, size, "isend"))
        return ncclInvalidArgument;
    net_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->n = 1;
    pthread_mutex_lock(&net_proc.lock);
    net_slot_send(c->ep, data_tag(c->data_id, tag), data, size, &r->slot[0]);
    req_track(c, r);
    pthread_mutex_unlock(&net_proc.lock);
    *request = r;
    return ncclSuccess;
}

ncclResult_t net_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                       void **mhandles, void **request)
{
    net_comm_t *c = recv_comm;
    if (c == NULL || request == NULL || c->is_send || data == NULL || sizes == NULL || tags == NULL)
        return ncclInvalidArgument;
    if (n < 1 || n > NET_MAX_RECVS) {
        PWARN("irecv: %d receives in one group; expected 1..%d", n, NET_MAX_RECVS);
        return ncclInvalidArgument;
    }
    for (int i = 0; i < n; i++) {
        if ((data[i] == NULL && sizes[i] != 0) || sizes[i] > PLUGIN_MAX_BYTES ||
            !net_mr_covers(mhandles ? mhandles[i] : NULL, data[i], sizes[i], "irecv")) {
            PWARN("irecv: receive %d of %d (%p, %zu bytes) is invalid", i, n, data[i], sizes[i]);
            return ncclInvalidArgument;
        }
    }
    net_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->n = n;
    pthread_mutex_lock(&net_proc.lock);
    for (int i = 0; i < n; i++)
        net_slot_recv(data_tag(c->data_id, tags[i]), data[i], sizes[i], &r->slot[i]);
    req_track(c, r);
    pthread_mutex_unlock(&net_proc.lock);
    *request = r;
    return ncclSuccess;
}

/*
 * Nothing to flush: UCX completes a receive once the bytes are in place, in
 * host memory and, where it moves CUDA memory, after its own copy into the
 * GPU finished.  forceFlush is 0, so NCCL calls this only with GPUDirect.
 */
ncclResult_t net_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                        void **request)
{
    if (recv_comm == NULL || request == NULL)
        return ncclInvalidArgument;
    *request = NULL;
    return ncclSuccess;
}

ncclResult_t net_test(void *request, int *done, int *sizes)
{
    net_req_t *r = request;
    if (r == NULL || done == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net_proc.lock);
    ncclResult_t res = ncclSuccess;
    *done = 0;
    net_progress();
    int all = 1;
    for (int i = 0; i < r->n; i++) {
        net_slot_t *s = &r->slot[i];
        if (!s->done) {
            all = 0;
        } else if (s->status != UCS_OK) {
            PWARN("test: %s %d of %d failed: %s%s", r->comm->is_send ? "send" : "receive", i, r->n,
                  ucs_status_string(s->status),
                  s->status == UCS_ERR_MESSAGE_TRUNCATED ? " (sent more than the posted size)"
                                                         : "");
            res = ucs_result(s->status);
            goto out; /* the request stays allocated: other slots may still complete */
        }
    }
    if (!all) {
        if (r->comm->failed)
            res = comm_failure(r->comm, r->comm->is_send ? "isend" : "irecv");
        goto out;
    }
    if (sizes != NULL)
        for (int i = 0; i < r->n; i++)
            sizes[i] = (int)r->slot[i].length;
    req_release(r);
    *done = 1;
out:
    pthread_mutex_unlock(&net_proc.lock);
    return res;
}

/* ---- teardown --------------------------------------------------------- */

static ncclResult_t net_close_comm(net_comm_t *c)
{
    if (c == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net_proc.lock);
    if (c->outstanding > 0)
        PWARN("closing a %s comm with %d requests still outstanding: they are released",
              c->is_send ? "send" : "recv", c->outstanding);
    net_comm_destroy(c, 0);
    pthread_mutex_unlock(&net_proc.lock);
    return ncclSuccess;
}

ncclResult_t net_close_send(void *send_comm)
{
    return net_close_comm(send_comm);
}

ncclResult_t net_close_recv(void *recv_comm)
{
    return net_close_comm(recv_comm);
}
