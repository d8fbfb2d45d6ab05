/*
 * replica_plan.h - one rank's choice of replicas for its tokens in one forward
 * (incmoe_moe.h, "Replicas"), over the per-token rule of replica_choice.h.
 *
 * The choice travels in the row: each pair's expert id on the wire is
 * e + E * slot, slot the index of the serving rank among expert e's replicas,
 * so every receiver of a multicast row reads which of its experts it serves
 * (ctx.h: owner and the FFN's local index are over these ids).  With no
 * expert replicated every slot is 0 and the ids are the caller's.
 *
 * Each rank runs the rule over its own tokens in order, its load the rows
 * they sent so far: where every rank's tokens are alike, balancing its own
 * rows balances everyone's.  The bulk path also sees every rank's routing: the
 * header exchange carries each rank's forced rows (replica_forced: rows its
 * tokens must send to each other rank, for experts with one replica), and a
 * rank whose forced rows differ from the average rank's corrects its load by
 * the difference (replica_correction), spread over its tokens so that the
 * correction grows with the rows it corrects (all of it at the start would
 * make the ranks the later tokens load look idle to the first ones).  The
 * decode step has no exchange and no correction (incmoe_moe.h says what that
 * costs).  Pure functions: the same inputs give the same choice on any rank.
 */
#ifndef INCMOE_MOE_REPLICA_PLAN_H
#define INCMOE_MOE_REPLICA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe_moe.h"

/* Rows T tokens of rank self (ids [T][k], expert ids) send to each rank other than self for
   the experts with one replica: forced[0..N), zeroed first (forced[self] stays 0). */
void replica_forced(const incmoe_moe_placement_t *p, int N, int self, const int32_t *ids, int k,
                    size_t T, uint32_t *forced);

/* The correction of a rank's load: corr[r] = round(sum[r] / N) - own[r], where sum[r] is
   every rank's forced rows to r and own[r] this rank's, so that at the end its view is the
   average rank's forced rows plus its own choices. */
void replica_correction(int N, const uint64_t *sum, const uint32_t *own, int64_t *corr);

/* Each of T tokens' pairs served by the replica replica_choose picks from load[N] (updated;
   corr, where not NULL, added to it over the tokens), written to out [T][k] as
   e + E * slot. */
void replica_assign(const incmoe_moe_placement_t *p, int E, int N, int self, const int32_t *ids,
                    int k, size_t T, const int64_t *corr, int64_t *load, int32_t *out);

#endif
