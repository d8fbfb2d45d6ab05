/*
 * net.c - NCCL's point-to-point net over UCX tagged messages.
 *
 * One UCX context and worker per process (separate from the client
 * library's), shared by every comm and guarded by one mutex because NCCL may
 * call from several proxy threads.  Nothing here blocks: connect and accept
 * return a NULL comm until the handshake is done, test only progresses.
 *
 * A connection: the address of listen()'s TCP bootstrap socket and a
 * process-unique listen id travel in the handle.  connect() and accept() run
 * the bootstrap handshake (base/bootstrap.h) over it, step by step as NCCL
 * polls them: both prove INCMOE_AUTH_KEY (or INCMOE_AUTH_KEY_FILE's key) when
 * one is set, swap UCX worker addresses, and the connector learns a session
 * token.  Each side then creates an endpoint from the other's worker address;
 * connect() receives on its own unique id and sends HELLO(its id, the token)
 * on the listen id; accept() takes only a HELLO with its session's token,
 * answers ACK, and from then on the sender tags data with the listen id in
 * the upper half and NCCL's tag in the lower half, so the receiver matches on
 * its own worker without ever mixing two connections.  The round trip also
 * finishes UCX's wire-up before the first real send.  UCX listens on nothing.
 */
#define _GNU_SOURCE /* accept4 */
#include "plugin.h"
#include "base/bootstrap.h"
#include "base/config.h"
#include "base/keyfile.h"
#include "base/ucx_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
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
#define NET_PENDING  4 /* bootstrap connections one listen comm handshakes with at once */

/* HELLO over UCX: where the connector receives the ACK, and the bootstrap's token. */
typedef struct {
    uint64_t id;
    uint8_t token[INC_BOOT_TOKEN];
} net_hello_t;

/* Lives in NCCL's handle; `stage` keeps connect()'s handshake between calls. */
typedef struct {
    uint32_t magic;
    uint32_t listen_id;
    uint16_t family;
    uint16_t port; /* network order */
    uint8_t ip[16];
    struct net_connect *stage;
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

/* A connection NCCL holds, once its handshake is done. */
typedef struct net_comm {
    int is_send;
    uint32_t data_id; /* the receiver's listen id: upper half of every data tag */
    ucp_ep_h ep;
    int failed; /* set by the endpoint error callback */
    ucs_status_t fail_status;
    int fail_reported;
    int outstanding;      /* requests handed to NCCL and not yet completed */
    struct net_req *reqs; /* ... listed, so that closing the comm releases them */
} net_comm_t;

/* listen()'s comm: the bootstrap socket and accept()'s handshake over it. */
typedef struct {
    uint32_t id; /* HELLO's tag, and the upper half of every data tag of the comm it makes */
    int fd;      /* the bootstrap listener; closed once its one connection is made */
    struct net_accept *accept;
} net_listen_t;

/* connect()'s handshake, one per handle.  Which fields hold depends on the state. */
typedef enum {
    CONNECT_TCP,   /* the TCP connection to listen()'s socket is being made */
    CONNECT_BOOT,  /* the bootstrap runs over it: keys proven, worker addresses swapped */
    CONNECT_HELLO, /* the endpoint exists; HELLO sent on the listen id, ACK awaited on own_id */
    CONNECT_DONE,  /* both completed: the comm goes to NCCL */
} connect_state_t;

struct net_connect {
    connect_state_t state;
    uint32_t listen_id, own_id; /* where HELLO goes, where the ACK comes */
    double deadline;            /* TCP and BOOT's: the bootstrap's bound */
    int fd;                     /* TCP and BOOT: the bootstrap connection */
    inc_boot_t boot;            /* BOOT */
    net_comm_t *comm;           /* HELLO */
    net_slot_t hello, ack;
    net_hello_t hello_buf;
    uint64_t ack_buf;
};

/* One connection to listen()'s socket, bootstrapping. */
typedef struct {
    int fd; /* -1: a free place */
    double deadline;
    inc_boot_t *boot;
} net_pending_t;

/* accept()'s handshake, one per listen comm. */
typedef enum {
    ACCEPT_BOOT,  /* taking connections on listen()'s socket and bootstrapping them */
    ACCEPT_HELLO, /* an endpoint to the first that finished; its HELLO awaited */
    ACCEPT_ACK,   /* the HELLO showed that bootstrap's token; the ACK is going out */
    ACCEPT_DONE,  /* the one connection went to NCCL */
} accept_state_t;

struct net_accept {
    accept_state_t state;
    net_pending_t pending[NET_PENDING]; /* any state but DONE */
    uint8_t token[INC_BOOT_TOKEN];      /* HELLO: the bootstrapped session's, which HELLO shows */
    net_comm_t *comm;                   /* HELLO, ACK */
    net_slot_t hello, ack;
    net_hello_t hello_buf;
    uint64_t ack_buf;
};

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
    inc_ucx_node_t node; /* tags, no wakeup: NCCL polls */
    uint32_t next_id;
    struct sockaddr_storage addr;
    unsigned addr_len;
    int timeout_ms;
    ucp_address_t *worker_addr; /* handed to peers by the bootstrap */
    size_t worker_addr_len;
    char key[INCMOE_MAX_SECRET];
    size_t key_len; /* 0: keyless */
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
    for (int i = 0; i < 64 && ucp_worker_progress(net.node.worker) != 0; i++)
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
    ucs_status_ptr_t r = ucp_tag_recv_nbx(net.node.worker, buf, len, tag, UINT64_MAX, &prm);
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
    ucp_request_cancel(net.node.worker, s->ucx);
    double deadline = inc_now_s() + net.timeout_ms / 1000.0;
    while (!s->done && inc_now_s() < deadline)
        inc_ucx_node_wait(&net.node, -1, 10);
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

/* The key both ends of a connection prove: INCMOE_AUTH_KEY, else INCMOE_AUTH_KEY_FILE's. */
static int net_read_key(void)
{
    const char *key = inc_config_get_str("INCMOE_AUTH_KEY");
    const char *file = inc_config_get_str("INCMOE_AUTH_KEY_FILE");
    net.key_len = 0;
    if (key != NULL) {
        if (strlen(key) > INCMOE_MAX_SECRET) {
            PWARN("INCMOE_AUTH_KEY is %zu bytes: it must be 1..%d bytes", strlen(key),
                  INCMOE_MAX_SECRET);
            return -1;
        }
        net.key_len = strlen(key);
        memcpy(net.key, key, net.key_len);
    } else if (file != NULL) {
        char why[256];
        if (inc_keyfile_read(file, net.key, &net.key_len, why, sizeof(why)) != INCMOE_OK) {
            PWARN("INCMOE_AUTH_KEY_FILE: %s", why);
            return -1;
        }
    }
    return 0;
}

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
    if (net_read_key() != 0) {
        res = ncclInvalidArgument;
        goto out;
    }
    if (plugin_local_addr(&net.addr, &net.addr_len) != 0) {
        res = ncclInvalidArgument;
        goto out;
    }
    /* Serialized by net.lock: NCCL calls from more than one proxy thread. */
    if (inc_ucx_node_open_with(&net.node, UCP_FEATURE_TAG, UCS_THREAD_MODE_SERIALIZED) !=
        INCMOE_OK) {
        res = ncclSystemError;
        goto out;
    }
    ucs_status_t st =
        ucp_worker_get_address(net.node.worker, &net.worker_addr, &net.worker_addr_len);
    if (st != UCS_OK || net.worker_addr_len > INC_BOOT_MAX_ADDR) {
        PWARN("the worker's UCX address: %s (%zu bytes, at most %d)", ucs_status_string(st),
              st == UCS_OK ? net.worker_addr_len : 0, INC_BOOT_MAX_ADDR);
        if (st == UCS_OK)
            ucp_worker_release_address(net.node.worker, net.worker_addr);
        inc_ucx_node_close(&net.node);
        res = ncclSystemError;
        goto out;
    }
    char addr[96];
    inc_ucx_format_sockaddr((struct sockaddr *)&net.addr, addr, sizeof(addr));
    PINFO("point-to-point net over UCX, bootstrapping on %s (%s)", addr,
          net.key_len ? "keyed" : "no key: anyone reaching the port can connect");
    net.refs = 1;
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

static void net_release_locked(void)
{
    ucp_worker_release_address(net.node.worker, net.worker_addr);
    net.worker_addr = NULL;
    OPENSSL_cleanse(net.key, sizeof(net.key));
    inc_ucx_node_close(&net.node); /* closes the endpoints NCCL never closed */
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

/* A non-blocking TCP listener on this host's address, any port. */
static int listen_socket(struct sockaddr_storage *bound)
{
    int fd = socket(net.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage a = net.addr;
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&a)->sin6_port = 0;
    socklen_t len = sizeof(*bound);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, net.addr_len) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)bound, &len) != 0) {
        char text[96];
        inc_ucx_format_sockaddr((struct sockaddr *)&a, text, sizeof(text));
        PWARN("cannot listen on %s: %s (set INCMOE_NCCL_ADDR to this host's address)", text,
              strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
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
    inc_ucx_ep_close(&net.node, c->ep, force || c->failed, net.timeout_ms);
    while (c->reqs != NULL) {
        for (int i = 0; i < c->reqs->n; i++)
            slot_cancel(&c->reqs->slot[i]);
        req_release(c->reqs);
    }
    free(c);
}

/* An endpoint to the worker address a bootstrap received, with the new comm's error handler:
   the one place a peer's address reaches UCX.  NULL: logged. */
static net_comm_t *comm_create(int is_send, uint32_t data_id, const inc_boot_t *b, const char *what)
{
    net_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        PWARN("%s: out of memory", what);
        return NULL;
    }
    c->is_send = is_send;
    c->data_id = data_id;
    ucp_ep_params_t eprm = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)b->peer_addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = net_ep_error_cb, .arg = c},
    };
    ucs_status_t st = ucp_ep_create(net.node.worker, &eprm, &c->ep);
    if (st != UCS_OK) {
        PWARN("%s: no endpoint to the peer's worker: %s", what, ucs_status_string(st));
        free(c);
        return NULL;
    }
    return c;
}

/* ---- connect()'s side ---------------------------------------------------- */

/* Undo whatever the handshake's state holds: the socket, the comm and its two messages. */
static void connect_free(struct net_connect *s)
{
    if (s->fd >= 0)
        close(s->fd);
    inc_boot_clear(&s->boot);
    if (s->comm != NULL)
        comm_destroy(s->comm, 1); /* fails a HELLO still queued */
    slot_cancel(&s->ack);
    slot_cancel(&s->hello);
    free(s);
}

/* connect()'s first call: the TCP connection to the listener starts. */
static struct net_connect *connect_start(const net_handle_t *h)
{
    struct net_connect *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->state = CONNECT_TCP;
    s->fd = -1;
    s->listen_id = h->listen_id;
    s->own_id = net_new_id();
    s->deadline = inc_now_s() + net.timeout_ms / 1000.0;
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
    inc_boot_t *b = &s->boot;
    if (inc_boot_init(b, INC_BOOT_CLIENT, net.key, net.key_len, net.worker_addr,
                      net.worker_addr_len) != INCMOE_IN_PROGRESS) {
        PWARN("connect: %s", b->why);
        connect_free(s);
        return NULL;
    }
    s->fd = inc_boot_connect_start((struct sockaddr *)&peer, peer_len, b->why, sizeof(b->why));
    if (s->fd < 0) {
        char a[96];
        inc_ucx_format_sockaddr((struct sockaddr *)&peer, a, sizeof(a));
        PWARN("connect to %s failed: %s", a, b->why);
        connect_free(s);
        return NULL;
    }
    return s;
}

static ncclResult_t connect_tcp(struct net_connect *s)
{
    int r = inc_boot_connect_done(s->fd, s->boot.why, sizeof(s->boot.why));
    if (r < 0) {
        PWARN("connect: %s", s->boot.why);
        return ncclRemoteError;
    }
    if (r == 0)
        s->state = CONNECT_BOOT;
    return ncclSuccess;
}

/* Once the bootstrap is done: the endpoint, the ACK's receive, HELLO; the socket is closed. */
static ncclResult_t connect_boot(struct net_connect *s)
{
    short events;
    incmoe_status_t st = inc_boot_io(&s->boot, s->fd, &events);
    if (st == INCMOE_IN_PROGRESS)
        return ncclSuccess;
    if (st != INCMOE_OK) {
        PWARN("connect: bootstrap: %s (%s)", s->boot.why, incmoe_strerror(st));
        return ncclRemoteError;
    }
    s->comm = comm_create(1, s->listen_id, &s->boot, "connect");
    if (s->comm == NULL)
        return ncclRemoteError;
    slot_recv(ctrl_tag(s->own_id, TAG_ACK), &s->ack_buf, sizeof(s->ack_buf), &s->ack);
    s->hello_buf.id = s->own_id;
    memcpy(s->hello_buf.token, s->boot.token, INC_BOOT_TOKEN);
    slot_send(s->comm->ep, ctrl_tag(s->listen_id, TAG_HELLO), &s->hello_buf, sizeof(s->hello_buf),
              &s->hello);
    close(s->fd);
    s->fd = -1;
    inc_boot_clear(&s->boot);
    s->state = CONNECT_HELLO;
    return ncclSuccess;
}

static ncclResult_t connect_hello(struct net_connect *s)
{
    net_progress();
    ucs_status_t bad = s->hello.done && s->hello.status != UCS_OK ? s->hello.status
                       : s->ack.done && s->ack.status != UCS_OK   ? s->ack.status
                                                                  : UCS_OK;
    if (s->comm->failed || bad != UCS_OK) {
        PWARN("connect: handshake with the listener failed: %s",
              ucs_status_string(s->comm->failed ? s->comm->fail_status : bad));
        return ncclRemoteError;
    }
    if (s->hello.done && s->ack.done)
        s->state = CONNECT_DONE;
    return ncclSuccess;
}

/* One step in the handshake's current state; the state moves on or stays. */
static ncclResult_t connect_step(struct net_connect *s)
{
    if ((s->state == CONNECT_TCP || s->state == CONNECT_BOOT) && inc_now_s() > s->deadline) {
        PWARN("connect: the bootstrap with the listener did not finish within %d ms",
              net.timeout_ms);
        return ncclRemoteError;
    }
    switch (s->state) {
    case CONNECT_TCP:
        return connect_tcp(s);
    case CONNECT_BOOT:
        return connect_boot(s);
    case CONNECT_HELLO:
        return connect_hello(s);
    case CONNECT_DONE:
        break;
    }
    return ncclSuccess;
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
    if (h->stage == NULL && (h->stage = connect_start(h)) == NULL) {
        res = ncclSystemError;
        goto out;
    }
    struct net_connect *s = h->stage;
    connect_state_t was;
    do {
        was = s->state;
        res = connect_step(s);
    } while (res == ncclSuccess && s->state != was && s->state != CONNECT_DONE);
    if (res == ncclSuccess && s->state == CONNECT_DONE) {
        *send_comm = s->comm;
        s->comm = NULL;
    }
    if (res != ncclSuccess || s->state == CONNECT_DONE) {
        connect_free(s);
        h->stage = NULL;
    }
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

/* ---- accept()'s side ----------------------------------------------------- */

static struct net_accept *accept_new(void)
{
    struct net_accept *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->state = ACCEPT_BOOT;
    for (int i = 0; i < NET_PENDING; i++)
        a->pending[i].fd = -1;
    return a;
}

static void pending_drop(net_pending_t *p)
{
    close(p->fd);
    p->fd = -1;
    inc_boot_clear(p->boot);
    free(p->boot);
    p->boot = NULL;
}

/* Back to ACCEPT_BOOT after the comm failed: nothing of that connection is kept. */
static ncclResult_t accept_fail(struct net_accept *a)
{
    comm_destroy(a->comm, 1); /* fails an ACK still queued */
    a->comm = NULL;
    slot_cancel(&a->hello);
    slot_cancel(&a->ack);
    memset(a->token, 0, sizeof(a->token));
    a->state = ACCEPT_BOOT;
    return ncclRemoteError;
}

static void accept_free(struct net_accept *a)
{
    for (int i = 0; i < NET_PENDING; i++)
        if (a->pending[i].fd >= 0)
            pending_drop(&a->pending[i]);
    if (a->comm != NULL)
        accept_fail(a);
    free(a);
}

/* Take new connections on the bootstrap socket while a place is free (the rest wait in
   the backlog); a connection past its deadline is dropped. */
static void accept_tcp(net_listen_t *l)
{
    double now = inc_now_s();
    for (int i = 0; i < NET_PENDING; i++) {
        net_pending_t *p = &l->accept->pending[i];
        if (p->fd >= 0 && now > p->deadline) {
            PWARN("accept: a connection did not finish the bootstrap within %d ms", net.timeout_ms);
            pending_drop(p);
        }
        if (p->fd >= 0)
            continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        p->boot = malloc(sizeof(*p->boot));
        if (p->boot == NULL) {
            close(fd);
            return;
        }
        p->fd = fd;
        p->deadline = now + net.timeout_ms / 1000.0;
        inc_boot_init(p->boot, INC_BOOT_SERVER, net.key, net.key_len, net.worker_addr,
                      net.worker_addr_len);
    }
}

/* Move the bootstraps on; the first to finish gets the endpoint and HELLO's receive.
   ncclSystemError: out of memory or UCX refused the endpoint. */
static ncclResult_t accept_boot(net_listen_t *l)
{
    struct net_accept *a = l->accept;
    accept_tcp(l);
    for (int i = 0; i < NET_PENDING; i++) {
        net_pending_t *p = &a->pending[i];
        if (p->fd < 0)
            continue;
        short events;
        incmoe_status_t st = inc_boot_io(p->boot, p->fd, &events);
        if (st == INCMOE_IN_PROGRESS)
            continue;
        if (st != INCMOE_OK) {
            PWARN("accept: bootstrap: %s (%s)", p->boot->why, incmoe_strerror(st));
            pending_drop(p);
            continue;
        }
        a->comm = comm_create(0, l->id, p->boot, "accept");
        if (a->comm != NULL)
            memcpy(a->token, p->boot->token, INC_BOOT_TOKEN);
        pending_drop(p);
        if (a->comm == NULL)
            return ncclSystemError;
        slot_recv(ctrl_tag(l->id, TAG_HELLO), &a->hello_buf, sizeof(a->hello_buf), &a->hello);
        a->state = ACCEPT_HELLO;
        break;
    }
    return ncclSuccess;
}

/* HELLO with the bootstrap's token: answer ACK on the id it names.  Another is ignored. */
static ncclResult_t accept_hello(net_listen_t *l)
{
    struct net_accept *a = l->accept;
    if (a->comm->failed) {
        PWARN("accept: the connecting peer went away: %s", ucs_status_string(a->comm->fail_status));
        return accept_fail(a);
    }
    if (!a->hello.done)
        return ncclSuccess;
    if (a->hello.status != UCS_OK) {
        PWARN("accept: no HELLO from the connecting peer: %s", ucs_status_string(a->hello.status));
        return accept_fail(a);
    }
    if (a->hello.length != sizeof(a->hello_buf) ||
        CRYPTO_memcmp(a->hello_buf.token, a->token, INC_BOOT_TOKEN) != 0) {
        /* Not the peer that bootstrapped: wait on for the one that did. */
        PWARN("accept: ignored a HELLO without this connection's bootstrap token");
        slot_recv(ctrl_tag(l->id, TAG_HELLO), &a->hello_buf, sizeof(a->hello_buf), &a->hello);
        return ncclSuccess;
    }
    a->ack_buf = a->hello_buf.id;
    slot_send(a->comm->ep, ctrl_tag((uint32_t)a->hello_buf.id, TAG_ACK), &a->ack_buf,
              sizeof(a->ack_buf), &a->ack);
    a->state = ACCEPT_ACK;
    return ncclSuccess;
}

static ncclResult_t accept_ack(struct net_accept *a)
{
    if (a->comm->failed || (a->ack.done && a->ack.status != UCS_OK)) {
        PWARN("accept: the connecting peer went away: %s",
              ucs_status_string(a->comm->failed ? a->comm->fail_status : a->ack.status));
        return accept_fail(a);
    }
    if (a->ack.done)
        a->state = ACCEPT_DONE;
    return ncclSuccess;
}

/* One step in the handshake's current state; the state moves on or stays. */
static ncclResult_t accept_step(net_listen_t *l)
{
    net_progress();
    switch (l->accept->state) {
    case ACCEPT_BOOT:
        return accept_boot(l);
    case ACCEPT_HELLO:
        return accept_hello(l);
    case ACCEPT_ACK:
        return accept_ack(l->accept);
    case ACCEPT_DONE:
        break;
    }
    return ncclSuccess;
}

ncclResult_t net_accept(void *listen_comm, void **recv_comm)
{
    net_listen_t *l = listen_comm;
    if (l == NULL || recv_comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSuccess;
    struct net_accept *a = l->accept;
    *recv_comm = NULL;
    if (a->state == ACCEPT_DONE) {
        PWARN("accept: this listen comm already accepted its one connection");
        res = ncclInvalidUsage;
        goto out;
    }
    accept_state_t was;
    do {
        was = a->state;
        res = accept_step(l);
    } while (res == ncclSuccess && a->state != was && a->state != ACCEPT_DONE);
    if (res == ncclSuccess && a->state == ACCEPT_DONE) {
        close(l->fd); /* its one connection is made: nothing more to accept */
        l->fd = -1;
        *recv_comm = a->comm;
        a->comm = NULL;
    }
out:
    pthread_mutex_unlock(&net.lock);
    return res;
}

/* ---- listening ---------------------------------------------------------- */

ncclResult_t net_listen(int dev, void *handle, void **listen_comm)
{
    if (plugin_check_dev(dev) != ncclSuccess || handle == NULL || listen_comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net.lock);
    ncclResult_t res = ncclSystemError;
    net_listen_t *l = NULL;
    struct sockaddr_storage bound;
    if (!net_ready("listen"))
        goto out;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        goto out;
    l->id = net_new_id();
    l->accept = accept_new();
    if (l->accept == NULL)
        goto out;
    l->fd = listen_socket(&bound);
    if (l->fd < 0)
        goto out;
    net_handle_t *h = handle;
    memset(h, 0, sizeof(*h));
    h->magic = HANDLE_MAGIC;
    h->listen_id = l->id;
    h->family = bound.ss_family;
    if (bound.ss_family == AF_INET) {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&bound;
        h->port = in4->sin_port;
        memcpy(h->ip, &in4->sin_addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&bound;
        h->port = in6->sin6_port;
        memcpy(h->ip, &in6->sin6_addr, 16);
    }
    *listen_comm = l;
    l = NULL;
    res = ncclSuccess;
out:
    if (l != NULL)
        free(l->accept);
    free(l);
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
    accept_free(l->accept);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
    pthread_mutex_unlock(&net.lock);
    return ncclSuccess;
}
