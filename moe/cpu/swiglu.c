/*
 * swiglu.c - SiLU(gate) * up without a libm call per element: exp(x) = 2^n * p(r) with
 * x = n ln 2 + r, |r| <= ln2 / 2 (Cody-Waite: ln 2 in two parts), p Cephes's degree-5
 * polynomial for expf, 2^n added to the exponent bits.  GCC's vector extensions keep it
 * portable (swiglu_lanes.h, once per width): 4 lanes, one SSE register on plain x86-64,
 * and 16 lanes, one AVX-512 register, where cpu_isa() says the CPU has it.  Contraction
 * into fused multiply-adds is off for the whole file, so both widths (and builds with or
 * without -mfma) round every operation alike and give the same bits.
 */
#pragma GCC optimize("fp-contract=off")

#include "cpu/swiglu.h"

#include <stdint.h>
#include <string.h>

#include "cpu/gemm.h"

#define LANES         4
#define LANES_NAME(x) x##4
#include "cpu/swiglu_lanes.h"
#undef LANES
#undef LANES_NAME

#pragma GCC push_options
#pragma GCC target("avx512f")
#define LANES         16
#define LANES_NAME(x) x##16
#include "cpu/swiglu_lanes.h"
#undef LANES
#undef LANES_NAME
#pragma GCC pop_options

void cpu_swiglu(float *act, const float *g, const float *u, size_t n)
{
    if (cpu_isa() >= CPU_ISA_AVX512)
        swiglu16(act, g, u, n);
    else
        swiglu4(act, g, u, n);
}
