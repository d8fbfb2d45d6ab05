/*
 * replica_choice.h - which replica serves each (token, expert) pair when an
 * expert lives on several ranks (incmoe_moe_placement_t in incmoe_moe.h).
 * One rule, written once: the layer applies it to its tokens and
 * incmoe_moe_placement_eval (placement_choose.c) to a routing sample, so the
 * placement chooser is judged by what the layer does.  Pure functions: every
 * rank given the same inputs chooses the same.
 */
#ifndef INCMOE_MOE_REPLICA_CHOICE_H
#define INCMOE_MOE_REPLICA_CHOICE_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe_moe.h"

/*
 * Chooses the rank serving each of one token's pairs.  ids[0..k): the token's experts
 * (distinct, in [0, E) of p; k at most INCMOE_MOE_MAX_TOPK); self: the token's own rank;
 * load[N]: rows each rank receives so far, updated with this token's (one row per rank the
 * token visits other than self); out[0..k): the serving rank of each pair.  Pairs whose
 * expert has one replica go first; then each other pair, in the order of ids, takes a
 * replica on a rank the token already visits (self or a rank chosen before; of several, the
 * lowest), else the replica whose rank has the fewest rows in load (ties: the lowest rank).
 * The caller has checked p (a valid placement) and ids; nothing here checks them.
 */
void replica_choose(const incmoe_moe_placement_t *p, const int32_t *ids, int k, int self,
                    int64_t *load, int32_t *out);

/*
 * replica_choose over one forward's tokens: counts[N] tokens per rank, ids [sum of counts][k]
 * every rank's tokens in rank order (rank 0's first), out the same shape.  The tokens are
 * taken round-robin over the ranks (token 0 of ranks 0 .. N-1, then token 1 of each, ...),
 * so no rank's tokens see all the others' load before theirs.  load[N] is zeroed first and
 * ends as the rows each rank receives.
 */
void replica_choose_all(const incmoe_moe_placement_t *p, int N, const int *counts,
                        const int32_t *ids, int k, int64_t *load, int32_t *out);

#endif
