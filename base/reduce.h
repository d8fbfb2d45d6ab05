/*
 * reduce.h - the reduction kernels of the switch and of the end hosts.
 *
 * Results are a pure function of the inputs and their order: 16-bit floats
 * are widened to fp32, combined in the order given, and rounded once.
 */
#ifndef INC_REDUCE_H
#define INC_REDUCE_H

#include <stddef.h>

#include "incmoe/incmoe.h"

/* dst = ((srcs[0] op srcs[1]) op srcs[2]) ... ; nsrc >= 1; dst may alias srcs[0]. */
void inc_reduce_ordered(void *dst, const void *const *srcs, int nsrc, size_t count,
                        incmoe_dtype_t dtype, incmoe_redop_t op);

/* dst = a op b; dst may alias a or b. */
void inc_reduce_pair(void *dst, const void *a, const void *b, size_t count, incmoe_dtype_t dtype,
                     incmoe_redop_t op);

#endif
