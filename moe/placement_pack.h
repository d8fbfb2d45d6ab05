/*
 * placement_pack.h - the chooser's starting placement (placement_choose.c):
 * a balanced packing of a routing sample's per-expert load onto the ranks'
 * slots, every expert at least once, before the search that moves replicas
 * by what the per-token rule does with the sample.
 */
#ifndef INCMOE_MOE_PLACEMENT_PACK_H
#define INCMOE_MOE_PLACEMENT_PACK_H

#include <stdint.h>

/*
 * on[E][N] (zeroed by the caller): 1 where the packing puts a replica of expert e on rank r,
 * at most per (>= E/N) replicas a rank.  First the N * per slots are shared out: each expert
 * one replica, then one more at a time to the expert with the most pairs per replica (load[e]
 * over its replicas; of equals the fewest replicas, then the lowest id), at most N each.
 * Then the replicas, heaviest first (load over replicas; of equals the lower expert), each
 * go to the rank with the least weight so far that has a free slot and no replica of that
 * expert (the lowest rank of equals); a replica no rank can take is dropped, which never
 * happens to an expert's first.  0, or -1 when its scratch could not be allocated.
 */
int placement_pack(const int64_t *load, int E, int N, int per, uint8_t *on);

#endif
