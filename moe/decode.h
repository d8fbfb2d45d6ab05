/*
 * decode.h - the decode step (incmoe_moe.h, "Decode"): one low-latency
 * dispatch, the local experts on the rows received, one low-latency combine,
 * each collective posted and waited for (incmoe_wait) by the calling thread.
 */
#ifndef INCMOE_MOE_DECODE_H
#define INCMOE_MOE_DECODE_H

#include "run.h"

/* The capacity from the extension's decode_tokens (INCMOE_MOE_PARAM_DECODE; has 0 when the
   bit is unset): this rank's verdict; fills L->decode_tokens. */
incmoe_status_t decode_read(incmoe_moe_t *L, int has, int decode_tokens);

/* The decode step's host state (the source regions' first rows), made once at create. */
incmoe_status_t decode_setup(incmoe_moe_t *L);
void decode_free(incmoe_moe_t *L);

/* Whether a forward of these counts may run the decode step on lane i: the layer has one (a
   capacity, a backend with it), every count is in 0 .. the capacity, and the lane's
   algorithm has not refused the form.  counts NULL: no.  Pure: every rank with the same
   counts answers alike. */
int decode_fits(const incmoe_moe_t *L, int i, const int *counts);

/*
 * Collective: the decode step of in on lane i; its output is then at run_output.  why
 * non-NULL: this rank refuses the forward with that reason (the dispatch carries it; the
 * forward fails on every rank with INCMOE_ERR_INVALID_ARG and the layer stays usable).  A
 * form the lane's communicator refuses alike on every rank (INCMOE_ERR_NO_MEMORY,
 * INCMOE_ERR_UNSUPPORTED) is logged, the lane is kept off it from then on and *again_p is
 * set: the caller runs the forward on the bulk path instead.  Any other failure leaves the
 * layer unusable (L->failed).
 */
incmoe_status_t decode_run(incmoe_moe_t *L, int i, const moe_inputs_t *in, const char *why,
                           int *again_p);

#endif
