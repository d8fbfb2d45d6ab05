/* ring.h - the ring baseline behind the communicator (see ring.c). */
#ifndef INCMOE_RING_H
#define INCMOE_RING_H

#include "client.h"

/* Before joining: neighbours may send before this rank has finished connecting. */
incmoe_status_t ring_init(incmoe_comm_t *comm);
/* Before joining: listen for the left neighbour; addr gets "HOST:PORT" for JOIN. */
incmoe_status_t ring_listen(incmoe_comm_t *comm, const struct sockaddr *toward, char *addr,
                            size_t addr_len);
/* After JOIN_ACK, on the creating thread: connect to the right neighbour and finish wire-up. */
incmoe_status_t ring_connect(incmoe_comm_t *comm);
/* Proxy thread: a collective was posted; inject this rank's first chunks. */
void ring_start(incmoe_comm_t *comm, coll_op_t *op);
/* Proxy thread: RING_REDUCE / RING_GATHER from the left neighbour. */
ucs_status_t ring_on_data(incmoe_comm_t *comm, const struct inc_wire_hdr *hdr, void *data,
                          size_t length, const ucp_am_recv_param_t *param);
void ring_on_hello(incmoe_comm_t *comm);
void ring_close(incmoe_comm_t *comm);

#endif
