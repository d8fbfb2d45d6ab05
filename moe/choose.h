/*
 * choose.h - the path a forward runs when its algorithm, mode or routing is
 * left to the layer (incmoe_moe_path_t in incmoe_moe.h): measured, agreed by
 * every rank, kept for the counts it was measured at (used while no rank's count
 * moved more than 2x from them; the last MOE_MAX_CHOICES are kept).
 */
#ifndef INCMOE_MOE_CHOOSE_H
#define INCMOE_MOE_CHOOSE_H

#include "run.h"

/* The lanes a forward may run on: [first, first + n). */
void choose_lanes(const incmoe_moe_t *L, int *first_p, int *n_p);

/* Collective, before a forward's header exchange (every rank asks alike, from the same
   counts): *known_p 1 and *path_p the path when it runs without measuring (one candidate, or
   a kept choice for these asks and counts). */
incmoe_status_t choose_known(incmoe_moe_t *L, const int *counts, incmoe_moe_mode_t mode,
                             incmoe_moe_routing_t routing, moe_path_t *path_p, int *known_p);

/*
 * Collective.  The path for mode and routing (each may be auto) on the lanes the layer's
 * path allows.  With one candidate, or a choice kept for these asks and counts, *path_p is
 * it and *ran_p and *runs_p 0.  Otherwise every candidate runs once on the forward's
 * inputs, and those within 1.5x of the fastest of them up to twice more (*ran_p: how many
 * candidates, *runs_p: how many forwards; the output is the last run's); each run's time
 * is agreed as the slowest rank's and *path_p is the close one of smallest median (the
 * first of equals).  Mode auto adds the decode step where the counts fit (decode.h); mode
 * decode has it only.  *again_p: a decode step's form was refused (run.h).
 */
incmoe_status_t choose_path(incmoe_moe_t *L, const moe_inputs_t *in, incmoe_moe_mode_t mode,
                            incmoe_moe_routing_t routing, moe_path_t *path_p, int *ran_p,
                            int *runs_p, int *again_p);

#endif
