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
/* Lands a result of op whose bytes are in buf: h is its header, rows what it carries. */
typedef void (*client_land_fn)(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                               uint64_t rows, const char *buf);
/* A rendezvous result of op (data: UCX's descriptor of length bytes) is received into a buffer
   of its own and landed there by land, unless the communicator failed or is being freed by
   then; op is held until it lands.  UCS_INPROGRESS, or UCS_ERR_NO_MEMORY with the communicator
   failed. */
ucs_status_t client_op_recv_rndv(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                                 uint64_t rows, void *data, size_t length, client_land_fn land);
/* DONE from the switch: a barrier completed. */
void client_on_done(incmoe_comm_t *comm, const struct inc_wire_hdr *h);

#endif
