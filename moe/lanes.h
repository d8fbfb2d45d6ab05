/*
 * lanes.h - the communicators a layer's paths run on: its own, and one of each
 * other algorithm on the same switch, shared by every layer on the same
 * communicator (incmoe_moe_path_t in incmoe_moe.h says how they are made).
 */
#ifndef INCMOE_MOE_LANES_H
#define INCMOE_MOE_LANES_H

#include "layer.h"

/* The job id of the layer communicator's sibling running algo: FNV-1a over the job id (8
   bytes, least significant first), "moe-path" and algo (8 bytes likewise). */
uint64_t lanes_job_id(uint64_t job_id, int algo);

/* Lane 0 is L->comm; with a path whose algorithm is not the communicator's, one lane per
   other algorithm it may run (collective: a sibling communicator is created on every rank
   alike), and every rank's verdict agreed: an error on one rank fails every rank's (the
   others with INCMOE_ERR_INVALID_ARG).  On failure what was opened stays for lanes_close. */
incmoe_status_t lanes_open(incmoe_moe_t *L);
/* Frees every lane but 0, leaving a sibling communicator no other layer holds. */
incmoe_status_t lanes_close(incmoe_moe_t *L);
/* Points L->ctx's registrations and FIFO at lane i. */
void lanes_use(incmoe_moe_t *L, int i);
/* The lane running algo, or -1. */
int lanes_find(const incmoe_moe_t *L, int algo);
/* Whether lane i's algorithm has dispatch and combine, asked once (collective: a dispatch of
   no rows on every rank, or INCMOE_ERR_UNSUPPORTED from each alike); between forwards. */
incmoe_status_t lanes_dc_probe(incmoe_moe_t *L, int i);
/* "inc", "ring", "a2a" or "comm" (the layer's own, algorithm not told). */
const char *lanes_algo_name(int algo);

#endif
