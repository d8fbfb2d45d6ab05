/*
 * demux.h - what the switch does with one message once UCX has delivered
 * it and the server has found the connection it came on: the header check,
 * the JOIN-first rule, and the hand-off to the engine.  It names no UCX
 * object and sends only through switch_tx, so it runs the same under the
 * server and under a harness that feeds it messages directly.
 */
#ifndef INCMOE_SWITCH_DEMUX_H
#define INCMOE_SWITCH_DEMUX_H

#include "engine_ops.h"
#include "settings.h"
#include "tx.h"

typedef struct {
    const switch_engine_ops_t *engine_ops;
    void *engine;
    switch_tx_t tx;
    switch_stats_t *stats;
    /* Binds a new connection to the bootstrap session it came from; its first message, an
       eager JOIN, is passed here.  Returns 0 when the JOIN does not carry that session's
       token.  NULL binds every connection (a harness without sessions). */
    int (*bind)(void *arg, conn_t *conn, const void *data, size_t length,
                const ucp_am_recv_param_t *param);
    void *bind_arg;
} switch_demux_t;

/*
 * One message from conn: header as received (checked here), data/length its
 * payload, param UCX's description of it (only recv_attr is read: rendezvous,
 * persistent eager data).  Returns what the UCX active-message callback
 * answers: UCS_OK, UCS_INPROGRESS (the payload is kept), or an error that
 * refuses a rendezvous payload.
 */
ucs_status_t switch_demux(const switch_demux_t *d, conn_t *conn, const void *header,
                          size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param);

#endif
