/*
 * mesh.c - this rank's connections to the other ranks, for the algorithms
 * whose data moves between the ranks themselves (the ring's neighbours, and
 * dispatch and combine point to point).  The switch hands every rank the
 * others' UCX worker addresses and a random token of the job in JOIN_ACK.
 *
 * A rank creates an endpoint to each rank it sends to (to its right neighbour
 * or to every other rank at create, to the rest when an algorithm first needs
 * them) and sends a PEER_HELLO with the token first on it.  Nothing listens:
 * a rank hears a peer on the endpoint UCX names for the peer's messages
 * (UCP_AM_SEND_FLAG_REPLY), which the HELLO binds to its rank once the token
 * matches.  Messages between the ranks are taken only from bound endpoints,
 * and as the bound rank's whatever their headers claim.  A HELLO can come
 * before this rank's own JOIN_ACK (which holds the token): it waits, and so
 * does what its endpoint sends, until the token is known; what a refused HELLO's
 * endpoint sent is dropped.
 *
 * Every peer's address goes through mesh_peer_ep, the one place one reaches
 * UCX, after inc_ucx_addr_check (UCX trusts a packed address and asserts on
 * some malformed ones).  A lost connection (UCX's peer error handling) fails
 * the job naming the rank while collectives are in flight; with none, it is
 * usually a peer that finished and closed first, and the next collective that
 * needs the mesh fails with that reason instead (client_mesh_broken).
 */
#include "mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "client.h"
#include "notify.h"
#include "send.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/ucx_addr.h"

#define SUBSYS "mesh"

/* A PEER_HELLO that came before the token: checked when JOIN_ACK came. */
typedef struct mesh_hello {
    struct mesh_hello *next;
    ucp_ep_h from;
    uint32_t rank;
    uint8_t token[INCMOE_WIRE_TOKEN];
} mesh_hello_t;

struct client_mesh {
    client_mesh_deliver_t deliver; /* the algorithm's handler, for held messages */
    ucp_ep_h *ep;                  /* [nranks] this rank's endpoint to each peer, or NULL */
    ucp_ep_h *rx;                  /* [nranks] the endpoint each peer's HELLO bound, or NULL */
    mesh_hello_t *hellos;          /* before the token, in arrival order */
    unsigned nhellos;
    client_kept_t *held, **held_tail; /* from those HELLOs' endpoints, in arrival order */
    unsigned nheld;
    char broken[160]; /* a connection lost while nothing was in flight */
};

/* Bounds on what may arrive before JOIN_ACK: a HELLO per peer and a few strays, and what the
   peers send before this rank could bind their endpoints (a window of collectives at most). */
#define MESH_MAX_EARLY_HELLOS(n) (2u * (unsigned)(n) + 8u)
#define MESH_MAX_HELD            65536u

incmoe_status_t client_mesh_open(incmoe_comm_t *comm, client_mesh_deliver_t deliver)
{
    client_mesh_t *mesh = calloc(1, sizeof(*mesh));
    if (mesh == NULL)
        return INCMOE_ERR_NO_MEMORY;
    mesh->deliver = deliver;
    mesh->ep = calloc((size_t)comm->nranks, sizeof(ucp_ep_h));
    mesh->rx = calloc((size_t)comm->nranks, sizeof(ucp_ep_h));
    mesh->held_tail = &mesh->held;
    if (mesh->ep == NULL || mesh->rx == NULL) {
        free(mesh->ep);
        free(mesh->rx);
        free(mesh);
        return INCMOE_ERR_NO_MEMORY;
    }
    comm->mesh = mesh;
    return INCMOE_OK;
}

static int mesh_any_in_flight(const incmoe_comm_t *comm)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        if (s != INCMOE_STREAM_BARRIER && comm->streams[s].head != NULL)
            return 1;
    return 0;
}

static void mesh_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    incmoe_comm_t *comm = arg;
    client_mesh_t *mesh = comm->mesh;
    if (mesh == NULL) /* closed already: nothing is in flight on it */
        return;
    int peer = -1;
    for (int r = 0; r < comm->nranks && peer < 0; r++)
        if (mesh->ep[r] == ep)
            peer = r;
    snprintf(mesh->broken, sizeof(mesh->broken), "rank %d lost its connection to rank %d: %s",
             comm->rank, peer, ucs_status_string(status));
    if (mesh_any_in_flight(comm)) {
        client_fail_job(comm, INCMOE_ERR_PEER_FAILED, mesh->broken);
        return;
    }
    log_debug(SUBSYS, "%s (nothing in flight)", mesh->broken);
}

/*
 * The one place a peer's packed worker address reaches UCX: checked first
 * (base/ucx_addr.h), since ucp_ep_create trusts it.  JOIN_ACK's parser left
 * INC_UCX_ADDR_SLACK zero bytes after each address, as the check asks.
 */
static ucp_ep_h mesh_peer_ep(incmoe_comm_t *comm, int peer, incmoe_status_t unreachable)
{
    char why[160], text[256];
    if (comm->peer_addr == NULL || comm->peer_addr_len[peer] == 0) {
        snprintf(text, sizeof(text), "rank %d sent no worker address for the other ranks", peer);
        client_fail_job(comm, INCMOE_ERR_PROTOCOL, text);
        return NULL;
    }
    if (inc_ucx_addr_check(comm->peer_addr[peer], comm->peer_addr_len[peer], comm->worker_addr,
                           comm->worker_addr_len, why, sizeof(why)) != INCMOE_OK) {
        snprintf(text, sizeof(text), "rank %d's worker address is refused: %s", peer, why);
        client_fail_job(comm, INCMOE_ERR_PROTOCOL, text);
        return NULL;
    }
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)comm->peer_addr[peer],
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = mesh_ep_err_cb, .arg = comm},
    };
    ucp_ep_h ep;
    ucs_status_t ust = ucp_ep_create(comm->node.worker, &params, &ep);
    if (ust != UCS_OK) {
        snprintf(text, sizeof(text), "rank %d cannot reach rank %d: %s", comm->rank, peer,
                 ucs_status_string(ust));
        client_fail_job(comm, unreachable, text);
        return NULL;
    }
    return ep;
}

/* An endpoint to peer with the HELLO sent on it, unless there is one.  unreachable: the
   status when UCX cannot reach the peer (before the job runs, the peer's address; after, the
   peer is gone). */
static incmoe_status_t mesh_open_peer(incmoe_comm_t *comm, int peer, incmoe_status_t unreachable)
{
    client_mesh_t *mesh = comm->mesh;
    if (mesh->ep[peer] != NULL)
        return INCMOE_OK;
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_PEER_HELLO);
    void *token = malloc(INCMOE_WIRE_TOKEN);
    if (ctx == NULL || token == NULL) {
        free(ctx);
        free(token);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_HELLO");
        return INCMOE_ERR_NO_MEMORY;
    }
    mesh->ep[peer] = mesh_peer_ep(comm, peer, unreachable);
    if (mesh->ep[peer] == NULL) {
        free(ctx);
        free(token);
        return (incmoe_status_t)atomic_load(&comm->error);
    }
    memcpy(token, comm->peer_token, INCMOE_WIRE_TOKEN);
    ctx->hdr.length = INCMOE_WIRE_TOKEN;
    ctx->payload_owned = token;
    ctx->to = peer;
    client_send_ep(comm, mesh->ep[peer], ctx, token, INCMOE_WIRE_TOKEN, NULL, &comm->ctrl_sent);
    return INCMOE_OK;
}

/* Bind from to rank if the HELLO showed the job's token and neither is bound yet. */
static void mesh_bind(incmoe_comm_t *comm, ucp_ep_h from, uint32_t rank, const uint8_t *token)
{
    client_mesh_t *mesh = comm->mesh;
    int taken = 0;
    for (int r = 0; r < comm->nranks && !taken; r++)
        taken = mesh->rx[r] == from;
    if (rank >= (uint32_t)comm->nranks || rank == (uint32_t)comm->rank || mesh->rx[rank] != NULL ||
        taken || CRYPTO_memcmp(token, comm->peer_token, INCMOE_WIRE_TOKEN) != 0) {
        log_warn(SUBSYS, "rank %d: refused a PEER_HELLO claiming rank %u (%s)", comm->rank, rank,
                 rank >= (uint32_t)comm->nranks || rank == (uint32_t)comm->rank ? "no such peer"
                 : mesh->rx[rank] != NULL || taken                              ? "bound already"
                                                   : "without the job's token");
        return;
    }
    mesh->rx[rank] = from;
}

static int mesh_sender(const incmoe_comm_t *comm, ucp_ep_h from)
{
    for (int r = 0; r < comm->nranks; r++)
        if (from != NULL && comm->mesh->rx[r] == from)
            return r;
    return -1;
}

client_kept_t *client_kept_new(const struct inc_wire_hdr *h, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    client_kept_t *k = calloc(1, sizeof(*k));
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (k == NULL || (!rndv && (k->copy = malloc(length ? length : 1)) == NULL)) {
        free(k);
        return NULL;
    }
    k->hdr = *h;
    k->length = length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        k->from = param->reply_ep;
    if (rndv)
        k->desc = data;
    else
        memcpy(k->copy, data, length);
    return k;
}

void client_kept_deliver(incmoe_comm_t *comm, client_kept_t *k, client_mesh_deliver_t deliver)
{
    ucp_am_recv_param_t param = {
        .recv_attr = (k->from != NULL ? UCP_AM_RECV_ATTR_FIELD_REPLY_EP : 0) |
                     (k->desc != NULL ? UCP_AM_RECV_ATTR_FLAG_RNDV : 0),
        .reply_ep = k->from,
    };
    ucs_status_t st =
        deliver(comm, &k->hdr, k->desc != NULL ? k->desc : k->copy, k->length, &param);
    if (st == UCS_INPROGRESS) /* the descriptor is the receive's now */
        k->desc = NULL;
    client_kept_free(comm, k);
}

void client_kept_free(incmoe_comm_t *comm, client_kept_t *k)
{
    if (k->desc != NULL) /* as UCX does with a rendezvous message its handler refused */
        ucp_am_data_release(comm->node.worker, k->desc);
    free(k->copy);
    free(k);
}

/*
 * The token is known: check the HELLOs that came before it, then hand the
 * algorithm, in arrival order, what their endpoints sent meanwhile (dropping
 * what endpoints no HELLO bound sent).
 */
static void mesh_check_early(incmoe_comm_t *comm)
{
    client_mesh_t *mesh = comm->mesh;
    while (mesh->hellos != NULL) {
        mesh_hello_t *h = mesh->hellos;
        mesh->hellos = h->next;
        mesh_bind(comm, h->from, h->rank, h->token);
        free(h);
    }
    mesh->nhellos = 0;
    client_kept_t *list = mesh->held;
    mesh->held = NULL;
    mesh->held_tail = &mesh->held;
    mesh->nheld = 0;
    while (list != NULL) {
        client_kept_t *k = list;
        list = k->next;
        if (mesh_sender(comm, k->from) < 0 || atomic_load(&comm->error) != 0) {
            log_warn(SUBSYS, "rank %d: dropped %s from an endpoint no PEER_HELLO bound", comm->rank,
                     inc_wire_msg_name(k->hdr.msg));
            client_kept_free(comm, k);
        } else {
            client_kept_deliver(comm, k, mesh->deliver);
        }
    }
}

/* A message from an endpoint whose HELLO waits for the token: hold it. */
static ucs_status_t mesh_hold(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    client_mesh_t *mesh = comm->mesh;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    client_kept_t *k = mesh->nheld < MESH_MAX_HELD ? client_kept_new(h, data, length, param) : NULL;
    if (k == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY,
                    "no room for a message of rank %u that came before this rank joined (%u held)",
                    h->rank, mesh->nheld);
        return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
    }
    *mesh->held_tail = k;
    mesh->held_tail = &k->next;
    mesh->nheld++;
    return rndv ? UCS_INPROGRESS : UCS_OK;
}

static ucs_status_t mesh_on_hello(incmoe_comm_t *comm, ucp_ep_h from, const struct inc_wire_hdr *h,
                                  const void *data, size_t length, int rndv)
{
    client_mesh_t *mesh = comm->mesh;
    if (rndv || from == NULL || length != INCMOE_WIRE_TOKEN) {
        log_warn(SUBSYS, "rank %d: refused a PEER_HELLO of %zu bytes%s", comm->rank, length,
                 rndv           ? " (rendezvous)"
                 : from == NULL ? " without a reply endpoint"
                                : "");
        return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    if (comm->joined) {
        mesh_bind(comm, from, h->rank, data);
        return UCS_OK;
    }
    mesh_hello_t *e =
        mesh->nhellos < MESH_MAX_EARLY_HELLOS(comm->nranks) ? calloc(1, sizeof(*e)) : NULL;
    if (e == NULL) {
        log_warn(SUBSYS, "rank %d: dropped a PEER_HELLO claiming rank %u before the job formed",
                 comm->rank, h->rank);
        return UCS_OK;
    }
    e->from = from;
    e->rank = h->rank;
    memcpy(e->token, data, INCMOE_WIRE_TOKEN);
    mesh_hello_t **tail = &mesh->hellos;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = e;
    mesh->nhellos++;
    return UCS_OK;
}

int client_mesh_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                           size_t length, const ucp_am_recv_param_t *param, ucs_status_t *ret_p)
{
    client_mesh_t *mesh = comm->mesh;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    if (mesh == NULL) { /* closing: its endpoints' flushes progress the worker */
        *ret_p = rndv ? UCS_ERR_CANCELED : UCS_OK;
        return -1;
    }
    if (comm->joined && mesh->hellos != NULL)
        mesh_check_early(comm);
    if (h->msg == WIRE_MSG_PEER_HELLO) {
        *ret_p = mesh_on_hello(comm, from, h, data, length, rndv);
        return -1;
    }
    int peer = mesh_sender(comm, from);
    if (peer >= 0)
        return peer;
    for (mesh_hello_t *e = mesh->hellos; e != NULL; e = e->next) {
        if (from != NULL && e->from == from) {
            *ret_p = mesh_hold(comm, h, data, length, param);
            return -1;
        }
    }
    log_warn(SUBSYS, "rank %d: dropped %s from an endpoint no PEER_HELLO bound", comm->rank,
             inc_wire_msg_name(h->msg));
    *ret_p = rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    return -1;
}

incmoe_status_t client_mesh_open_all(incmoe_comm_t *comm)
{
    incmoe_status_t st = INCMOE_OK;
    for (int r = 0; r < comm->nranks && st == INCMOE_OK; r++)
        if (r != comm->rank)
            st = mesh_open_peer(comm, r, INCMOE_ERR_PEER_FAILED);
    return st;
}

ucp_ep_h client_mesh_ep(const incmoe_comm_t *comm, int peer)
{
    return comm->mesh != NULL ? comm->mesh->ep[peer] : NULL;
}

const char *client_mesh_broken(const incmoe_comm_t *comm)
{
    return comm->mesh->broken[0] != '\0' ? comm->mesh->broken : NULL;
}

/* Have the HELLOs of the span ranks before this one bound their endpoints? */
static int mesh_heard(const incmoe_comm_t *comm, int span)
{
    for (int k = 1; k <= span; k++)
        if (comm->mesh->rx[(comm->rank + comm->nranks - k) % comm->nranks] == NULL)
            return 0;
    return 1;
}

incmoe_status_t client_mesh_connect(incmoe_comm_t *comm, int span)
{
    const int n = comm->nranks;
    client_mesh_t *mesh = comm->mesh;
    if (n == 1)
        return INCMOE_OK;
    incmoe_status_t st = INCMOE_OK;
    for (int k = 1; k <= span && st == INCMOE_OK; k++)
        st = mesh_open_peer(comm, (comm->rank + k) % n, INCMOE_ERR_UNREACHABLE);
    if (st != INCMOE_OK)
        return st;
    mesh_check_early(comm);
    /* One round trip before bulk data: sends posted before wire-up ends go eager. */
    ucs_status_t fst = UCS_OK;
    for (int k = 1; k <= span && fst == UCS_OK; k++) {
        ucp_request_param_t fp = {.op_attr_mask = 0};
        ucp_ep_h ep = mesh->ep[(comm->rank + k) % n];
        fst = inc_ucx_request_wait(&comm->node, ucp_ep_flush_nbx(ep, &fp), comm->timeout_ms);
    }
    double deadline = inc_now_s() + comm->timeout_ms / 1000.0;
    while (fst == UCS_OK && !mesh_heard(comm, span) && atomic_load(&comm->error) == 0 &&
           inc_now_s() < deadline)
        inc_ucx_node_wait(&comm->node, -1, 20);
    if (atomic_load(&comm->error) != 0)
        return (incmoe_status_t)atomic_load(&comm->error);
    if (fst != UCS_OK || !mesh_heard(comm, span)) {
        int silent = -1;
        for (int k = span; k >= 1; k--)
            if (mesh->rx[(comm->rank + n - k) % n] == NULL)
                silent = (comm->rank + n - k) % n;
        if (fst != UCS_OK)
            client_fail(comm, INCMOE_ERR_TIMEOUT, "wire-up with the other ranks did not finish: %s",
                        ucs_status_string(fst));
        else
            client_fail(comm, INCMOE_ERR_TIMEOUT,
                        "wire-up with the other ranks did not finish: no PEER_HELLO from rank %d "
                        "within %d ms",
                        silent, comm->timeout_ms);
        return INCMOE_ERR_TIMEOUT;
    }
    return INCMOE_OK;
}

void client_mesh_close(incmoe_comm_t *comm)
{
    client_mesh_t *mesh = comm->mesh;
    if (mesh == NULL)
        return;
    comm->mesh = NULL; /* the endpoints' error callbacks see it closed */
    while (mesh->hellos != NULL) {
        mesh_hello_t *h = mesh->hellos;
        mesh->hellos = h->next;
        free(h);
    }
    while (mesh->held != NULL) {
        client_kept_t *k = mesh->held;
        mesh->held = k->next;
        client_kept_free(comm, k);
    }
    for (int r = 0; r < comm->nranks; r++)
        if (mesh->ep[r] != NULL)
            inc_ucx_ep_close(&comm->node, mesh->ep[r], 0, client_close_bound_ms(comm));
    free(mesh->ep);
    free(mesh->rx);
    free(mesh);
}
