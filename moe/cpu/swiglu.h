/* swiglu.h - the FFN's activation, SiLU(gate) * up, 4 or 16 elements at a time. */
#ifndef INCMOE_MOE_CPU_SWIGLU_H
#define INCMOE_MOE_CPU_SWIGLU_H

#include <stddef.h>

/* act[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n.  Every element goes through the same
   vector code (a tail is padded), so an element's result does not depend on n or on
   where it sits.  Within 4 ulp of the exact result (exp is a polynomial within 2 ulp of
   expf), or 1e-36 where SiLU is smaller (g < -80: exp's argument is clamped at 88.3). */
void cpu_swiglu(float *act, const float *g, const float *u, size_t n);

#endif
