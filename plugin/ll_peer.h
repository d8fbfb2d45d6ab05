/*
 * ll_peer.h - the low-latency form of dispatch and combine between the ranks
 * (ll_peer.c), for dc_peer.c: one PEER_LL to every other rank per collective.
 */
#ifndef INCMOE_LL_PEER_H
#define INCMOE_LL_PEER_H

#include "dc_peer_rec.h"

/* rec's PEER_LL to peer, if the credits toward it allow; its flag (rec->sent[peer]) set once it
   went.  0 when it has not gone. */
int client_llp_send(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec, int peer);
/* A PEER_LL from rank from for the started low-latency rec: landed, taken (ll_shared.c), its
   credits returned. */
ucs_status_t client_llp_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                   client_dcp_rec_t *rec, int from, const struct inc_wire_hdr *h,
                                   void *data, size_t length, int rndv);

#endif
