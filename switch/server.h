/*
 * server.h - incmoe-switchd's service plumbing: the bootstrap listener, the
 * connections, the per-destination egress queues and the event loop.  What
 * the messages mean is the engine's, reached through switch_engine_ops_t;
 * the engine sends back through the switch_tx interface server_tx() gives.
 */
#ifndef INCMOE_SWITCH_SERVER_H
#define INCMOE_SWITCH_SERVER_H

#include <stdatomic.h>

#include "demux.h"
#include "engine_ops.h"
#include "listener.h"
#include "parent_link.h"
#include "settings.h"
#include "tx.h"

#include "base/ucx_util.h"

typedef struct server {
    inc_ucx_node_t node;
    listener_t boot; /* the public port */
    int listening;
    parent_links_t links;       /* a child switch's handshakes with its parent, in the loop */
    ucp_address_t *worker_addr; /* handed to ranks by the bootstrap */
    size_t worker_addr_len;
    conn_t *conns;
    const switch_settings_t *set;
    switch_stats_t *stats;
    const switch_engine_ops_t *engine_ops;
    void *engine;
    switch_demux_t demux; /* what a received message goes through */
    /* Sends asked for inside UCX (a progress call, a send's completion), handed to it in
       order once it returned (server.c, "sending"). */
    struct send_ctx *deferred_head, *deferred_tail;
    int in_ucx, flushing;
    /* Set by SIGINT/SIGTERM, whose handler may run on UCX's async thread. */
    atomic_int stop;
} server_t;

void server_init(server_t *srv, const switch_settings_t *set, switch_stats_t *stats,
                 const switch_engine_ops_t *engine_ops, void *engine);
/* The sending interface for the engine. */
switch_tx_t server_tx(server_t *srv);

incmoe_status_t server_start(server_t *srv, const char *listen_addr);
void server_run(server_t *srv);
void server_stop(server_t *srv);

#endif
