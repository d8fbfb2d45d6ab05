/*
 * replicas.h - the layer's expert replicas (incmoe_moe.h, "Replicas"): the
 * placement read and checked at create, the header's forced rows, and each
 * forward's choice of replicas (replica_plan.h says the rule and the wire ids).
 */
#ifndef INCMOE_MOE_REPLICAS_H
#define INCMOE_MOE_REPLICAS_H

#include "layer.h"

/* This rank's verdict on the extension's placement (none: L keeps one rank per expert);
   copies it into L->placement with L->slots and L->replicated.  Before plan_place_experts. */
incmoe_status_t replicas_read(incmoe_moe_t *L, const incmoe_moe_params_t *p,
                              const incmoe_moe_params_ext_t *ext);

/* Bytes of a rank's block in a forward's header exchange: the header, and with replicas its
   forced rows (N uint32, replica_plan.h).  The create exchange uses MOE_HDR_BYTES: the
   ranks agree on the placement there, before their blocks may differ in size. */
size_t replicas_hdr_bytes(int N, int replicated);

/* A forward's first choice, before its header exchange: this rank's T tokens (ids [T][k])
   from no load into L->chosen, and their forced rows into L->hdr_forced.  Nothing without
   replicas. */
void replicas_local(incmoe_moe_t *L, const int32_t *ids, size_t T);

/* The bulk path's choice once every rank's header arrived: from the average rank's forced
   rows (replica_plan.h), into L->chosen.  Nothing without replicas. */
void replicas_bulk(incmoe_moe_t *L, const int32_t *ids, size_t T);

void replicas_free(incmoe_moe_t *L);

#endif
