/*
 * gemm.c - C = A W^T over packed weight panels, two panels of 16 columns at a time: a
 * register tile of 12 rows x 32 columns on AVX-512, 6 x 16 per panel on AVX2 and in C, every
 * element one fused multiply-add chain over k (gemm.h says why).  The panels of a bf16 or
 * fp16 W are widened to fp32 once per call and then serve every tile of rows.
 */
#include "cpu/gemm.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"

#define NR CPU_GEMM_NR

typedef uint16_t u16x4 __attribute__((vector_size(8)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));

/* bf16 is the top half of an fp32: widening is a shift, done 4 at a time. */
static void widen_bf16(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        u16x4 h;
        memcpy(&h, src + i, sizeof(h));
        u32x4 w = __builtin_convertvector(h, u32x4) << 16;
        memcpy(dst + i, &w, sizeof(w));
    }
    for (; i < n; i++)
        dst[i] = inc_dtype_bf16_to_float(src[i]);
}

/* fp16 with F16C, 8 at a time (exact, as the scalar conversion the tail takes). */
__attribute__((target("avx,f16c"))) static void widen_f16c(float *dst, const uint16_t *src,
                                                           size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    inc_dtype_to_float(dst + i, src + i, n - i, INCMOE_FLOAT16);
}

void cpu_widen(float *dst, const void *src, size_t n, incmoe_dtype_t dtype)
{
    if (dtype == INCMOE_BFLOAT16)
        widen_bf16(dst, src, n);
    else if (dtype == INCMOE_FLOAT16 && cpu_isa() >= CPU_ISA_AVX2)
        widen_f16c(dst, src, n);
    else
        inc_dtype_to_float(dst, src, n, dtype);
}

static int bf16_kernel(incmoe_dtype_t dtype)
{
    return dtype == INCMOE_BFLOAT16 && cpu_isa() >= CPU_ISA_AVX512_BF16;
}

size_t cpu_gemm_packed_elems(size_t n, size_t k, incmoe_dtype_t dtype)
{
    size_t cols = (n + NR - 1) / NR * NR;
    return cols * (bf16_kernel(dtype) ? (k + 1) / 2 * 2 : k);
}

void cpu_gemm_pack(void *dst, const void *w, size_t n, size_t k, size_t ldw, incmoe_dtype_t dtype)
{
    if (bf16_kernel(dtype)) {
        cpu_gemm_bf16_pack(dst, w, n, k, ldw);
        return;
    }
    const size_t esize = dtype == INCMOE_FLOAT32 ? 4 : 2;
    uint8_t *d = dst;
    const uint8_t *s = w;
    size_t panels = (n + NR - 1) / NR;
    memset(dst, 0, panels * NR * k * esize);
    for (size_t j = 0; j < n; j++) {
        uint8_t *col = d + ((j / NR) * NR * k + j % NR) * esize;
        for (size_t kk = 0; kk < k; kk++)
            memcpy(col + kk * NR * esize, s + (j * ldw + kk) * esize, esize);
    }
}

size_t cpu_gemm_scratch_floats(size_t m, size_t kmax)
{
    size_t mp = (m + CPU_GEMM_MR_BF16 - 1) / CPU_GEMM_MR_BF16 * CPU_GEMM_MR_BF16;
    /* two widened panels and a padded tile; then the bf16 rows (two to a float) */
    return (2 * NR + CPU_GEMM_MR_MAX) * kmax + mp * ((kmax + 1) / 2) + 16;
}

void cpu_gemm_prepare(cpu_gemm_a_t *a, size_t m, size_t k, const float *rows, size_t lda,
                      incmoe_dtype_t dtype, float *scratch)
{
    a->m = m;
    a->k = k;
    a->f = rows;
    a->lda = lda;
    a->bf = NULL;
    if (bf16_kernel(dtype)) {
        /* after the region the fp32 path uses, which the bf16 path leaves alone */
        uint16_t *bf = (uint16_t *)(scratch + (2 * NR + CPU_GEMM_MR_MAX) * k);
        cpu_gemm_bf16_prepare(bf, m, k, rows, lda);
        a->bf = bf;
    }
}

/* One 6 x NR tile over all of k: a (6 rows, lda), b (a panel [k][NR]), into t (rows ldt). */
__attribute__((target("avx2,fma"))) static void tile_avx2_one(size_t k, const float *a, size_t lda,
                                                              const float *b, float *t, size_t ldt)
{
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++)
        c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (size_t kk = 0; kk < k; kk++) {
        __m256 b0 = _mm256_loadu_ps(b + kk * NR), b1 = _mm256_loadu_ps(b + kk * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            __m256 ar = _mm256_broadcast_ss(a + r * lda + kk);
            c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        _mm256_storeu_ps(t + r * ldt, c[r][0]);
        _mm256_storeu_ps(t + r * ldt + 8, c[r][1]);
    }
}

/* A tile: its rows of a (lda) against np (1 or 2) panels from b (the second NR k floats
   on), into t [rows][np NR] (rows ldt apart). */
static void tile_avx2(size_t k, const float *a, size_t lda, const float *b, int np, float *t,
                      size_t ldt)
{
    for (int p = 0; p < np; p++)
        tile_avx2_one(k, a, lda, b + (size_t)p * NR * k, t + p * NR, ldt);
}

/* The same chains 12 rows by two panels at a time, a row's 16 columns of a panel in one
   register: on CPUs with AVX-512 twice the lanes of an FMA, and each broadcast of a serves
   32 columns (24 accumulators; the loads keep up with two FMAs a cycle). */
__attribute__((target("avx512f"))) static inline void
tile_avx512_np(size_t k, const float *a, size_t lda, const float *b, int np, float *t, size_t ldt)
{
    const float *b1 = b + (np == 2 ? NR * k : 0);
    __m512 c[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++)
        c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < k; kk++) {
        __m512 b0v = _mm512_loadu_ps(b + kk * NR), b1v = _mm512_loadu_ps(b1 + kk * NR);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            __m512 av = _mm512_set1_ps(a[r * lda + kk]);
            c[r][0] = _mm512_fmadd_ps(av, b0v, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(av, b1v, c[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        _mm512_storeu_ps(t + r * ldt, c[r][0]);
        _mm512_storeu_ps(t + r * ldt + NR, c[r][1]);
    }
}

/* np known where the tile is inlined; one panel reads it twice (the last of an odd count). */
__attribute__((target("avx512f"))) static void
tile_avx512(size_t k, const float *a, size_t lda, const float *b, int np, float *t, size_t ldt)
{
    if (np == 2)
        tile_avx512_np(k, a, lda, b, 2, t, ldt);
    else
        tile_avx512_np(k, a, lda, b, 1, t, ldt);
}

/* The same chains in portable C (fmaf: one rounding per step, as the vector paths). */
static void tile_c(size_t k, const float *a, size_t lda, const float *b, int np, float *t,
                   size_t ldt)
{
    for (int p = 0; p < np; p++) {
        const float *bp = b + (size_t)p * NR * k;
        float c[6][NR] = {{0}};
        for (size_t kk = 0; kk < k; kk++)
            for (int r = 0; r < 6; r++)
                for (int j = 0; j < NR; j++)
                    c[r][j] = fmaf(a[r * lda + kk], bp[kk * NR + j], c[r][j]);
        for (int r = 0; r < 6; r++)
            memcpy(t + r * ldt + p * NR, c[r], sizeof(c[r]));
    }
}

/* A tile function and its rows. */
typedef struct {
    void (*fn)(size_t, const float *, size_t, const float *, int, float *, size_t);
    size_t mr;
} tile_t;

static tile_t tile_pick(void)
{
    switch (cpu_isa()) {
    case CPU_ISA_AVX512:
    case CPU_ISA_AVX512_BF16:
        return (tile_t){tile_avx512, 12};
    case CPU_ISA_AVX2:
        return (tile_t){tile_avx2, 6};
    default:
        return (tile_t){tile_c, 6};
    }
}

/* Every tile of rows against np fp32 panels from b: columns [0, nc) of them into c. */
static void panel_rows(tile_t tile, size_t m, size_t nc, int np, size_t k, const float *a,
                       size_t lda, const float *b, float *c, size_t ldc, float *apad)
{
    float t[CPU_GEMM_MR_MAX * 2 * NR];
    for (size_t r0 = 0; r0 < m; r0 += tile.mr) {
        size_t mr = m - r0 < tile.mr ? m - r0 : tile.mr;
        const float *at = a + r0 * lda;
        size_t ld = lda;
        if (mr < tile.mr) { /* the last rows, zero-padded to a whole tile */
            memset(apad, 0, tile.mr * k * sizeof(float));
            for (size_t r = 0; r < mr; r++)
                memcpy(apad + r * k, at + r * lda, k * sizeof(float));
            at = apad;
            ld = k;
        }
        if (mr == tile.mr && nc == 2 * NR) { /* a whole tile, straight into c */
            tile.fn(k, at, ld, b, np, c + r0 * ldc, ldc);
            continue;
        }
        tile.fn(k, at, ld, b, np, t, 2 * NR);
        for (size_t r = 0; r < mr; r++)
            memcpy(c + (r0 + r) * ldc, t + r * 2 * NR, nc * sizeof(float));
    }
}

void cpu_gemm_packed(size_t n0, size_t n1, const cpu_gemm_a_t *a, const void *wp,
                     incmoe_dtype_t dtype, float *c, size_t ldc, float *scratch)
{
    const size_t m = a->m, k = a->k;
    if (m == 0 || n1 <= n0)
        return;
    if (a->bf != NULL) {
        cpu_gemm_bf16_panels(n0, n1, m, k, a->bf, wp, c, ldc);
        return;
    }
    tile_t tile = tile_pick();
    const size_t esize = dtype == INCMOE_FLOAT32 ? 4 : 2;
    float *panel = scratch, *apad = scratch + 2 * NR * k;
    for (size_t j0 = n0; j0 < n1; j0 += 2 * NR) {
        size_t nc = n1 - j0 < 2 * NR ? n1 - j0 : 2 * NR;
        int np = nc > NR ? 2 : 1;
        const uint8_t *p = (const uint8_t *)wp + j0 * k * esize;
        const float *b = (const float *)p;
        if (dtype != INCMOE_FLOAT32) {
            cpu_widen(panel, p, (size_t)np * NR * k, dtype);
            b = panel;
        }
        panel_rows(tile, m, nc, np, k, a->f, a->lda, b, c + (j0 - n0), ldc, apad);
    }
}
