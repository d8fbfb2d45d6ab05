/*
 * reduce.c - vectorisable reduction loops.
 *
 * Buffers need not be aligned: payloads sit wherever the transport put them
 * (UCX eager data follows its header), so every access is through a type
 * with alignment 1, which the compiler still vectorises.
 *
 * Native types combine element-wise in the order of the sources, one source
 * at a time over a block that stays in L1, so the compiler vectorises the
 * inner loops.  16-bit floats are widened into an fp32 accumulator block,
 * reduced there, and rounded once at the end, which keeps the accuracy of
 * fp32 accumulation and the result independent of anything but the order.
 */
#pragma GCC optimize("O3")
#include "reduce.h"

#include <stdint.h>
#include <string.h>

#include "dtype.h"

#define REDUCE_BLOCK 1024

#define OP_SUM(a, b)  ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MAX(a, b)  ((a) > (b) ? (a) : (b))
#define OP_MIN(a, b)  ((a) < (b) ? (a) : (b))

/* acc[i] = OP(acc[i], src[i]) over n elements of T, computed in UT: T itself, or (the acc_w*
   functions) an unsigned type, whose arithmetic wraps (two's complement) where a signed
   type's overflow would be undefined. */
#define DEFINE_ACC(name, T, UT, OP)                                                                \
    __attribute__((unused)) static void name(void *restrict accv, const void *restrict srcv,       \
                                             size_t n)                                             \
    {                                                                                              \
        typedef T unaligned_t __attribute__((aligned(1)));                                         \
        unaligned_t *acc = accv;                                                                   \
        const unaligned_t *src = srcv;                                                             \
        for (size_t i = 0; i < n; i++)                                                             \
            acc[i] = (T)OP((UT)acc[i], (UT)src[i]);                                                \
    }
#define DEFINE_NATIVE(name, T, OP) DEFINE_ACC(name, T, T, OP)

#define DEFINE_NATIVE_OPS(tname, T)                                                                \
    DEFINE_NATIVE(acc_sum_##tname, T, OP_SUM)                                                      \
    DEFINE_NATIVE(acc_prod_##tname, T, OP_PROD)                                                    \
    DEFINE_NATIVE(acc_max_##tname, T, OP_MAX)                                                      \
    DEFINE_NATIVE(acc_min_##tname, T, OP_MIN)

DEFINE_NATIVE_OPS(i8, int8_t)
DEFINE_NATIVE_OPS(u8, uint8_t)
DEFINE_NATIVE_OPS(i32, int32_t)
DEFINE_NATIVE_OPS(u32, uint32_t)
DEFINE_NATIVE_OPS(i64, int64_t)
DEFINE_NATIVE_OPS(u64, uint64_t)
DEFINE_NATIVE_OPS(f32, float)
DEFINE_NATIVE_OPS(f64, double)

DEFINE_ACC(acc_wsum_i8, int8_t, uint8_t, OP_SUM)
DEFINE_ACC(acc_wprod_i8, int8_t, uint32_t, OP_PROD)
DEFINE_ACC(acc_wsum_i32, int32_t, uint32_t, OP_SUM)
DEFINE_ACC(acc_wprod_i32, int32_t, uint32_t, OP_PROD)
DEFINE_ACC(acc_wsum_i64, int64_t, uint64_t, OP_SUM)
DEFINE_ACC(acc_wprod_i64, int64_t, uint64_t, OP_PROD)
DEFINE_ACC(acc_wprod_u8, uint8_t, uint32_t, OP_PROD)

typedef void (*acc_fn_t)(void *acc, const void *src, size_t n);

static acc_fn_t native_fn(incmoe_dtype_t dtype, incmoe_redop_t op)
{
    /* [dtype][op], in incmoe_redop_t's order; the products and signed sums named acc_w* are
       computed in an unsigned type (DEFINE_ACC). */
#define FNS(t, sum, prod)                                                                          \
    {                                                                                              \
        sum, prod, acc_max_##t, acc_min_##t                                                        \
    }
    static const acc_fn_t table[][INC_REDOP_COUNT] = {
        [INCMOE_INT8] = FNS(i8, acc_wsum_i8, acc_wprod_i8),
        [INCMOE_UINT8] = FNS(u8, acc_sum_u8, acc_wprod_u8),
        [INCMOE_INT32] = FNS(i32, acc_wsum_i32, acc_wprod_i32),
        [INCMOE_UINT32] = FNS(u32, acc_sum_u32, acc_prod_u32),
        [INCMOE_INT64] = FNS(i64, acc_wsum_i64, acc_wprod_i64),
        [INCMOE_UINT64] = FNS(u64, acc_sum_u64, acc_prod_u64),
        [INCMOE_FLOAT32] = FNS(f32, acc_sum_f32, acc_prod_f32),
        [INCMOE_FLOAT64] = FNS(f64, acc_sum_f64, acc_prod_f64),
    };
#undef FNS
    if ((unsigned)dtype >= sizeof(table) / sizeof(table[0]) || (unsigned)op >= INC_REDOP_COUNT)
        return NULL;
    return table[dtype][op];
}

static void reduce_ordered_16(uint16_t *dst, const void *const *srcs, int nsrc, size_t count,
                              incmoe_dtype_t dtype, acc_fn_t fn)
{
    float acc[REDUCE_BLOCK], tmp[REDUCE_BLOCK];
    for (size_t base = 0; base < count; base += REDUCE_BLOCK) {
        size_t n = count - base < REDUCE_BLOCK ? count - base : REDUCE_BLOCK;
        inc_dtype_to_float(acc, (const uint16_t *)srcs[0] + base, n, dtype);
        for (int s = 1; s < nsrc; s++) {
            inc_dtype_to_float(tmp, (const uint16_t *)srcs[s] + base, n, dtype);
            fn(acc, tmp, n);
        }
        inc_dtype_from_float(dst + base, acc, n, dtype);
    }
}

void inc_reduce_ordered(void *dst, const void *const *srcs, int nsrc, size_t count,
                        incmoe_dtype_t dtype, incmoe_redop_t op)
{
    if (dtype == INCMOE_FLOAT16 || dtype == INCMOE_BFLOAT16) {
        reduce_ordered_16(dst, srcs, nsrc, count, dtype, native_fn(INCMOE_FLOAT32, op));
        return;
    }
    acc_fn_t fn = native_fn(dtype, op);
    size_t size = incmoe_dtype_size(dtype);
    if (fn == NULL || size == 0)
        return; /* callers validate dtype and op first */
    /* Block-wise so the accumulator stays in cache across the sources. */
    size_t block = REDUCE_BLOCK * 4 / size;
    for (size_t base = 0; base < count; base += block) {
        size_t n = count - base < block ? count - base : block;
        char *out = (char *)dst + base * size;
        if (out != (const char *)srcs[0] + base * size)
            memmove(out, (const char *)srcs[0] + base * size, n * size);
        for (int s = 1; s < nsrc; s++)
            fn(out, (const char *)srcs[s] + base * size, n);
    }
}

void inc_reduce_pair(void *dst, const void *a, const void *b, size_t count, incmoe_dtype_t dtype,
                     incmoe_redop_t op)
{
    const void *srcs[2] = {a, b};
    if (dst == b && dst != a && dtype != INCMOE_FLOAT16 && dtype != INCMOE_BFLOAT16) {
        /* a op b == b op a for every op here, so accumulate into b in place. */
        srcs[0] = b;
        srcs[1] = a;
    }
    inc_reduce_ordered(dst, srcs, 2, count, dtype, op);
}
