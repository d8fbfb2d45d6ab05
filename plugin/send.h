/*
 * send.h - messages out, to the switch or another rank (send.c); a send
 * completes through the client_completion_t it was handed.
 */
#ifndef INCMOE_SEND_H
#define INCMOE_SEND_H

#include "client.h"

#include "base/wire.h"

/* One message in flight; UCX 1.13 needs the sent header alive until completion. */
typedef struct {
    struct inc_wire_hdr hdr;
    incmoe_comm_t *comm;
    client_completion_t *comp; /* counts this message in flight */
    void *payload_owned;       /* freed on completion */
    int eager;                 /* eager whatever its size (a message the switch takes eager) */
    int to;                    /* the rank it goes to, -1: the switch (a failure names it) */
} send_ctx_t;

/* A message from this rank, header filled but for the per-message fields. */
send_ctx_t *client_ctx(incmoe_comm_t *comm, inc_wire_msg_t msg);
/* Hands one message to UCX on ep, counted in comp until it completes; ctx belongs to the send
   from here on.  ep NULL (a connection closing): it completes at once, as canceled. */
void client_send_ep(incmoe_comm_t *comm, ucp_ep_h ep, send_ctx_t *ctx, const void *payload,
                    size_t length, ucp_mem_h memh, client_completion_t *comp);
/* The same, to the switch. */
void client_send(incmoe_comm_t *comm, send_ctx_t *ctx, const void *payload, size_t length,
                 ucp_mem_h memh, client_completion_t *comp);
/* A message without payload to the switch (HEARTBEAT, LEAVE). */
void client_send_ctrl(incmoe_comm_t *comm, inc_wire_msg_t msg);
/* ERROR to the switch, which ends the job for every rank with this reason. */
void client_send_error(incmoe_comm_t *comm, incmoe_status_t status, const char *text);
/* POST of a collective to the switch, counted in comp. */
void client_send_post(incmoe_comm_t *comm, const coll_op_t *op, client_completion_t *comp);

#endif
