/* dc_peer_rows.h - a dispatch's rows between the ranks (dc_peer_rows.c). */
#ifndef INCMOE_DC_PEER_ROWS_H
#define INCMOE_DC_PEER_ROWS_H

#include "dc_peer_rec.h"

/* Issue a dispatch's rows, round robin from the right neighbour on, while fewer than the
   window of its messages are in flight. */
void client_dcp_pump_dispatch(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec);
/* A peer's PEER_ROWS after an OK verdict: checked against the plan and landed in place. */
ucs_status_t client_dcp_on_rows(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                                int from, const struct inc_wire_hdr *h, void *data, size_t length,
                                int rndv);

#endif
