/*
 * join.c - the join handshake, on the thread creating the communicator: the
 * bootstrap handshake on the switch's TCP port (both sides prove the key,
 * base/bootstrap.h), the UCX endpoint to the worker address the switch sent
 * back, the JOIN message (the session token, and this rank's worker address
 * when the algorithm's peers need it), the bounded wait until every rank
 * joined, and the JOIN_ACK that forms the job (peers' addresses, peer token,
 * chunk size and flow-control grant).
 */
#include "join.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "client.h"
#include "notify.h"
#include "send.h"

#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/keyfile.h"
#include "base/log.h"
#include "base/ucx_addr.h"

#define SUBSYS "client"

static void client_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    incmoe_comm_t *comm = arg;
    pthread_mutex_lock(&comm->lock);
    comm->switch_lost = 1; /* a shrink's wait for the switch ends too */
    pthread_mutex_unlock(&comm->lock);
    client_fail(comm, INCMOE_ERR_PEER_FAILED, "lost the connection to the switch: %s",
                ucs_status_string(status));
}

/* The secret: from the parameters, else INCMOE_AUTH_KEY, else INCMOE_AUTH_KEY_FILE's first line.
   A key past INCMOE_MAX_SECRET is refused, never cut: a cut key could never authenticate. */
static incmoe_status_t join_secret(const incmoe_comm_params_t *params, char *secret,
                                   size_t *secret_len)
{
    const char *key = inc_config_get_str("INCMOE_AUTH_KEY");
    const char *file = inc_config_get_str("INCMOE_AUTH_KEY_FILE");
    *secret_len = 0;
    if (params->field_mask & INCMOE_COMM_PARAM_SECRET) {
        *secret_len = params->secret_len;
        memcpy(secret, params->secret, *secret_len);
    } else if (key != NULL) {
        if (strlen(key) > INCMOE_MAX_SECRET) {
            log_error(SUBSYS, "INCMOE_AUTH_KEY is %zu bytes: it must be 1..%d bytes", strlen(key),
                      INCMOE_MAX_SECRET);
            return INCMOE_ERR_INVALID_ARG;
        }
        *secret_len = strlen(key);
        memcpy(secret, key, *secret_len);
    } else if (file != NULL) {
        char why[256];
        incmoe_status_t st = inc_keyfile_read(file, secret, secret_len, why, sizeof(why));
        if (st != INCMOE_OK)
            log_error(SUBSYS, "INCMOE_AUTH_KEY_FILE: %s", why);
        return st;
    }
    return INCMOE_OK;
}

/* The endpoint to the switch's worker (the communicator's message handler is set already). */
static incmoe_status_t join_connect(incmoe_comm_t *comm, const void *switch_worker,
                                    const char *where)
{
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)switch_worker,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = client_ep_err_cb, .arg = comm},
    };
    ucs_status_t us = ucp_ep_create(comm->node.worker, &ep_params, &comm->ep);
    if (us != UCS_OK) {
        client_fail(comm, INCMOE_ERR_UNREACHABLE, "cannot reach the worker of the switch at %s: %s",
                    where, ucs_status_string(us));
        return INCMOE_ERR_UNREACHABLE;
    }
    return INCMOE_OK;
}

/* The bootstrap handshake, bounded by the communicator's timeout; then the endpoint. */
static incmoe_status_t join_bootstrap(incmoe_comm_t *comm, const struct sockaddr_storage *ss,
                                      socklen_t sslen, const char *where, const char *secret,
                                      size_t secret_len, uint8_t token[INCMOE_WIRE_TOKEN])
{
    ucs_status_t us =
        ucp_worker_get_address(comm->node.worker, &comm->worker_addr, &comm->worker_addr_len);
    if (us != UCS_OK || comm->worker_addr_len > INC_BOOT_MAX_ADDR) {
        client_fail(comm, INCMOE_ERR_TRANSPORT,
                    "this worker's UCX address: %s (%zu bytes, at most %d)", ucs_status_string(us),
                    us == UCS_OK ? comm->worker_addr_len : 0, INC_BOOT_MAX_ADDR);
        return INCMOE_ERR_TRANSPORT;
    }
    inc_boot_t *boot = malloc(sizeof(*boot));
    if (boot == NULL)
        return INCMOE_ERR_NO_MEMORY;
    incmoe_status_t st = inc_boot_init(boot, INC_BOOT_CLIENT, secret, secret_len, comm->worker_addr,
                                       comm->worker_addr_len);
    if (st == INCMOE_IN_PROGRESS)
        st = inc_boot_run_client(boot, (const struct sockaddr *)ss, sslen, comm->timeout_ms);
    if (st != INCMOE_OK)
        client_fail(comm, st, "bootstrap with the switch at %s: %s", where, boot->why);
    else
        memcpy(token, boot->token, INCMOE_WIRE_TOKEN);
    if (st == INCMOE_OK)
        st = join_connect(comm, boot->peer_addr, where);
    inc_boot_clear(boot);
    free(boot);
    return st;
}

/* JOIN: struct inc_wire_join with the session token, and this rank's worker address when
   its peers need it. */
static incmoe_status_t join_send(incmoe_comm_t *comm, const uint8_t *token, int share_addr)
{
    size_t addr_len = share_addr ? comm->worker_addr_len : 0;
    struct inc_wire_join join = {
        .nranks = (uint32_t)comm->nranks,
        .addr_len = (uint32_t)addr_len,
        .timeout_ms = (uint32_t)comm->timeout_ms,
        .progress_timeout_ms = (uint32_t)comm->progress_timeout_ms,
    };
    memcpy(join.token, token, sizeof(join.token));
    size_t plen = sizeof(join) + addr_len;
    char *payload = malloc(plen);
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_JOIN);
    if (payload == NULL || ctx == NULL) {
        free(payload);
        free(ctx);
        return INCMOE_ERR_NO_MEMORY;
    }
    memcpy(payload, &join, sizeof(join));
    memcpy(payload + sizeof(join), comm->worker_addr, addr_len);
    ctx->hdr.length = plen;
    ctx->payload_owned = payload;
    comm->last_rx = inc_now_s();
    client_send(comm, ctx, payload, plen, NULL, &comm->ctrl_sent);
    return INCMOE_OK;
}

incmoe_status_t client_join(incmoe_comm_t *comm, const incmoe_comm_params_t *params, int share_addr)
{
    char secret[INCMOE_MAX_SECRET];
    size_t secret_len = 0;
    uint8_t token[INCMOE_WIRE_TOKEN];
    incmoe_status_t st = join_secret(params, secret, &secret_len);
    if (st == INCMOE_OK) { /* kept for incmoe_comm_shrink's join of the new job */
        memcpy(comm->secret, secret, secret_len);
        comm->secret_len = secret_len;
    }
    if (st == INCMOE_OK)
        st = join_bootstrap(comm, &comm->switch_ss, comm->switch_ss_len, params->switch_addr,
                            secret, secret_len, token);
    OPENSSL_cleanse(secret, sizeof(secret));
    if (st == INCMOE_OK)
        st = join_send(comm, token, share_addr);
    if (st != INCMOE_OK)
        return st;

    /* Wait for all ranks to join (the switch answers then), bounded. */
    double deadline = inc_now_s() + comm->timeout_ms / 1000.0;
    while (!comm->joined && atomic_load(&comm->error) == 0) {
        if (inc_now_s() > deadline) {
            /* JOIN still unsent: the switch finished the bootstrap but its worker never
               answered. */
            if (comm->ctrl_sent.count > 0)
                client_fail(comm, INCMOE_ERR_TIMEOUT,
                            "the switch at %s did not take the JOIN within %d ms "
                            "(stopped or overloaded?)",
                            params->switch_addr, comm->timeout_ms);
            else
                client_fail(comm, INCMOE_ERR_TIMEOUT,
                            "job %llu: not all %d ranks joined at %s within %d ms",
                            (unsigned long long)comm->job_id, comm->nranks, params->switch_addr,
                            comm->timeout_ms);
            break;
        }
        inc_ucx_node_wait(&comm->node, -1, 50);
    }
    return (incmoe_status_t)atomic_load(&comm->error);
}

/* Each rank's address record: a 32-bit length, then that many bytes. */
static int parse_addresses(incmoe_comm_t *comm, const char *data, size_t length, size_t pos)
{
    comm->peer_addr = calloc(comm->nranks, sizeof(void *));
    comm->peer_addr_len = calloc(comm->nranks, sizeof(size_t));
    if (comm->peer_addr == NULL || comm->peer_addr_len == NULL) {
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for the address table");
        return 0;
    }
    for (int r = 0; r < comm->nranks; r++) {
        uint32_t len;
        if (pos + sizeof(len) > length) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "JOIN_ACK truncated at rank %d's address", r);
            return 0;
        }
        memcpy(&len, data + pos, sizeof(len));
        pos += sizeof(len);
        if (len > INCMOE_WIRE_MAX_ADDR || pos + len > length) {
            client_fail(comm, INCMOE_ERR_PROTOCOL, "JOIN_ACK: rank %d's address is truncated", r);
            return 0;
        }
        /* Zeroed slack after each: UCX's transports may read a malformed address that far
           past its fields (base/ucx_addr.h), and the ring hands these to UCX. */
        comm->peer_addr[r] = calloc(1, (size_t)len + INC_UCX_ADDR_SLACK);
        if (comm->peer_addr[r] == NULL) {
            client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for the address table");
            return 0;
        }
        memcpy(comm->peer_addr[r], data + pos, len);
        comm->peer_addr_len[r] = len;
        pos += len;
    }
    return 1;
}

void client_on_join_ack(incmoe_comm_t *comm, const char *data, size_t length)
{
    if (comm->joined) {
        /* A second grant would change the chunking and credits under collectives in flight. */
        client_fail(comm, INCMOE_ERR_PROTOCOL, "JOIN_ACK after the job formed");
        return;
    }
    struct inc_wire_join_ack ack;
    memcpy(&ack, data, sizeof(ack));
    if (ack.nranks != (uint32_t)comm->nranks || ack.credits == 0 || ack.chunk_size == 0 ||
        ack.timeout_ms == 0 || ack.timeout_ms > INT_MAX) {
        client_fail(comm, INCMOE_ERR_PROTOCOL,
                    "bad JOIN_ACK: %u ranks, %u credits, chunk %llu, timeout %u ms", ack.nranks,
                    ack.credits, (unsigned long long)ack.chunk_size, ack.timeout_ms);
        return;
    }
    if (!parse_addresses(comm, data, length, sizeof(ack)))
        return;
    memcpy(comm->peer_token, ack.ring_token, sizeof(comm->peer_token));
    comm->credits = ack.credits;
    comm->chunk_size = ack.chunk_size;
    /* The switch owns the job's timeout: heartbeats and the switch's silence follow it. */
    if ((int)ack.timeout_ms != comm->timeout_ms)
        log_info(SUBSYS, "rank %d: job %llu runs with a %u ms timeout (asked %d ms)", comm->rank,
                 (unsigned long long)comm->job_id, ack.timeout_ms, comm->timeout_ms);
    comm->timeout_ms = (int)ack.timeout_ms;
    comm->joined = 1;
}
