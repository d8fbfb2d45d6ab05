/* dc_peer_land.h - a payload of another rank landing in place (dc_peer_land.c). */
#ifndef INCMOE_DC_PEER_LAND_H
#define INCMOE_DC_PEER_LAND_H

#include "dc_peer_rec.h"

/* A receive of rec's from rank `from` (h its header) that calls landed once a rendezvous
   payload is in place; NULL (the job failed) when out of memory. */
client_dcp_recv_t *client_dcp_recv_ctx(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                       client_dcp_rec_t *rec, int from,
                                       const struct inc_wire_hdr *h, client_dcp_landed_t landed);
/* Land a payload at dst: copied now (eager; rr freed), or received there (rendezvous; rr's
   landed is called and rr freed when it is in place).  1 when it landed now. */
int client_dcp_land(incmoe_comm_t *comm, void *data, size_t length, int rndv, char *dst,
                    ucp_mem_h memh, client_dcp_recv_t *rr);

#endif
