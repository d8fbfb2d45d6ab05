/*
 * swiglu.c - SiLU(gate) * up without a libm call per element: exp(x) = 2^n * p(r) with
 * x = n ln 2 + r, |r| <= ln2 / 2 (Cody-Waite: ln 2 in two parts), p Cephes's degree-5
 * polynomial for expf, 2^n added to the exponent bits.  GCC's vector extensions keep it
 * portable: 4 lanes, one SSE register on plain x86-64 (16 bytes, so no ABI change with or
 * without AVX).
 */
#include <stdint.h>
#include <string.h>

#include "cpu/swiglu.h"

typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

#define LANES 4

static inline f32x4 splat(float v)
{
    return (f32x4){v, v, v, v};
}

/* Lane by lane: a where mask is set, else b. */
static inline f32x4 select4(i32x4 mask, f32x4 a, f32x4 b)
{
    i32x4 ia, ib;
    memcpy(&ia, &a, sizeof(ia));
    memcpy(&ib, &b, sizeof(ib));
    ia = (ia & mask) | (ib & ~mask);
    memcpy(&a, &ia, sizeof(a));
    return a;
}

/* exp(x), x clamped to [-87.3, 88.3] so 2^n stays a normal number. */
static inline f32x4 exp4(f32x4 x)
{
    x = select4(x < splat(88.3f), x, splat(88.3f));
    x = select4(x > splat(-87.3f), x, splat(-87.3f));
    /* n = round(x / ln 2): +/- 0.5 then truncation toward zero */
    f32x4 t = x * splat(1.44269504088896341f);
    t = t + select4(t < splat(0.0f), splat(-0.5f), splat(0.5f));
    i32x4 n = __builtin_convertvector(t, i32x4);
    f32x4 fn = __builtin_convertvector(n, f32x4);
    f32x4 r = x - fn * splat(0.693359375f);
    r = r - fn * splat(-2.12194440e-4f);
    f32x4 p = splat(1.9875691500E-4f);
    p = p * r + splat(1.3981999507E-3f);
    p = p * r + splat(8.3334519073E-3f);
    p = p * r + splat(4.1665795894E-2f);
    p = p * r + splat(1.6666665459E-1f);
    p = p * r + splat(5.0000001201E-1f);
    p = p * r * r + r + splat(1.0f);
    i32x4 bits;
    memcpy(&bits, &p, sizeof(bits));
    bits += n << 23;
    memcpy(&p, &bits, sizeof(p));
    return p;
}

static inline void swiglu4(float *act, const float *g, const float *u)
{
    f32x4 vg, vu;
    memcpy(&vg, g, sizeof(vg));
    memcpy(&vu, u, sizeof(vu));
    f32x4 a = vg / (splat(1.0f) + exp4(-vg)) * vu;
    memcpy(act, &a, sizeof(a));
}

void cpu_swiglu(float *act, const float *g, const float *u, size_t n)
{
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        swiglu4(act + i, g + i, u + i);
    if (i == n)
        return;
    float tg[LANES] = {0}, tu[LANES] = {0}, ta[LANES];
    memcpy(tg, g + i, (n - i) * sizeof(float));
    memcpy(tu, u + i, (n - i) * sizeof(float));
    swiglu4(ta, tg, tu);
    memcpy(act + i, ta, (n - i) * sizeof(float));
}
