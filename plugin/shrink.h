/*
 * shrink.h - the client's side of incmoe_comm_shrink (shrink.c): ask the switch to shrink the
 * communicator's job and wait, bounded, for its answer; comm.c then joins the new job.
 */
#ifndef INCMOE_SHRINK_H
#define INCMOE_SHRINK_H

#include "client.h"

#include "base/wire.h"

/* Send SHRINK for comm's job (healthy or failed) and wait for the switch's SHRINK_ACK, at most
   twice the job's timeout and a second.  INCMOE_OK with the new job's id, this rank's number
   and its size in *ack; else the failure, which comm now reports (incmoe_comm_error). */
incmoe_status_t client_shrink_ask(incmoe_comm_t *comm, struct inc_wire_shrink_ack *ack);
/* Proxy thread: the switch's SHRINK_ACK (its header checked). */
void client_on_shrink_ack(incmoe_comm_t *comm, const struct inc_wire_hdr *h, const void *data,
                          size_t length);

#endif
