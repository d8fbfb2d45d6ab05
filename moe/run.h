/*
 * run.h - one forward on one path: its configuration, its plan, the backend's
 * roles and the first failure inside them.
 */
#ifndef INCMOE_MOE_RUN_H
#define INCMOE_MOE_RUN_H

#include "layer.h"

/* A forward's inputs, checked and agreed by the header exchange. */
typedef struct {
    const incmoe_moe_forward_params_t *f;
    size_t tmax;
    const int *counts;
    const void *x;
    const int32_t *ids;
    const float *w;
    routing_load_t load; /* every rank's tokens and pairs, from the header exchange */
} moe_inputs_t;

/* The configuration a path runs with tmax rows per block: the automatic one (autotune.c;
   with masked, the forward's load, masked routing's bands), one band and one gather and
   reduce worker in baseline mode, one reduce worker and no tail assistance with masked
   routing (a band's combine is one collective). */
void run_config(const incmoe_moe_t *L, incmoe_moe_mode_t mode, const routing_load_t *masked,
                size_t tmax, incmoe_moe_config_t *cfg_p);

/* Runs the forward on path p; its output is then at run_output.  A failure leaves the
   layer unusable (L->failed) and is logged naming what failed; the decode step's own
   failures are as decode.h says (*again_p: its form was refused, run the forward again on
   the bulk path). */
incmoe_status_t run_path(incmoe_moe_t *L, const moe_path_t *p, const moe_inputs_t *in,
                         int *again_p);

/* Where the last forward run left this rank's outputs. */
void *run_output(incmoe_moe_t *L);

#endif
