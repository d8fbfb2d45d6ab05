/* dc_peer_plan.h - the plans of dispatch and combine between the ranks, and the verdict
   (dc_peer_plan.c). */
#ifndef INCMOE_DC_PEER_PLAN_H
#define INCMOE_DC_PEER_PLAN_H

#include "dc_peer_rec.h"

/* This rank's plan for peer: its part of the plan, and for a dispatch its rows for the
   peer; a refusal's reason last. */
void client_dcp_send_plan(incmoe_comm_t *comm, coll_op_t *op, int peer);
/* A peer's PEER_PLAN: kept, checked, and once all N - 1 are in, the verdict applied and the
   messages kept for the collective replayed (dcp->replay). */
ucs_status_t client_dcp_on_plan(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec,
                                int from, const struct inc_wire_hdr *h, void *data, size_t length,
                                int rndv);

#endif
