/*
 * eplb.h - DeepSeek's EPLB greedy, the baseline a placement with replicas is
 * measured against (issue 29): its global policy, from per-expert loads only.
 *   1. Replicate: N * extra times, give one more replica to the expert with
 *      the highest load per replica (the lowest id of equals).
 *   2. Pack: the replicas, each weighing its expert's load over its replica
 *      count, heaviest first (the lower index of equals), each onto the
 *      lightest rank that still has a free slot (E/N + extra slots per rank;
 *      the lowest rank of equals).
 * EPLB keeps no home rank, so its placement may move every expert.  Where it
 * packs two replicas of one expert onto one rank, they are one replica here
 * (incmoe_moe_placement_t has distinct ranks); that rank's share of the
 * expert's tokens becomes one replica's.  Written from EPLB's description
 * and its eplb.py's behaviour, not from its code.
 */
#ifndef INCMOE_TOOLS_EPLB_H
#define INCMOE_TOOLS_EPLB_H

#include <stdint.h>

#include "incmoe/incmoe_moe.h"

/* Each expert's pairs in the sample: load[E] (the sample checked by the caller). */
void eplb_expert_load(const incmoe_moe_routing_sample_t *s, int64_t *load);

/* EPLB's placement of E experts on N ranks (E a multiple of N) with extra slots per rank, for
   load[E]: offsets[E + 1], ranks (room for E + N * extra).  0, or -1 out of memory. */
int eplb_place(const int64_t *load, int E, int N, int extra, int *offsets, int *ranks);

#endif
