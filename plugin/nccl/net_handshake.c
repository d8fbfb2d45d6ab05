/*
 * net_handshake.c - how the NCCL net makes a connection, step by step as NCCL
 * polls connect() and accept(); nothing here blocks.
 *
 * The address of listen()'s TCP bootstrap socket and a process-unique listen
 * id travel in the handle.  connect() and accept() run the bootstrap handshake
 * (base/bootstrap.h) over it: both prove INCMOE_AUTH_KEY (or
 * INCMOE_AUTH_KEY_FILE's key) when one is set, swap UCX worker addresses, and
 * the connector learns a session token, which accept() chose so that its 31
 * bits of data id (net.h) name no other connection its process receives on.
 * Each side then creates an endpoint from the other's worker address;
 * connect() receives on its own unique id and sends HELLO(its id, the token)
 * on the listen id; accept() takes only a HELLO with its session's token and
 * answers ACK(the token), which connect() takes only with that token too.
 * From then on the sender tags data with the token's data id, so the receiver
 * matches on its own worker without ever mixing two connections, and nobody
 * outside the handshake knows the tag.  The round trip also finishes UCX's
 * wire-up before the first real send.
 *
 * This file is the one place where a peer's worker address is received (the
 * bootstrap, which holds it to inc_ucx_addr_check against this worker's own
 * and fails on one UCX could not unpack) and handed to UCX (comm_create).
 */
#define _GNU_SOURCE /* accept4 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "net.h"

#include "base/clock.h"

#define TAG_HELLO   1u
#define TAG_ACK     2u
#define NET_PENDING 4 /* bootstrap connections one listen comm handshakes with at once */

/* HELLO over UCX: where the connector receives the ACK, and the bootstrap's token. */
typedef struct {
    uint64_t id;
    uint8_t token[INC_BOOT_TOKEN];
} net_hello_t;

/* connect()'s handshake, one per handle.  Which fields hold depends on the state. */
typedef enum {
    CONNECT_TCP,   /* the TCP connection to listen()'s socket is being made */
    CONNECT_BOOT,  /* the bootstrap runs over it: keys proven, worker addresses swapped */
    CONNECT_HELLO, /* the endpoint exists; HELLO sent on the listen id, ACK awaited on own_id */
    CONNECT_DONE,  /* both completed: the comm goes to NCCL */
} connect_state_t;

struct net_connect {
    connect_state_t state;
    uint32_t listen_id, own_id;    /* where HELLO goes, where the ACK comes */
    double deadline;               /* TCP and BOOT's: the bootstrap's bound */
    int fd;                        /* TCP and BOOT: the bootstrap connection */
    inc_boot_t boot;               /* BOOT */
    net_comm_t *comm;              /* HELLO */
    uint8_t token[INC_BOOT_TOKEN]; /* HELLO: the bootstrap's, which the ACK must show */
    net_slot_t hello, ack;
    net_hello_t hello_buf;
    uint8_t ack_buf[INC_BOOT_TOKEN];
};

/* One connection to listen()'s socket, bootstrapping. */
typedef struct {
    int fd; /* -1: a free place */
    double deadline;
    inc_boot_t *boot;
    uint32_t data_id; /* reserved for the token its WELCOME sends; 0: none (handed on) */
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
    uint8_t ack_buf[INC_BOOT_TOKEN];
};

static uint64_t ctrl_tag(uint32_t id, uint32_t what)
{
    return NET_TAG_CTRL | ((uint64_t)id << 32) | what;
}

/* Runs inside ucp_worker_progress (under net_proc.lock); the handshake and test() read it. */
static void net_ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    net_comm_t *c = arg;
    if (!c->failed) {
        c->failed = 1;
        c->fail_status = status;
    }
}

/* An endpoint to the worker address a bootstrap received (and checked), with the new comm's
   error handler: the one place a peer's address reaches UCX.  NULL: logged. */
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
    ucs_status_t st = ucp_ep_create(net_proc.node.worker, &eprm, &c->ep);
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
        net_comm_destroy(s->comm, 1); /* fails a HELLO still queued */
    net_slot_cancel(&s->ack);
    net_slot_cancel(&s->hello);
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
    s->deadline = inc_now_s() + net_proc.timeout_ms / 1000.0;
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
    if (inc_boot_init(b, INC_BOOT_CLIENT, net_proc.key, net_proc.key_len, net_proc.worker_addr,
                      net_proc.worker_addr_len) != INCMOE_IN_PROGRESS) {
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
    s->comm = comm_create(1, net_data_id(s->boot.token), &s->boot, "connect");
    if (s->comm == NULL)
        return ncclRemoteError;
    memcpy(s->token, s->boot.token, INC_BOOT_TOKEN);
    net_slot_recv(ctrl_tag(s->own_id, TAG_ACK), s->ack_buf, sizeof(s->ack_buf), &s->ack);
    s->hello_buf.id = s->own_id;
    memcpy(s->hello_buf.token, s->boot.token, INC_BOOT_TOKEN);
    net_slot_send(s->comm->ep, ctrl_tag(s->listen_id, TAG_HELLO), &s->hello_buf,
                  sizeof(s->hello_buf), &s->hello);
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
    if (s->ack.done && (s->ack.length != sizeof(s->ack_buf) ||
                        CRYPTO_memcmp(s->ack_buf, s->token, INC_BOOT_TOKEN) != 0)) {
        /* Not the listener that bootstrapped: wait on for the one that did. */
        PWARN("connect: ignored an ACK without this connection's bootstrap token");
        net_slot_recv(ctrl_tag(s->own_id, TAG_ACK), s->ack_buf, sizeof(s->ack_buf), &s->ack);
        return ncclSuccess;
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
              net_proc.timeout_ms);
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
    if (h->magic != NET_HANDLE_MAGIC || (h->family != AF_INET && h->family != AF_INET6)) {
        PWARN("connect: the handle is not one of ours (magic %#x, family %u): another plugin's, "
              "or one from before the token's data tags",
              h->magic, h->family);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&net_proc.lock);
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
    pthread_mutex_unlock(&net_proc.lock);
    return res;
}

/* ---- accept()'s side ----------------------------------------------------- */

struct net_accept *net_accept_new(void)
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
    if (p->data_id != 0)
        net_data_id_release(p->data_id);
    p->data_id = 0;
    close(p->fd);
    p->fd = -1;
    inc_boot_clear(p->boot);
    free(p->boot);
    p->boot = NULL;
}

/* Back to ACCEPT_BOOT after the comm failed: nothing of that connection is kept. */
static ncclResult_t accept_fail(struct net_accept *a)
{
    net_comm_destroy(a->comm, 1); /* fails an ACK still queued */
    a->comm = NULL;
    net_slot_cancel(&a->hello);
    net_slot_cancel(&a->ack);
    memset(a->token, 0, sizeof(a->token));
    a->state = ACCEPT_BOOT;
    return ncclRemoteError;
}

void net_accept_free(struct net_accept *a)
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
            PWARN("accept: a connection did not finish the bootstrap within %d ms",
                  net_proc.timeout_ms);
            pending_drop(p);
        }
        if (p->fd >= 0)
            continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        uint8_t token[INC_BOOT_TOKEN];
        p->boot = malloc(sizeof(*p->boot));
        if (p->boot == NULL || net_token_reserve(token) != 0) {
            free(p->boot);
            p->boot = NULL;
            close(fd);
            return;
        }
        p->fd = fd;
        p->deadline = now + net_proc.timeout_ms / 1000.0;
        inc_boot_init(p->boot, INC_BOOT_SERVER, net_proc.key, net_proc.key_len,
                      net_proc.worker_addr, net_proc.worker_addr_len);
        inc_boot_choose_token(p->boot, token);
        p->data_id = net_data_id(token);
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
        a->comm = comm_create(0, p->data_id, p->boot, "accept");
        if (a->comm != NULL) {
            memcpy(a->token, p->boot->token, INC_BOOT_TOKEN);
            p->data_id = 0; /* the comm's now: released when it is destroyed */
        }
        pending_drop(p);
        if (a->comm == NULL)
            return ncclSystemError;
        net_slot_recv(ctrl_tag(l->id, TAG_HELLO), &a->hello_buf, sizeof(a->hello_buf), &a->hello);
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
        net_slot_recv(ctrl_tag(l->id, TAG_HELLO), &a->hello_buf, sizeof(a->hello_buf), &a->hello);
        return ncclSuccess;
    }
    memcpy(a->ack_buf, a->token, INC_BOOT_TOKEN);
    net_slot_send(a->comm->ep, ctrl_tag((uint32_t)a->hello_buf.id, TAG_ACK), a->ack_buf,
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
    pthread_mutex_lock(&net_proc.lock);
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
    pthread_mutex_unlock(&net_proc.lock);
    return res;
}
