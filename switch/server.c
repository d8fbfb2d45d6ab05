/*
 * server.c - incmoe-switchd's UCX service: the connections (created once a
 * rank finished the bootstrap handshake on the public port, bound to it by the
 * session token its JOIN carries, stamped with their traffic times, reaped),
 * the sends with one egress queue per destination, the receive callback that
 * finds a message's connection and hands it to demux.c, and the event loop,
 * which sleeps on the worker's event fd, the engine's wake fd and the bootstrap
 * listener's sockets when idle.  UCX's own TCP port, which the ranks'
 * endpoints connect to after the bootstrap, is on --listen's interface only
 * (all of them for a wildcard address) unless UCX_NET_DEVICES says otherwise.
 */
#include "server.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/clock.h"
#include "base/log.h"

#define SUBSYS "switch"

_Static_assert(INC_BOOT_TOKEN == INCMOE_WIRE_TOKEN, "the session token fits JOIN");

typedef struct send_ctx {
    struct inc_wire_hdr hdr; /* alive until the send completes (UCX 1.13) */
    struct send_ctx *next;   /* in the server's deferred sends, until it goes to UCX */
    const void *payload;
    size_t length;
    server_t *srv;
    conn_t *conn;
    switch_tx_cb_t cb;
    void *arg;
    void *owned;
    size_t egress_bytes; /* counted in conn->egress_inflight */
} send_ctx_t;

typedef struct queued_send {
    struct queued_send *next;
    struct inc_wire_hdr hdr;
    const void *payload;
    size_t length;
    switch_tx_build_t build; /* the payload is built when the send goes (send_built) */
    switch_tx_cb_t cb;
    void *arg;
} queued_send_t;

static void egress_drain(server_t *srv, conn_t *conn);
static void server_post(server_t *srv, send_ctx_t *ctx);
static void server_enter_ucx(server_t *srv);
static void server_leave_ucx(server_t *srv);

/* ------------------------------------------------------------------------ */
/* connections                                                               */

/* UCX calls this inside progress: only mark the connection; the loop reaps it. */
static void conn_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    conn_t *conn = arg;
    if (conn->state != CONN_DEAD) {
        log_info(SUBSYS, "connection of rank %d lost: %s", conn->rank, ucs_status_string(status));
        conn->state = CONN_DEAD;
    }
}

/*
 * A rank finished the bootstrap handshake: an endpoint to its worker, waiting
 * for its JOIN.  The endpoint is the switch's own (its error callback reports
 * a dead rank at once); UCX pairs it with the rank's endpoint to this worker,
 * which then names it in every message.  Only a peer that passed the
 * handshake gets here, and with an address the handshake held to
 * inc_ucx_addr_check against this worker's own: UCX aborts on, or reads past,
 * a malformed one, and a key proves only who sent it.
 */
static conn_t *server_add_conn(server_t *srv, const void *peer_addr, const char *peer)
{
    conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        log_warn(SUBSYS, "no memory for the connection of %s", peer);
        return NULL;
    }
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_USER_DATA,
        .address = (const ucp_address_t *)peer_addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = conn_err_cb, .arg = conn},
        .user_data = conn,
    };
    ucs_status_t st = ucp_ep_create(srv->node.worker, &params, &conn->ep);
    if (st != UCS_OK) {
        log_warn(SUBSYS, "no endpoint to the worker of %s: %s", peer, ucs_status_string(st));
        free(conn);
        return NULL;
    }
    conn->rank = -1;
    conn->created = conn->last_rx = conn->last_tx = inc_now_s();
    conn->next = srv->conns;
    srv->conns = conn;
    return conn;
}

/*
 * A link to the parent switch finished its handshake (parent_link.c): this
 * switch was the bootstrap's client, as a rank is, with the parent link's key.
 * One link per job keeps the jobs apart at the parent as ranks are.
 */
static conn_t *server_parent_linked(void *arg, const inc_boot_t *boot, uint64_t job)
{
    server_t *srv = arg;
    conn_t *conn = server_add_conn(srv, boot->peer_addr, srv->set->parent);
    if (conn == NULL)
        return NULL;
    memcpy(conn->token, boot->token, sizeof(conn->token));
    conn->role = CONN_PARENT;
    conn->state = CONN_JOINED;
    conn->parent_job = job;
    return conn;
}

/*
 * A rank (or a child switch) finished the bootstrap handshake: an endpoint to
 * its worker, waiting for its JOIN.  The endpoint is the switch's own (its
 * error callback reports a dead peer at once); UCX pairs it with the peer's
 * endpoint to this worker, which then names it in every message.  Only a peer
 * that passed the handshake gets here, and with an address the handshake held
 * to inc_ucx_addr_check against this worker's own: UCX aborts on, or reads
 * past, a malformed one, and a key proves only who sent it.
 */
static void server_on_session(void *arg, const inc_boot_t *boot, const char *peer)
{
    server_t *srv = arg;
    conn_t *conn = server_add_conn(srv, boot->peer_addr, peer);
    if (conn == NULL)
        return;
    memcpy(conn->token, boot->token, sizeof(conn->token));
    log_debug(SUBSYS, "new connection from %s", peer);
}

static void server_drop_conn(server_t *srv, conn_t *conn)
{
    (void)srv;
    conn->state = CONN_DEAD;
}

/* Queued sends will never go: complete them with an error so their items are freed. */
static void egress_abort(conn_t *c)
{
    for (int cls = EGRESS_RESULT; cls < EGRESS_CLASSES; cls++) {
        while (c->queue_head[cls] != NULL) {
            queued_send_t *q = c->queue_head[cls];
            c->queue_head[cls] = q->next;
            if (q->cb != NULL)
                q->cb(q->arg, UCS_ERR_NOT_CONNECTED);
            free(q);
        }
        c->queue_tail[cls] = NULL;
    }
}

/* Close dead connections, tell their jobs, free those no send refers to. */
static void reap_conns(server_t *srv)
{
    conn_t **pp = &srv->conns;
    while (*pp != NULL) {
        conn_t *c = *pp;
        if (c->state != CONN_DEAD) {
            pp = &c->next;
            continue;
        }
        egress_abort(c);
        if (c->job != NULL)
            srv->engine_ops->on_conn_lost(srv->engine, c, "its connection failed");
        if (!c->closed) {
            c->closed = 1;
            /* Give a refusal (ERROR) a moment to leave, then force: a dead peer cannot flush. */
            ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
            if (c->refs > 0 && c->left == 0) {
                p.flags = 0;
            }
            server_enter_ucx(srv); /* a forced close completes its sends inside */
            ucs_status_ptr_t req = ucp_ep_close_nbx(c->ep, &p);
            server_leave_ucx(srv);
            if (UCS_PTR_IS_PTR(req))
                ucp_request_free(req); /* released by UCX when it completes */
        }
        if (c->refs > 0) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        free(c);
    }
}

/* ------------------------------------------------------------------------ */
/* sending                                                                   */

/*
 * Nothing is handed to UCX from inside UCX: a send asked for during a progress
 * call or a send's completion waits in the deferred list, and the list goes to
 * UCX in order once UCX has returned.  UCX 1.13 reorders otherwise: its TCP
 * endpoint lets a new send straight onto the socket whenever its own transmit
 * buffer is empty, without looking at the requests waiting in its pending
 * queue (uct_tcp_ep_check_tx_res), and it completes an eager send (calls
 * send_cb) from inside the loop that drains that queue
 * (uct_tcp_ep_pending_queue_dispatch, ucp_am_bcopy_multi), when the buffer is
 * empty and the requests after the completed one still wait.  A send posted
 * from that completion (the output queue's next chunk, a CREDIT, a PLAN) then
 * overtook sends of the same endpoint posted before it: a leaf's chunk 5 of a
 * root reached the root before chunk 3, a dispatch's rows reached a rank
 * before its PLAN.  Outside UCX, a send finds either an empty pending queue or
 * a transmit buffer that is not empty, and queues behind what waits.  Every
 * send posted while the list holds one joins the list, so the list keeps the
 * order the sends were asked for in.
 */
static void server_enter_ucx(server_t *srv)
{
    srv->in_ucx++;
}

static void server_leave_ucx(server_t *srv)
{
    if (--srv->in_ucx > 0 || srv->flushing)
        return;
    srv->flushing = 1; /* a send completed at once while posting joins the list's tail */
    while (srv->deferred_head != NULL) {
        send_ctx_t *ctx = srv->deferred_head;
        srv->deferred_head = ctx->next;
        if (srv->deferred_head == NULL)
            srv->deferred_tail = NULL;
        ctx->next = NULL;
        server_post(srv, ctx);
    }
    srv->flushing = 0;
}

/* One progress call of the worker, its sends handed to UCX after it. */
static unsigned server_worker_progress(server_t *srv)
{
    server_enter_ucx(srv);
    unsigned n = ucp_worker_progress(srv->node.worker);
    server_leave_ucx(srv);
    return n;
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    send_ctx_t *ctx = user_data;
    conn_t *conn = ctx->conn;
    server_t *srv = ctx->srv;
    size_t bytes = ctx->egress_bytes;
    server_enter_ucx(srv); /* what the completion sends waits for UCX to return */
    conn->refs--;
    conn->egress_inflight -= bytes;
    if (status == UCS_OK)
        conn->last_tx = inc_now_s();
    if (ctx->cb != NULL)
        ctx->cb(ctx->arg, status);
    free(ctx->owned);
    free(ctx);
    if (request != NULL)
        ucp_request_free(request);
    if (bytes > 0) {
        conn->refs++; /* keep conn while its queue drains */
        egress_drain(srv, conn);
        conn->refs--;
    }
    server_leave_ucx(srv);
}

/* owned: freed when the send completes; egress: payload bytes counted against the queue. */
static void server_send_owned(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr,
                              const void *payload, size_t length, switch_tx_cb_t cb, void *arg,
                              void *owned, size_t egress)
{
    send_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (conn == NULL || conn->closed || ctx == NULL) {
        free(ctx);
        free(owned);
        if (cb != NULL)
            cb(arg, UCS_ERR_NOT_CONNECTED);
        return;
    }
    ctx->hdr = *hdr;
    ctx->srv = srv;
    ctx->conn = conn;
    ctx->cb = cb;
    ctx->arg = arg;
    ctx->owned = owned;
    ctx->egress_bytes = egress;
    ctx->payload = payload;
    ctx->length = length;
    conn->egress_inflight += egress;
    conn->refs++;
    conn->last_tx = inc_now_s();
    if (srv->in_ucx > 0 || srv->deferred_head != NULL) {
        if (srv->deferred_tail != NULL)
            srv->deferred_tail->next = ctx;
        else
            srv->deferred_head = ctx;
        srv->deferred_tail = ctx;
        return;
    }
    server_post(srv, ctx);
}

/* Hand one send to UCX. */
static void server_post(server_t *srv, send_ctx_t *ctx)
{
    conn_t *conn = ctx->conn;
    const size_t egress = ctx->egress_bytes, length = ctx->length;
    if (conn->closed) { /* closed while the send waited in the deferred list */
        send_cb(NULL, UCS_ERR_NOT_CONNECTED, ctx);
        return;
    }
    /* Only bulk data (through the output queue) goes rendezvous: ranks and switches take
       nothing else so (the client's on_message, member_screen), and a control message may pass
       --rndv-thresh (a JOIN_ACK with N addresses, a PLAN of 4 N counts, a relayed POST).
       Another switch finds the link by the endpoint (REPLY), as this one does a rank's. */
    const int rndv = egress > 0 && length >= srv->set->rndv_thresh;
    const uint32_t flags = (rndv ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER) |
                           (conn->role != CONN_RANK ? UCP_AM_SEND_FLAG_REPLY : 0);
    inc_ucx_am_send(conn->ep, &ctx->hdr, sizeof(ctx->hdr), ctx->payload, length, flags, NULL,
                    send_cb, ctx);
}

static void server_send(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr,
                        const void *payload, size_t length, switch_tx_cb_t cb, void *arg)
{
    server_send_owned(srv, conn, hdr, payload, length, cb, arg, NULL, 0);
}

/* Hand queued sends to UCX while the destination has room, results first. */
static void egress_drain(server_t *srv, conn_t *conn)
{
    for (int cls = EGRESS_RESULT; cls < EGRESS_CLASSES; cls++) {
        while (conn->queue_head[cls] != NULL &&
               (conn->egress_inflight == 0 ||
                conn->egress_inflight + conn->queue_head[cls]->length <= srv->set->egress_limit)) {
            queued_send_t *q = conn->queue_head[cls];
            conn->queue_head[cls] = q->next;
            if (q->next == NULL)
                conn->queue_tail[cls] = NULL;
            void *built = NULL;
            if (q->build != NULL && (built = malloc(q->length ? q->length : 1)) == NULL) {
                log_error(SUBSYS, "out of memory for a %zu-byte message to rank %d", q->length,
                          conn->rank);
                if (q->cb != NULL)
                    q->cb(q->arg, UCS_ERR_NO_MEMORY);
                free(q);
                continue;
            }
            if (built != NULL)
                q->build(q->arg, &q->hdr, built);
            server_send_owned(srv, conn, &q->hdr, built != NULL ? built : q->payload, q->length,
                              q->cb, q->arg, built, q->length);
            free(q);
        }
        if (conn->queue_head[cls] != NULL)
            return; /* a higher class is waiting: lower classes wait behind it */
    }
}

static void server_queue(server_t *srv, conn_t *conn, egress_class_t cls,
                         const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                         switch_tx_build_t build, switch_tx_cb_t cb, void *arg)
{
    queued_send_t *q = malloc(sizeof(*q));
    if (conn == NULL || conn->closed || q == NULL || cls == EGRESS_CONTROL) {
        free(q);
        if (cls == EGRESS_CONTROL && build == NULL)
            server_send(srv, conn, hdr, payload, length, cb, arg);
        else if (cb != NULL)
            cb(arg, UCS_ERR_NOT_CONNECTED);
        return;
    }
    *q = (queued_send_t){
        .hdr = *hdr, .payload = payload, .length = length, .build = build, .cb = cb, .arg = arg};
    if (conn->queue_tail[cls] != NULL)
        conn->queue_tail[cls]->next = q;
    else
        conn->queue_head[cls] = q;
    conn->queue_tail[cls] = q;
    egress_drain(srv, conn);
}

static void server_send_data(server_t *srv, conn_t *conn, egress_class_t cls,
                             const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                             switch_tx_cb_t cb, void *arg)
{
    server_queue(srv, conn, cls, hdr, payload, length, NULL, cb, arg);
}

static void server_send_error(server_t *srv, conn_t *conn, uint64_t job, incmoe_status_t status,
                              uint32_t rank, const char *text)
{
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_ERROR, job);
    h.status = (int16_t)status;
    h.rank = rank;
    size_t n = strlen(text) + 1;
    if (n > INCMOE_WIRE_MAX_TEXT)
        n = INCMOE_WIRE_MAX_TEXT;
    char *copy = malloc(n);
    if (copy == NULL)
        return;
    memcpy(copy, text, n - 1);
    copy[n - 1] = '\0';
    h.length = n;
    server_send_owned(srv, conn, &h, copy, n, NULL, NULL, copy, 0);
}

/* ------------------------------------------------------------------------ */
/* receiving                                                                 */

/*
 * Ranks and switches send with UCP_AM_SEND_FLAG_REPLY, which names their
 * endpoint here: the one this switch created toward them when UCX paired the
 * two, else the one a JOIN (or TREE_JOIN) bound.  Only a JOIN may come from an
 * endpoint bound to nothing, and it finds its connection by the session token
 * it carries.  A parent switch's endpoint that UCX did not pair is bound by
 * its first answer to this switch's TREE_JOIN (JOIN_ACK or ERROR of that job).
 */
static conn_t *conn_of(server_t *srv, const ucp_am_recv_param_t *param, const void *header,
                       size_t header_length, const void *data, size_t length)
{
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
        return NULL;
    for (conn_t *c = srv->conns; c != NULL; c = c->next)
        if (c->ep == param->reply_ep || (c->rx_ep != NULL && c->rx_ep == param->reply_ep))
            return c;
    struct inc_wire_hdr h;
    if (header_length != sizeof(h) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return NULL;
    memcpy(&h, header, sizeof(h));
    if (h.magic != INCMOE_WIRE_MAGIC)
        return NULL;
    if (h.msg == WIRE_MSG_JOIN_ACK || h.msg == WIRE_MSG_ERROR) {
        for (conn_t *c = srv->conns; c != NULL; c = c->next) {
            if (c->role == CONN_PARENT && c->rx_ep == NULL && c->parent_job == h.job &&
                c->state == CONN_JOINED) {
                c->rx_ep = param->reply_ep;
                return c;
            }
        }
        return NULL;
    }
    struct inc_wire_join join;
    if ((h.msg != WIRE_MSG_JOIN && h.msg != WIRE_MSG_TREE_JOIN) || length < sizeof(join))
        return NULL;
    memcpy(&join, data, sizeof(join));
    for (conn_t *c = srv->conns; c != NULL; c = c->next)
        if (c->state == CONN_NEW && c->rx_ep == NULL &&
            CRYPTO_memcmp(c->token, join.token, sizeof(c->token)) == 0)
            return c;
    return NULL;
}

_Static_assert(offsetof(struct inc_wire_join, token) == offsetof(struct inc_wire_tree_join, token),
               "JOIN and TREE_JOIN carry the session token at one offset");

/* The JOIN (or TREE_JOIN) of a new connection: it must carry the connection's single-use session
   token (demux.c's bind hook). */
static int join_bound(void *arg, conn_t *conn, const void *data, size_t length,
                      const ucp_am_recv_param_t *param)
{
    (void)arg;
    struct inc_wire_join join;
    if (length < sizeof(join))
        return 0;
    memcpy(&join, data, sizeof(join));
    if (CRYPTO_memcmp(conn->token, join.token, sizeof(conn->token)) != 0)
        return 0;
    OPENSSL_cleanse(conn->token, sizeof(conn->token));
    conn->rx_ep = param->reply_ep;
    return 1;
}

/* UCX's receive callback: find the connection, and demux.c does the rest. */
static ucs_status_t server_am_cb(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    server_t *srv = arg;
    conn_t *conn = conn_of(srv, param, header, header_length, data, length);
    if (conn == NULL) {
        srv->stats->bad_messages++;
        log_warn(SUBSYS, "dropped a message from an endpoint no bootstrap session bound");
        return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    return switch_demux(&srv->demux, conn, header, header_length, data, length, param);
}

static void recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    switch_rx_t *rx = user_data;
    rx->done(rx, status);
    if (request != NULL)
        ucp_request_free(request);
}

static void server_recv_data(server_t *srv, void *desc, void *buf, size_t length, switch_rx_t *rx)
{
    inc_ucx_am_recv_data(srv->node.worker, desc, buf, length, NULL, recv_cb, rx);
}

/* ------------------------------------------------------------------------ */
/* the interface the engine sends through                                    */

static void tx_send(void *server, conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                    size_t length, switch_tx_cb_t cb, void *arg)
{
    server_send(server, conn, hdr, payload, length, cb, arg);
}

static void tx_send_built(void *server, conn_t *conn, egress_class_t cls,
                          const struct inc_wire_hdr *hdr, switch_tx_build_t build,
                          switch_tx_cb_t cb, void *arg)
{
    server_queue(server, conn, cls, hdr, NULL, (size_t)hdr->length, build, cb, arg);
}

static void tx_send_data(void *server, conn_t *conn, egress_class_t cls,
                         const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                         switch_tx_cb_t cb, void *arg)
{
    server_send_data(server, conn, cls, hdr, payload, length, cb, arg);
}

static void tx_send_error(void *server, conn_t *conn, uint64_t job, incmoe_status_t status,
                          uint32_t rank, const char *text)
{
    server_send_error(server, conn, job, status, rank, text);
}

static void tx_drop(void *server, conn_t *conn)
{
    server_drop_conn(server, conn);
}

static void tx_connect_parent(void *server, uint64_t job, switch_parent_cb_t done, void *arg)
{
    server_t *srv = server;
    parent_link_start(&srv->links, job, done, arg);
}

static void tx_recv_data(void *server, void *desc, void *buf, size_t length, switch_rx_t *rx)
{
    server_recv_data(server, desc, buf, length, rx);
}

static void tx_release_data(void *server, void *data)
{
    server_t *srv = server;
    ucp_am_data_release(srv->node.worker, data);
}

static const switch_tx_ops_t server_tx_ops = {
    .send = tx_send,
    .send_data = tx_send_data,
    .send_built = tx_send_built,
    .send_error = tx_send_error,
    .drop = tx_drop,
    .connect_parent = tx_connect_parent,
    .recv_data = tx_recv_data,
    .release_data = tx_release_data,
};

switch_tx_t server_tx(server_t *srv)
{
    return (switch_tx_t){.ops = &server_tx_ops, .server = srv};
}

/* ------------------------------------------------------------------------ */
/* service                                                                   */

void server_init(server_t *srv, const switch_settings_t *set, switch_stats_t *stats,
                 const switch_engine_ops_t *engine_ops, void *engine)
{
    *srv = (server_t){.set = set, .stats = stats, .engine_ops = engine_ops, .engine = engine};
    srv->demux = (switch_demux_t){.engine_ops = engine_ops,
                                  .engine = engine,
                                  .tx = server_tx(srv),
                                  .stats = stats,
                                  .bind = join_bound,
                                  .bind_arg = srv};
}

/* Listen on the parsed address (the bootstrap listener) and say where on stdout. */
static incmoe_status_t server_listen(server_t *srv, struct sockaddr_storage *ss, socklen_t sslen)
{
    ucs_status_t us =
        ucp_worker_get_address(srv->node.worker, &srv->worker_addr, &srv->worker_addr_len);
    if (us != UCS_OK || srv->worker_addr_len > INC_BOOT_MAX_ADDR) {
        log_error(SUBSYS, "the worker's UCX address: %s (%zu bytes, at most %d)",
                  ucs_status_string(us), us == UCS_OK ? srv->worker_addr_len : 0,
                  INC_BOOT_MAX_ADDR);
        return INCMOE_ERR_TRANSPORT;
    }
    char where[128] = "?";
    const switch_settings_t *set = srv->set;
    incmoe_status_t st = listener_open(&srv->boot, (struct sockaddr *)ss, sslen, set->secret,
                                       set->have_secret ? set->secret_len : 0, srv->worker_addr,
                                       srv->worker_addr_len, where, sizeof(where));
    if (st != INCMOE_OK)
        return st;
    srv->boot.on_session = server_on_session;
    srv->boot.arg = srv;
    srv->listening = 1;
    srv->links = (parent_links_t){.set = set,
                                  .worker_addr = srv->worker_addr,
                                  .worker_addr_len = srv->worker_addr_len,
                                  .finish = server_parent_linked,
                                  .server = srv};
    /* The first line on stdout is the contract with scripts and tests. */
    printf("incmoe-switchd listening on %s\n", where);
    fflush(stdout);
    log_info(SUBSYS, "listening on %s (%s; chunk %llu, %u credits, memory bound %zu)", where,
             set->have_secret ? "ranks must prove the key"
                              : "no key: anyone reaching the port "
                                "can join",
             (unsigned long long)set->chunk_size, set->credits, set->max_memory);
    return INCMOE_OK;
}

incmoe_status_t server_start(server_t *srv, const char *listen_addr)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    incmoe_status_t st = inc_ucx_parse_hostport(listen_addr, &ss, &sslen, 1);
    if (st != INCMOE_OK)
        return st;
    /* UCX's own TCP port on --listen's interface only (unless UCX_NET_DEVICES says otherwise):
       a switch told 127.0.0.1 is not reachable from outside through UCX either. */
    st = inc_ucx_node_open(&srv->node, (struct sockaddr *)&ss);
    if (st != INCMOE_OK)
        return st;
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = INCMOE_AM_ID,
        .cb = server_am_cb,
        .arg = srv,
    };
    ucs_status_t us = ucp_worker_set_am_recv_handler(srv->node.worker, &hp);
    if (us != UCS_OK) {
        log_error(SUBSYS, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
        return INCMOE_ERR_TRANSPORT;
    }
    return server_listen(srv, &ss, sslen);
}

/*
 * Idle: sleep on the worker's event fd, the engine's wake fd, the bootstrap
 * sockets and the links to the parent at once, then move the handshakes on.
 * UCX requires a progress before arming; when it had events, the sockets are
 * still polled, without sleeping, so handshakes move on under load too.
 */
static void server_wait(server_t *srv, int wake_fd, int timeout_ms)
{
    const int nlinks = srv->links.count;
    struct pollfd fds[2 + 1 + LISTENER_MAX_PENDING + nlinks];
    int busy = server_worker_progress(srv) != 0 || ucp_worker_arm(srv->node.worker) == UCS_ERR_BUSY;
    fds[0] = (struct pollfd){.fd = srv->node.event_fd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    int nboot =
        srv->listening ? listener_pollfds(&srv->boot, fds + 2, 1 + LISTENER_MAX_PENDING) : 0;
    if (srv->listening)
        timeout_ms = listener_timeout_ms(&srv->boot, timeout_ms);
    struct pollfd *up = fds + 2 + nboot;
    int nup = parent_links_pollfds(&srv->links, up, nlinks);
    timeout_ms = parent_links_timeout_ms(&srv->links, timeout_ms);
    int rc = poll(fds, (nfds_t)(2 + nboot + nup), busy ? 0 : timeout_ms);
    if (rc < 0 && errno != EINTR)
        log_warn(SUBSYS, "poll: %s", strerror(errno));
    if (srv->listening)
        listener_service(&srv->boot, fds + 2, rc > 0 ? nboot : 0);
    parent_links_service(&srv->links, up, rc > 0 ? nup : 0);
}

/* Progress the worker for a millisecond at most: under a flood of messages the loop must
   still come round to the reductions, the heartbeats, the liveness checks and the progress
   timeouts (on_wake, on_tick), as the client's proxy does. */
static void server_progress(server_t *srv)
{
    const double until = inc_now_s() + 0.001;
    while (server_worker_progress(srv) != 0 && inc_now_s() < until) {
    }
}

void server_run(server_t *srv)
{
    const switch_engine_ops_t *ops = srv->engine_ops;
    while (!atomic_load(&srv->stop)) {
        server_progress(srv);
        ops->on_wake(srv->engine);
        reap_conns(srv);
        ops->on_tick(srv->engine, srv->conns);
        server_wait(srv, ops->wake_fd(srv->engine), 100);
    }
}

/* Progress or sleep up to 10 ms, the sends asked for meanwhile handed to UCX after it. */
static void server_node_wait(server_t *srv)
{
    server_enter_ucx(srv);
    inc_ucx_node_wait(&srv->node, -1, 10);
    server_leave_ucx(srv);
}

void server_stop(server_t *srv)
{
    srv->engine_ops->on_shutdown(srv->engine, "the switch is shutting down");
    for (conn_t *c = srv->conns; c != NULL; c = c->next)
        c->state = CONN_DEAD;
    /* Let the ERRORs go out, then close everything. */
    double deadline = inc_now_s() + 0.5;
    while (inc_now_s() < deadline)
        server_node_wait(srv);
    for (conn_t *c = srv->conns; c != NULL; c = c->next)
        c->left = 1;
    reap_conns(srv);
    deadline = inc_now_s() + 1.0;
    while (srv->conns != NULL && inc_now_s() < deadline) {
        server_node_wait(srv);
        reap_conns(srv);
    }
    parent_links_close(&srv->links);
    if (srv->listening) {
        log_info(SUBSYS, "bootstrap: %llu connections, %llu completed, %llu failed, %llu refused",
                 srv->boot.accepted, srv->boot.completed, srv->boot.failed, srv->boot.refused);
        listener_close(&srv->boot);
    }
    if (srv->worker_addr != NULL)
        ucp_worker_release_address(srv->node.worker, srv->worker_addr);
    inc_ucx_node_close(&srv->node);
}
