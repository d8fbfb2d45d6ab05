/*
 * engine_ops.h - how the server reaches what runs above it: every event the
 * server sees (a JOIN, a message, a lost connection, a turn of the event
 * loop) goes through this table, so server.c never names a job.
 */
#ifndef INCMOE_SWITCH_ENGINE_OPS_H
#define INCMOE_SWITCH_ENGINE_OPS_H

#include "tx.h"

typedef struct {
    /* The first message of a new connection, an eager JOIN with a checked header. */
    void (*on_join)(void *engine, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                    size_t length);
    /* Any later message from a member, header checked.  The status is UCX's answer:
       UCS_INPROGRESS keeps an eager payload, an error refuses a rendezvous one. */
    ucs_status_t (*on_message)(void *engine, conn_t *conn, const struct inc_wire_hdr *hdr,
                               void *data, size_t length, const ucp_am_recv_param_t *param);
    /* A member sent something whose header failed the check; text says what. */
    void (*on_malformed)(void *engine, conn_t *conn, const char *text);
    /* The connection of a member is gone. */
    void (*on_conn_lost)(void *engine, conn_t *conn, const char *why);
    /* Each turn of the event loop: work finished off the loop (reductions). */
    void (*on_wake)(void *engine);
    /* Each turn of the event loop, after dead connections are reaped: liveness. */
    void (*on_tick)(void *engine, conn_t *conns);
    /* A file descriptor that becomes readable when on_wake has work, or -1. */
    int (*wake_fd)(void *engine);
    /* The switch is stopping: end every job. */
    void (*on_shutdown)(void *engine, const char *why);
} switch_engine_ops_t;

#endif
