/*
 * join.h - the join handshake (join.c).
 */
#ifndef INCMOE_JOIN_H
#define INCMOE_JOIN_H

#include "client.h"

/* On the creating thread, the message handler set and the algorithm open: connect to the
   switch, JOIN (with this rank's worker address if share_addr), wait (bounded) for JOIN_ACK. */
incmoe_status_t client_join(incmoe_comm_t *comm, const incmoe_comm_params_t *params,
                            int share_addr);
/* JOIN_ACK: the job formed; keep the peers' addresses and the flow-control grant. */
void client_on_join_ack(incmoe_comm_t *comm, const char *data, size_t length);

#endif
