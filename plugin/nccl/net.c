/*
 * net.c - NCCL's point-to-point net over UCX tagged messages.
 *
 * One UCX context and worker per process (separate from the client
 * library's), shared by every comm and guarded by one mutex because NCCL may
 * call from several proxy threads.  Nothing here blocks: connect and accept
 * return a NULL comm until the handshake is done, test only progresses.
 *
 * A connection: the listener's sockaddr and a process-unique listen id travel
 * in the handle.  connect() opens a client-server endpoint, receives on its
 * own unique id and sends HELLO(its id) on the listen id; accept() takes the
 * connection request, answers ACK, and from then on the sender tags data with
 * the listen id in the upper half and NCCL's tag in the lower half, so the
 * receiver matches on its own worker without ever mixing two connections.
 * The round trip also finishes UCX's wire-up before the first real send.
 */
#include "plugin.h"
#include "base/config.h"
#include "base/ucx_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include "base/clock.h"

#define HANDLE_MAGIC 0x4e434e49u /* "INCN" */
#define TAG_CTRL     (1ull << 63)
#define TAG_HELLO    1u
#define TAG_ACK      2u
#define ID_LIMIT     0x7fffffffu

struct net_comm;

/* Lives in NCCL's handle; `stage` keeps connect()'s progress between calls. */
typedef struct {
    uint32_t magic;
    uint32_t listen_id;
    uint16_t family;
    uint16_t port; /* network order */
    uint8_t ip[16];
    struct net_comm *stage;
} net_handle_t;
_Static_assert(sizeof(net_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's 128 bytes");

/* One UCX operation; completed by a callback or at once. */
typedef struct {
    int posted, done;
    ucs_status_t status;
    size_t length;
    void *ucx;
    ucp_tag_recv_info_t info;
} net_slot_t;

typedef struct net_comm {
    int is_send;
    uint32_t data_id; /* the receiver's listen id: upper half of every data tag */
    uint32_t own_id;  /* sender: where the ACK arrives */
    ucp_ep_h ep;
    int failed; /* set by the endpoint error callback */
    ucs_status_t fail_status;
    int fail_reported;
    int outstanding;      /* requests handed to NCCL and not yet completed */
    struct net_req *reqs; /* ... listed, so that closing the comm releases them */
    net_slot_t hs_send, hs_recv;
    uint64_t hs_send_buf, hs_recv_buf;
} net_comm_t;

typedef struct {
    uint32_t id;
    ucp_listener_h listener;
    ucp_conn_request_h conn_req; /* set by the connection callback */
    net_comm_t *comm;            /* being accepted */
    int handed_out;
    net_slot_t hello;
    uint64_t hello_buf;
} net_listen_t;

typedef struct net_req {
    net_comm_t *comm;
    struct net_req *prev, *next; /* in comm->reqs */
    int n;
    net_slot_t slot[NET_MAX_RECVS];
} net_req_t;

typedef struct {
    char magic[4]; /* "MRH\0": catches a foreign pointer passed as mhandle */
    int type;
    char *base;
    size_t size;
} net_mr_t;

static struct {
    pthread_mutex_t lock;
    int refs;
    ucp_context_h context;
    ucp_worker_h worker;
    uint32_t next_id;
    struct sockaddr_storage addr;
    unsigned addr_len;
    int timeout_ms;
} net = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t data_tag(uint32_t id, int tag)
{
    return ((uint64_t)id << 32) | (uint32_t)tag;
}

static uint64_t ctrl_tag(uint32_t id, uint32_t what)
{
    return TAG_CTRL | ((uint64_t)id << 32) | what;
}

static uint32_t net_new_id(void)
{
    net.next_id = net.next_id % ID_LIMIT + 1;
    return net.next_id;
}

static void net_progress(void)
{
    for (int i = 0; i < 64 && ucp_worker_progress(net.worker) != 0; i++)
        ;
}

/* ---- UCX callbacks (run inside ucp_worker_progress, under net.lock) ---- */

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

static void net_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    net_comm_t *c = arg;
    if (!c->failed) {
        c->failed = 1;
        c->fail_status = status;
    }
}

static void net_conn_cb(ucp_conn_request_h req, void *arg)
{
    net_listen_t *l = arg;
    /* NCCL pairs every listen handle with exactly one connect. */
    if (l->conn_req != NULL || l->comm != NULL || l->handed_out) {
        ucp_listener_reject(l->listener, req);
        return;
    }
    l->conn_req = req;
}

/* ---- posting ---------------------------------------------------------- */

static void slot_send(ucp_ep_h ep, uint64_t tag, const void *buf, size_t len, net_slot_t *s)
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

static void slot_recv(uint64_t tag, void *buf, size_t len, net_slot_t *s)
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
    ucs_status_ptr_t r = ucp_tag_recv_nbx(net.worker, buf, len, tag, UINT64_MAX, &prm);
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
static void slot_cancel(net_slot_t *s)
{
    if (!s->posted || s->done || s->ucx == NULL)
        return;
    ucp_request_cancel(net.worker, s->ucx);
    double deadline = inc_now_s() + net.timeout_ms / 1000.0;
    while (!s->done && inc_now_s() < deadline) {
        if (ucp_worker_progress(net.worker) == 0)
            usleep(100);
    }
}

/* Progress until r is done, at most net.timeout_ms; frees r (UCX releases it when it ends). */
static ucs_status_t net_request_wait(ucs_status_ptr_t r)
{
    if (r == NULL || UCS_PTR_IS_ERR(r))
        return UCS_PTR_STATUS(r);
    double deadline = inc_now_s() + net.timeout_ms / 1000.0;
    ucs_status_t st;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS && inc_now_s() < deadline) {
        if (ucp_worker_progress(net.worker) == 0)
            usleep(100);
    }
    ucp_request_free(r);
    return st == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : st;
}

/*
 * Bounded: a graceful flush and close, or a forced close when the peer is gone
 * or the flush cannot finish (a stopped peer).  Forcing fails what is still
 * queued on the endpoint: UCX's worker destroy aborts on a request left there.
 */
static void net_ep_close(ucp_ep_h ep, int force)
{
    if (ep == NULL)
        return;
    ucs_status_t st = UCS_ERR_CANCELED;
    if (!force) {
        ucp_request_param_t fp = {.op_attr_mask = 0};
        st = net_request_wait(ucp_ep_flush_nbx(ep, &fp));
    }
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = st == UCS_OK ? 0 : UCP_EP_CLOSE_FLAG_FORCE,
    };
    net_request_wait(ucp_ep_close_nbx(ep, &prm));
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

/* ---- init ------------------------------------------------------------- */

ncclResult_t net_init(void)
{
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSuccess;
    if (net.refs > 0) {
        net.refs++;
        goto out;
    }
    long long timeout_ms;
    if (inc_config_get_int("INCMOE_TIMEOUT_MS", &timeout_ms) != INCMOE_OK) {
        res = ncclInvalidArgument;
        goto out;
    }
    net.timeout_ms = (int)timeout_ms;
    if (plugin_local_addr(&net.addr, &net.addr_len) != 0) {
        res = ncclInvalidArgument;
        goto out;
    }
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        PWARN("ucp_config_read failed: %s", ucs_status_string(st));
        res = ncclSystemError;
        goto out;
    }
    ucp_params_t prm = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    st = ucp_init(&prm, cfg, &net.context);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        PWARN("ucp_init failed: %s", ucs_status_string(st));
        res = ncclSystemError;
        goto out;
    }
    /* Serialized by net.lock: NCCL calls from more than one proxy thread. */
    ucp_worker_params_t wprm = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    st = ucp_worker_create(net.context, &wprm, &net.worker);
    if (st != UCS_OK) {
        PWARN("ucp_worker_create failed: %s", ucs_status_string(st));
        ucp_cleanup(net.context);
        res = ncclSystemError;
        goto out;
    }
    char addr[96];
    inc_ucx_format_sockaddr((struct sockaddr *)&net.addr, addr, sizeof(addr));
    PINFO("point-to-point net over UCX, listening on %s", addr);
    net.refs = 1;
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

static void net_release_locked(void)
{
    ucp_worker_destroy(net.worker); /* closes the endpoints NCCL never closed */
    ucp_cleanup(net.context);
    net.worker = NULL;
    net.context = NULL;
    net.refs = 0;
}

ncclResult_t net_finalize(void)
{
    pthread_mutex_lock(&net.lock);
    if (net.refs > 0 && --net.refs == 0)
        net_release_locked();
    pthread_mutex_unlock(&net.lock);
    return ncclSuccess;
}

/*
 * The v9 and v10 net ABIs have no finalize, so NCCL never says when it is done
 * with the net.  Release UCX when the plugin is unloaded (NCCL dlclose()s it
 * after closing every communicator) or the process exits.  A net call racing
 * with exit() from another thread is not supported.
 */
__attribute__((destructor)) static void net_unload(void)
{
    pthread_mutex_lock(&net.lock);
    if (net.refs > 0)
        net_release_locked();
    pthread_mutex_unlock(&net.lock);
}

ncclResult_t net_devices(int *ndev)
{
    if (ndev == NULL)
        return ncclInvalidArgument;
    *ndev = 1;
    return ncclSuccess;
}

static int net_ready(const char *what)
{
    if (net.refs == 0) {
        PWARN("%s called before init", what);
        return 0;
    }
    return 1;
}

/* ---- connection setup ------------------------------------------------- */

ncclResult_t net_listen(int dev, void *handle, void **listen_comm)
{
    if (plugin_check_dev(dev) != ncclSuccess || handle == NULL || listen_comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSystemError;
    net_listen_t *l = NULL;
    if (!net_ready("listen"))
        goto out;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        goto out;
    l->id = net_new_id();
    ucp_listener_params_t lprm = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&net.addr, .addrlen = net.addr_len},
        .conn_handler = {.cb = net_conn_cb, .arg = l},
    };
    ucs_status_t st = ucp_listener_create(net.worker, &lprm, &l->listener);
    if (st != UCS_OK) {
        char a[96];
        inc_ucx_format_sockaddr((struct sockaddr *)&net.addr, a, sizeof(a));
        PWARN("cannot listen on %s: %s (set INCMOE_NCCL_ADDR to this host's address)", a,
              ucs_status_string(st));
        goto out;
    }
    ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    st = ucp_listener_query(l->listener, &attr);
    if (st != UCS_OK) {
        PWARN("ucp_listener_query failed: %s", ucs_status_string(st));
        ucp_listener_destroy(l->listener);
        goto out;
    }
    net_handle_t *h = handle;
    memset(h, 0, sizeof(*h));
    h->magic = HANDLE_MAGIC;
    h->listen_id = l->id;
    h->family = attr.sockaddr.ss_family;
    if (attr.sockaddr.ss_family == AF_INET) {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&attr.sockaddr;
        h->port = in4->sin_port;
        memcpy(h->ip, &in4->sin_addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&attr.sockaddr;
        h->port = in6->sin6_port;
        memcpy(h->ip, &in6->sin6_addr, 16);
    }
    slot_recv(ctrl_tag(l->id, TAG_HELLO), &l->hello_buf, sizeof(l->hello_buf), &l->hello);
    *listen_comm = l;
    l = NULL;
    res = ncclSuccess;
out:
    free(l);
    pthread_mutex_unlock(&net.lock);
    return res;
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
static void comm_destroy(net_comm_t *c, int force)
{
    slot_cancel(&c->hs_send);
    slot_cancel(&c->hs_recv);
    net_ep_close(c->ep, force || c->failed);
    while (c->reqs != NULL) {
        for (int i = 0; i < c->reqs->n; i++)
            slot_cancel(&c->reqs->slot[i]);
        req_release(c->reqs);
    }
    free(c);
}

ncclResult_t net_connect(int dev, void *handle, void **send_comm)
{
    net_handle_t *h = handle;
    if (plugin_check_dev(dev) != ncclSuccess || h == NULL || send_comm == NULL)
        return ncclInvalidArgument;
    if (h->magic != HANDLE_MAGIC || (h->family != AF_INET && h->family != AF_INET6)) {
        PWARN("connect: the handle is not one of ours (magic %#x, family %u)", h->magic, h->family);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSuccess;
    *send_comm = NULL;
    if (!net_ready("connect")) {
        res = ncclSystemError;
        goto out;
    }
    net_comm_t *c = h->stage;
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            res = ncclSystemError;
            goto out;
        }
        c->is_send = 1;
        c->data_id = h->listen_id;
        c->own_id = net_new_id();
        struct sockaddr_storage peer;
        memset(&peer, 0, sizeof(peer));
        socklen_t peer_len;
        if (h->family == AF_INET) {
            struct sockaddr_in *in4 = (struct sockaddr_in *)&peer;
            in4->sin_family = AF_INET;
            in4->sin_port = h->port;
            memcpy(&in4->sin_addr, h->ip, 4);
            peer_len = sizeof(*in4);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&peer;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = h->port;
            memcpy(&in6->sin6_addr, h->ip, 16);
            peer_len = sizeof(*in6);
        }
        ucp_ep_params_t eprm = {
            .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            .sockaddr = {.addr = (struct sockaddr *)&peer, .addrlen = peer_len},
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = net_ep_error_cb, .arg = c},
        };
        ucs_status_t st = ucp_ep_create(net.worker, &eprm, &c->ep);
        if (st != UCS_OK) {
            char a[96];
            inc_ucx_format_sockaddr((struct sockaddr *)&peer, a, sizeof(a));
            PWARN("connect to %s failed: %s", a, ucs_status_string(st));
            free(c);
            res = ucs_result(st) == ncclInvalidArgument ? ncclSystemError : ucs_result(st);
            goto out;
        }
        slot_recv(ctrl_tag(c->own_id, TAG_ACK), &c->hs_recv_buf, sizeof(c->hs_recv_buf),
                  &c->hs_recv);
        c->hs_send_buf = c->own_id;
        slot_send(c->ep, ctrl_tag(h->listen_id, TAG_HELLO), &c->hs_send_buf, sizeof(c->hs_send_buf),
                  &c->hs_send);
        h->stage = c;
    }
    net_progress();
    ucs_status_t bad = c->hs_send.done && c->hs_send.status != UCS_OK   ? c->hs_send.status
                       : c->hs_recv.done && c->hs_recv.status != UCS_OK ? c->hs_recv.status
                                                                        : UCS_OK;
    if (c->failed || bad != UCS_OK) {
        PWARN("connect: handshake with the listener failed: %s",
              ucs_status_string(c->failed ? c->fail_status : bad));
        h->stage = NULL;
        comm_destroy(c, 1);
        res = ncclRemoteError;
        goto out;
    }
    if (c->hs_send.done && c->hs_recv.done) {
        h->stage = NULL;
        *send_comm = c;
    }
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

ncclResult_t net_accept(void *listen_comm, void **recv_comm)
{
    net_listen_t *l = listen_comm;
    if (l == NULL || recv_comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSuccess;
    *recv_comm = NULL;
    if (l->handed_out) {
        PWARN("accept: this listen comm already accepted its one connection");
        res = ncclInvalidUsage;
        goto out;
    }
    net_progress();
    if (l->comm == NULL && l->conn_req != NULL) {
        net_comm_t *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            res = ncclSystemError;
            goto out;
        }
        c->data_id = l->id;
        ucp_ep_params_t eprm = {
            .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .conn_request = l->conn_req,
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = net_ep_error_cb, .arg = c},
        };
        l->conn_req = NULL;
        ucs_status_t st = ucp_ep_create(net.worker, &eprm, &c->ep);
        if (st != UCS_OK) {
            PWARN("accept: cannot create the endpoint: %s", ucs_status_string(st));
            free(c);
            res = ncclSystemError;
            goto out;
        }
        l->comm = c;
        net_progress();
    }
    net_comm_t *c = l->comm;
    if (c == NULL)
        goto out;
    if (l->hello.done && !c->hs_send.posted) {
        if (l->hello.status != UCS_OK) {
            PWARN("accept: no HELLO from the connecting peer: %s",
                  ucs_status_string(l->hello.status));
            res = ncclRemoteError;
            goto out;
        }
        c->hs_send_buf = l->hello_buf;
        slot_send(c->ep, ctrl_tag((uint32_t)l->hello_buf, TAG_ACK), &c->hs_send_buf,
                  sizeof(c->hs_send_buf), &c->hs_send);
    }
    if (c->failed || (c->hs_send.done && c->hs_send.status != UCS_OK)) {
        PWARN("accept: the connecting peer went away: %s",
              ucs_status_string(c->failed ? c->fail_status : c->hs_send.status));
        l->comm = NULL;
        comm_destroy(c, 1);
        res = ncclRemoteError;
        goto out;
    }
    if (c->hs_send.done) {
        l->comm = NULL;
        l->handed_out = 1;
        *recv_comm = c;
    }
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

/* ---- memory ----------------------------------------------------------- */

ncclResult_t net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    if (comm == NULL || mhandle == NULL || (data == NULL && size != 0))
        return ncclInvalidArgument;
    /* GPU memory only where UCX moves it itself: it then goes to UCX as it is. */
    int supported = plugin_net_ptr_support();
    if ((type & supported) == 0 || (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)) {
        PWARN("regMr: memory type %d is not supported (ptrSupport %#x)", type, supported);
        return ncclInvalidArgument;
    }
    net_mr_t *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return ncclSystemError;
    memcpy(mr->magic, "MRH", 4);
    mr->type = type;
    mr->base = data;
    mr->size = size;
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle)
{
    PWARN("regMrDmaBuf: DMA-BUF memory is not supported (ptrSupport has no NCCL_PTR_DMABUF)");
    return ncclInvalidArgument;
}

ncclResult_t net_dereg_mr(void *comm, void *mhandle)
{
    net_mr_t *mr = mhandle;
    if (mr == NULL || memcmp(mr->magic, "MRH", 4) != 0)
        return ncclInvalidArgument;
    memset(mr->magic, 0, 4);
    free(mr);
    return ncclSuccess;
}

static int mr_covers(const void *mhandle, const void *data, size_t size, const char *what)
{
    const net_mr_t *mr = mhandle;
    if (mr == NULL)
        return 1; /* NCCL may send without registration */
    if (memcmp(mr->magic, "MRH", 4) != 0) {
        PWARN("%s: mhandle %p is not a registration of this net", what, mhandle);
        return 0;
    }
    const char *p = data;
    if (size != 0 &&
        (p < mr->base || size > mr->size || p - mr->base > (ptrdiff_t)(mr->size - size))) {
        PWARN("%s: [%p, +%zu) is outside the registered [%p, +%zu)", what, data, size,
              (void *)mr->base, mr->size);
        return 0;
    }
    return 1;
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
    if (!mr_covers(mhandle, data, size, "isend"))
        return ncclInvalidArgument;
    net_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->n = 1;
    pthread_mutex_lock(&net.lock);
    slot_send(c->ep, data_tag(c->data_id, tag), data, size, &r->slot[0]);
    req_track(c, r);
    pthread_mutex_unlock(&net.lock);
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
            !mr_covers(mhandles ? mhandles[i] : NULL, data[i], sizes[i], "irecv")) {
            PWARN("irecv: receive %d of %d (%p, %zu bytes) is invalid", i, n, data[i], sizes[i]);
            return ncclInvalidArgument;
        }
    }
    net_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return ncclSystemError;
    r->n = n;
    pthread_mutex_lock(&net.lock);
    for (int i = 0; i < n; i++)
        slot_recv(data_tag(c->data_id, tags[i]), data[i], sizes[i], &r->slot[i]);
    req_track(c, r);
    pthread_mutex_unlock(&net.lock);
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
    pthread_mutex_lock(&net.lock);
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
    pthread_mutex_unlock(&net.lock);
    return res;
}

/* ---- teardown --------------------------------------------------------- */

static ncclResult_t net_close_comm(net_comm_t *c)
{
    if (c == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    if (c->outstanding > 0)
        PWARN("closing a %s comm with %d requests still outstanding: they are released",
              c->is_send ? "send" : "recv", c->outstanding);
    comm_destroy(c, 0);
    pthread_mutex_unlock(&net.lock);
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

ncclResult_t net_close_listen(void *listen_comm)
{
    net_listen_t *l = listen_comm;
    if (l == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    if (l->conn_req != NULL)
        ucp_listener_reject(l->listener, l->conn_req);
    ucp_listener_destroy(l->listener);
    if (l->comm != NULL)
        comm_destroy(l->comm, 1);
    slot_cancel(&l->hello);
    free(l);
    pthread_mutex_unlock(&net.lock);
    return ncclSuccess;
}
