/* dtype.h - element conversions for the 16-bit floating-point types. */
#ifndef INC_DTYPE_H
#define INC_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "incmoe/incmoe.h"

/* How many element types and reduction operations there are: internal, so that
   adding one to the public enums changes no public value. */
#define INC_DTYPE_COUNT ((int)INCMOE_BFLOAT16 + 1)
#define INC_REDOP_COUNT ((int)INCMOE_MIN + 1)

static inline float inc_dtype_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t inc_dtype_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float inc_dtype_half_to_float(uint16_t h);
uint16_t inc_dtype_float_to_half(float f);

/* n elements of dtype (INCMOE_FLOAT16, INCMOE_BFLOAT16 or INCMOE_FLOAT32) to fp32, and back
   (rounding to nearest even).  The vectors must not overlap. */
void inc_dtype_to_float(float *dst, const void *src, size_t n, int dtype);
void inc_dtype_from_float(void *dst, const float *src, size_t n, int dtype);

#endif
