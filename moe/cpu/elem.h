/* elem.h - fp32 arithmetic on fp32/fp16/bf16 rows (the FFN accumulates in fp32); plain
   conversions are inc_dtype_to_float / inc_dtype_from_float in base/dtype.h. */
#ifndef INCMOE_MOE_ELEM_H
#define INCMOE_MOE_ELEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "incmoe/incmoe.h"

/* dst (fp32) = src rounded to dtype and widened back. */
static inline void elem_round(float *dst, const float *src, size_t n, incmoe_dtype_t dtype)
{
    switch (dtype) {
    case INCMOE_FLOAT16:
        for (size_t i = 0; i < n; i++)
            dst[i] = inc_dtype_half_to_float(inc_dtype_float_to_half(src[i]));
        break;
    case INCMOE_BFLOAT16:
        for (size_t i = 0; i < n; i++)
            dst[i] = inc_dtype_bf16_to_float(inc_dtype_float_to_bf16(src[i]));
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}

/* dst (dtype) = dst + add, rounded once. */
static inline void elem_add_float(void *dst, const float *add, size_t n, incmoe_dtype_t dtype)
{
    uint16_t *h = dst;
    float *f = dst;
    switch (dtype) {
    case INCMOE_FLOAT16:
        for (size_t i = 0; i < n; i++)
            h[i] = inc_dtype_float_to_half(inc_dtype_half_to_float(h[i]) + add[i]);
        break;
    case INCMOE_BFLOAT16:
        for (size_t i = 0; i < n; i++)
            h[i] = inc_dtype_float_to_bf16(inc_dtype_bf16_to_float(h[i]) + add[i]);
        break;
    default:
        for (size_t i = 0; i < n; i++)
            f[i] += add[i];
        break;
    }
}

#endif
