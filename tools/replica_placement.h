/*
 * replica_placement.h - a placement with replicas (incmoe_moe_placement_t's
 * arrays) as incmoe-perf and incmoe-moe-bench choose it for --extra-slots and
 * print it in their headers.
 */
#ifndef INCMOE_TOOLS_REPLICA_PLACEMENT_H
#define INCMOE_TOOLS_REPLICA_PLACEMENT_H

#include "incmoe/incmoe_moe.h"

/* incmoe_moe_placement_choose over sample s with extra slots per rank, into arrays allocated
   here (*offsets: E + 1 ints, *ranks: E + N * extra; the caller frees both): 0.  -1 after
   saying why on stderr, prefixed by prog, with both left NULL. */
int inc_choose_replicas(const char *prog, const incmoe_moe_routing_sample_t *s, int extra,
                        int **offsets, int **ranks);

/* Prints " e:r0,r1,..." on stdout for each of the E experts on two ranks or more (offsets[E + 1],
   ranks as the placement's), or " none" when there is no such expert, then a newline. */
void inc_print_replicas(int E, const int *offsets, const int *ranks);

#endif
