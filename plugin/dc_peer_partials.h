/* dc_peer_partials.h - a combine's partials between the ranks, and the owner's reduction
   (dc_peer_partials.c). */
#ifndef INCMOE_DC_PEER_PARTIALS_H
#define INCMOE_DC_PEER_PARTIALS_H

#include "dc_peer_rec.h"

/* A combine's next piece for owner s: its partials of one owner chunk.  0 when none is left
   or no credit. */
int client_dcp_send_partials(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                             int s);
/* Has the combine pieces left for owner s? */
int client_dcp_partials_left(const client_dcp_rec_t *rec, int s);
/* A contributor's PEER_PARTIALS after an OK verdict: staged; a chunk whose pieces all landed
   is reduced (own partial last) and its credits go back. */
ucs_status_t client_dcp_on_partials(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                    client_dcp_rec_t *rec, int from, const struct inc_wire_hdr *h,
                                    void *data, size_t length, int rndv);

#endif
