/*
 * demux.c - one received message, from a known connection, to the code
 * that handles it: malformed headers fail the sender's job (or refuse a
 * connection that has none), a new connection must start with an eager JOIN,
 * and everything else goes to the engine.
 */
#include "demux.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

#define SUBSYS "switch"

/* What UCX expects back for a message the switch refuses. */
static ucs_status_t refused(const ucp_am_recv_param_t *param, ucs_status_t rndv_status)
{
    return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? rndv_status : UCS_OK;
}

/* A header that failed the check: a member's job fails with the reason, anyone else is
   refused and dropped. */
static void on_malformed(const switch_demux_t *d, conn_t *conn, const void *header,
                         size_t header_length, const char *why)
{
    d->stats->bad_messages++;
    struct inc_wire_hdr h = {0};
    if (header_length >= sizeof(h))
        memcpy(&h, header, sizeof(h));
    log_warn(SUBSYS, "malformed message from rank %d: %s", conn->rank, why);
    char text[200];
    snprintf(text, sizeof(text), "rank %d sent a malformed message: %s", conn->rank, why);
    if (conn->job != NULL) {
        d->engine_ops->on_malformed(d->engine, conn, text);
    } else {
        d->tx.ops->send_error(d->tx.server, conn, h.job, INCMOE_ERR_PROTOCOL, 0, text);
        d->tx.ops->drop(d->tx.server, conn);
    }
}

/* A connection that broke the JOIN order: it hears why and is dropped. */
static void refuse_conn(const switch_demux_t *d, conn_t *conn, uint64_t job, const char *text)
{
    d->stats->bad_messages++;
    d->tx.ops->send_error(d->tx.server, conn, job, INCMOE_ERR_PROTOCOL, 0, text);
    d->tx.ops->drop(d->tx.server, conn);
}

ucs_status_t switch_demux(const switch_demux_t *d, conn_t *conn, const void *header,
                          size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    if (conn->state == CONN_DEAD)
        return refused(param, UCS_ERR_CANCELED);
    conn->last_rx = inc_now_s();
    char why[160];
    if (inc_wire_hdr_check(header, header_length, length, why, sizeof(why)) != INCMOE_OK) {
        on_malformed(d, conn, header, header_length, why);
        return refused(param, UCS_ERR_INVALID_PARAM);
    }
    struct inc_wire_hdr h;
    memcpy(&h, header, sizeof(h));
    if (conn->state == CONN_NEW) {
        if ((h.msg != WIRE_MSG_JOIN && h.msg != WIRE_MSG_TREE_JOIN) ||
            (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
            refuse_conn(d, conn, h.job, "the first message must be an eager JOIN or TREE_JOIN");
            return refused(param, UCS_ERR_INVALID_PARAM);
        }
        if (d->bind != NULL && !d->bind(d->bind_arg, conn, data, length, param)) {
            refuse_conn(d, conn, h.job, "JOIN without this connection's bootstrap token");
            return UCS_OK;
        }
        d->engine_ops->on_join(d->engine, conn, &h, data, length);
        return UCS_OK;
    }
    if (h.msg == WIRE_MSG_JOIN) {
        refuse_conn(d, conn, h.job, "JOIN sent twice");
        return UCS_OK;
    }
    ucs_status_t st = d->engine_ops->on_message(d->engine, conn, &h, data, length, param);
    /* UCX accepts an error only for rendezvous data, and INPROGRESS (we keep the buffer) also
       for eager data it marked persistent; anything else is done with. */
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return st;
    return (st == UCS_INPROGRESS && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) ? st : UCS_OK;
}
