/* dtype.h - element conversions for the 16-bit floating-point types. */
#ifndef INCMOE_DTYPE_H
#define INCMOE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float dtype_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float    f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t dtype_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float dtype_half_to_float(uint16_t h);
uint16_t dtype_float_to_half(float f);

/* n elements of dtype (INCMOE_FLOAT16, INCMOE_BFLOAT16 or INCMOE_FLOAT32) to fp32, and back
   (rounding to nearest even).  The vectors must not overlap. */
void dtype_to_float(float *dst, const void *src, size_t n, int dtype);
void dtype_from_float(void *dst, const float *src, size_t n, int dtype);

#endif
