/* dtype.c - element sizes, names, and IEEE binary16 / bfloat16 conversions. */
#pragma GCC optimize("O3") /* the vector conversions below are hot in the reductions and FFN */
#include "dtype.h"

#include "incmoe/incmoe.h"

static const struct {
    const char *name;
    size_t size;
} dtype_info[INC_DTYPE_COUNT] = {
    [INCMOE_INT8] = {"int8", 1},      [INCMOE_UINT8] = {"uint8", 1},
    [INCMOE_INT32] = {"int32", 4},    [INCMOE_UINT32] = {"uint32", 4},
    [INCMOE_INT64] = {"int64", 8},    [INCMOE_UINT64] = {"uint64", 8},
    [INCMOE_FLOAT16] = {"half", 2},   [INCMOE_FLOAT32] = {"float", 4},
    [INCMOE_FLOAT64] = {"double", 8}, [INCMOE_BFLOAT16] = {"bfloat16", 2},
};

static const char *const redop_names[INC_REDOP_COUNT] = {"sum", "prod", "max", "min"};

size_t incmoe_dtype_size(incmoe_dtype_t dtype)
{
    return (unsigned)dtype < INC_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

const char *incmoe_dtype_name(incmoe_dtype_t dtype)
{
    return (unsigned)dtype < INC_DTYPE_COUNT ? dtype_info[dtype].name : "unknown";
}

const char *incmoe_redop_name(incmoe_redop_t op)
{
    return (unsigned)op < INC_REDOP_COUNT ? redop_names[op] : "unknown";
}

int incmoe_reduce_supported(incmoe_dtype_t dtype, incmoe_redop_t op)
{
    return (unsigned)dtype < INC_DTYPE_COUNT && (unsigned)op < INC_REDOP_COUNT;
}

float inc_dtype_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) { /* inf / nan */
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal */
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) { /* zero */
        u = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400u) == 0);
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Round to nearest even, overflow to infinity, NaN stays NaN. */
uint16_t inc_dtype_float_to_half(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return sign | 0x7e00u;
    if (abs >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return sign | 0x7c00u;
    if (abs >= 0x38800000u) { /* normal half */
        uint32_t r = abs - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return sign | (uint16_t)(r >> 13);
    }
    if (abs < 0x33000000u) /* below half the smallest subnormal */
        return sign;
    /* subnormal half: shift the mantissa with its implicit bit, round to even */
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;
    uint32_t r = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return sign | (uint16_t)r;
}

/* Wire payloads need not be aligned (UCX eager data follows its header). */
typedef uint16_t u16_unaligned __attribute__((aligned(1)));

void inc_dtype_to_float(float *restrict dst, const void *restrict src, size_t n, int dtype)
{
    const u16_unaligned *h = src;
    switch (dtype) {
    case INCMOE_FLOAT16:
        for (size_t i = 0; i < n; i++)
            dst[i] = inc_dtype_half_to_float(h[i]);
        break;
    case INCMOE_BFLOAT16:
        for (size_t i = 0; i < n; i++)
            dst[i] = inc_dtype_bf16_to_float(h[i]);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}

void inc_dtype_from_float(void *restrict dst, const float *restrict src, size_t n, int dtype)
{
    u16_unaligned *h = dst;
    switch (dtype) {
    case INCMOE_FLOAT16:
        for (size_t i = 0; i < n; i++)
            h[i] = inc_dtype_float_to_half(src[i]);
        break;
    case INCMOE_BFLOAT16:
        for (size_t i = 0; i < n; i++)
            h[i] = inc_dtype_float_to_bf16(src[i]);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}
