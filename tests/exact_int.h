/*
 * exact_int.h - small integers written as elements of every dtype, for the
 * suites whose references are exact integer sums (dispatch and combine, both
 * forms, and the switch's low-latency form).  Written out here rather than
 * taken from base/dtype.h, which is what those suites check.
 */
#ifndef INCMOE_TEST_EXACT_INT_H
#define INCMOE_TEST_EXACT_INT_H

#include <stdint.h>
#include <string.h>

#include "incmoe/incmoe.h"

namespace exact_int
{

/* fp16 bits of a small integer (|v| < 2048). */
inline uint16_t half_of_int(long long v)
{
    if (v == 0)
        return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    unsigned long long a = (unsigned long long)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(a);
    uint16_t mant = (uint16_t)((a << (10 - e)) & 0x3ff);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}

/* The bytes of a small integer as an element of dtype (integers wrap as the C types do: -1 is
   all ones; bf16 is exact: a small integer needs few mantissa bits). */
inline void put(incmoe_dtype_t dtype, long long v, void *dst)
{
    if (dtype == INCMOE_FLOAT16) {
        uint16_t x = half_of_int(v);
        memcpy(dst, &x, 2);
    } else if (dtype == INCMOE_BFLOAT16) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t x = (uint16_t)(u >> 16);
        memcpy(dst, &x, 2);
    } else if (dtype == INCMOE_FLOAT32) {
        float f = (float)v;
        memcpy(dst, &f, 4);
    } else if (dtype == INCMOE_FLOAT64) {
        double f = (double)v;
        memcpy(dst, &f, 8);
    } else {
        uint64_t x = (uint64_t)v; /* little-endian: the low bytes are the narrower type's */
        memcpy(dst, &x, incmoe_dtype_size(dtype));
    }
}

} // namespace exact_int

#endif
