/*
 * dc_peer.h - dispatch and combine between the ranks, over the mesh
 * (dc_peer*.c), for the ring and a2a.
 */
#ifndef INCMOE_DC_PEER_H
#define INCMOE_DC_PEER_H

#include "client.h"

#include "base/wire.h"

typedef struct client_dc_peer client_dc_peer_t;

/* Before joining: its state (the credits are JOIN_ACK's, taken when first needed). */
client_dc_peer_t *client_dc_peer_open(incmoe_comm_t *comm);
/* A started dispatch or combine of more than one rank: the plans out, and what it can send. */
void client_dc_peer_start(incmoe_comm_t *comm, client_dc_peer_t *dcp, coll_op_t *op);
/* A PEER_* message the mesh took as from rank `from`. */
ucs_status_t client_dc_peer_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                                       const struct inc_wire_hdr *h, void *data, size_t length,
                                       const ucp_am_recv_param_t *param);
/* Every proxy loop turn: send what the windows and credits let go now. */
void client_dc_peer_progress(incmoe_comm_t *comm, client_dc_peer_t *dcp);
/* Closing, after the mesh closed: free it all (receives still landing are orphaned). */
void client_dc_peer_close(incmoe_comm_t *comm, client_dc_peer_t *dcp);

#endif
