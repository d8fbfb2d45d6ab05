/*
 * routing.h - full or masked routing: the routing a forward asks for, what its
 * tokens need of the other ranks, and the choice INCMOE_MOE_ROUTING_AUTO
 * makes.  The choice is a pure function of what the header exchange gives
 * every rank, so every rank makes the same one.
 */
#ifndef INCMOE_MOE_ROUTING_H
#define INCMOE_MOE_ROUTING_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe_moe.h"

/*
 * Masked routing is chosen where its bytes per rank and link direction are at
 * most this share of full routing's.  tools/incmoe-model puts a masked
 * layer's time at its bytes' share of the full layer's time within half a
 * percent (the bitmaps, the plan message) for N = 4 ... 16 and 16 ... 1024
 * tokens per rank, on the testbed's 100 Mbit/s links and on a 100 Gbit/s
 * fabric alike; the margin is the model's own stated accuracy (10%), so auto
 * does not pick masked where the model's error could make it the slower.
 */
#define ROUTING_AUTO_SHARE 0.9

/* "full", "masked" or "auto" into *out: 0, or -1 for other text. */
int routing_parse(const char *text, incmoe_moe_routing_t *out);

/* The INCMOE_MOE_ROUTING setting; a value that is no routing is logged and full used. */
incmoe_moe_routing_t routing_setting(void);

/* What T tokens of this rank (ids [T][k]) need: (token, other rank) pairs, and tokens that
   some other rank needs, with the experts placed by owner[E] over N ranks. */
void routing_count(const int32_t *owner, int N, int rank, const int32_t *ids, int k, size_t T,
                   uint64_t *pairs_p, uint64_t *routed_p);

/* Every rank's tokens, summed, and the rows' sizes. */
typedef struct {
    int N;
    uint64_t tokens; /* over all ranks */
    uint64_t pairs;  /* (token, other rank) pairs over all ranks */
    uint64_t routed; /* tokens some other rank needs, over all ranks */
    size_t grow;     /* bytes of a dispatched (gathered) row */
    size_t zrow;     /* bytes of a combined (reduced) row */
} routing_load_t;

/* Bytes per rank and link direction (the busier direction), averaged over the ranks, of one
   forward's collectives in the network: full (AllGather and ReduceScatter) and masked
   (dispatch and combine with their destination bitmaps).  The point-to-point algorithms
   favour masked more (k-bar / (N - 1) against (u + k-bar) / N), so this is the stricter. */
void routing_bytes(const routing_load_t *load, double *full_p, double *masked_p);

/* INCMOE_MOE_ROUTING_MASKED where its bytes are at most ROUTING_AUTO_SHARE of full's, else
   INCMOE_MOE_ROUTING_FULL (also with one rank or no tokens: nothing would be saved). */
incmoe_moe_routing_t routing_choose(const routing_load_t *load);

#endif
