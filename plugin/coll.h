/*
 * coll.h - the collectives' common life on the proxy thread (coll.c): start,
 * local part, retirement.
 */
#ifndef INCMOE_COLL_H
#define INCMOE_COLL_H

#include "client.h"
#include "base/wire.h"

/* Append a drained submission to its stream and do its local part; 1 when the algorithm must
   move its data (start it), 0 when it needs no more from here (it may be freed already). */
int client_op_start(incmoe_comm_t *comm, coll_op_t *op);
/* The started collective (stream, epoch), or NULL. */
coll_op_t *client_find_op(incmoe_comm_t *comm, unsigned stream, uint64_t epoch);
/* The collective finished its part of the work; retire what can be retired. */
void client_op_progressed(incmoe_comm_t *comm, coll_op_t *op);
/* Retire the finished collectives at the front of a stream (they are freed). */
void client_stream_retire(incmoe_comm_t *comm, incmoe_stream_t stream);
/* Free a collective that never retired (rejected, or its communicator is closing). */
void client_op_free(incmoe_comm_t *comm, coll_op_t *op);
/* DONE from the switch: a barrier completed. */
void client_on_done(incmoe_comm_t *comm, const struct inc_wire_hdr *h);

#endif
