/*
 * gemm_bf16.c - bf16 weights on CPUs with AVX512-BF16: W packed as pairs of k, A rounded
 * to bf16, a tile of 12 rows x two panels of 16 columns of vdpbf16ps (each lane the dot
 * product of a pair of k added into fp32).  Every element is one chain over the pairs in
 * order, whichever tile it falls in; the conversion of A takes every element through the same
 * instruction (a tail is padded), since vcvtneps2bf16 treats denormals as zero where a scalar
 * rounding would not.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/gemm.h"

#define NR  CPU_GEMM_NR
#define MRB CPU_GEMM_MR_BF16

void cpu_gemm_bf16_pack(uint16_t *dst, const uint16_t *w, size_t n, size_t k, size_t ldw)
{
    const size_t k2 = (k + 1) / 2, panels = (n + NR - 1) / NR;
    memset(dst, 0, panels * NR * 2 * k2 * sizeof(uint16_t));
    for (size_t j = 0; j < n; j++) {
        uint16_t *col = dst + (j / NR) * NR * 2 * k2 + (j % NR) * 2;
        for (size_t kk = 0; kk < k; kk++)
            col[(kk / 2) * NR * 2 + kk % 2] = w[j * ldw + kk];
    }
}

/* 16 floats rounded to bf16, to nearest even (denormals as zero). */
__attribute__((target("avx512f,avx512bf16"))) static void round16(uint16_t *dst, const float *src)
{
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src));
    _mm256_storeu_si256((__m256i *)dst, (__m256i)h);
}

void cpu_gemm_bf16_prepare(uint16_t *dst, size_t m, size_t k, const float *rows, size_t lda)
{
    const size_t kp = (k + 1) / 2 * 2, mp = (m + MRB - 1) / MRB * MRB;
    for (size_t r = 0; r < m; r++) {
        uint16_t *d = dst + r * kp;
        const float *s = rows + r * lda;
        size_t i = 0;
        for (; i + 16 <= k; i += 16)
            round16(d + i, s + i);
        float tail[16] = {0};
        uint16_t out[16];
        memcpy(tail, s + i, (k - i) * sizeof(float));
        round16(out, tail);
        memcpy(d + i, out, (kp - i) * sizeof(uint16_t)); /* the pad past k is zero */
    }
    memset(dst + m * kp, 0, (mp - m) * kp * sizeof(uint16_t));
}

/* One MRB x (16 np) tile over the k2 pairs: a (MRB rows, lda), np (1 or 2) panels [k2][NR][2]
   from b, b + 2 NR k2 on, into t [MRB][2 NR] (rows ldt apart).  Two panels at once: 24
   accumulators, and each pair of A broadcast once serves 32 columns, so the loads keep up
   with two dot products a cycle. */
__attribute__((target("avx512f,avx512bf16"))) static inline void
tile(size_t k2, const uint16_t *a, size_t lda, const uint16_t *b, int np, float *t, size_t ldt)
{
    const uint16_t *b1 = b + 2 * NR * k2;
    __m512 c[MRB][2];
#pragma GCC unroll 12
    for (int r = 0; r < MRB; r++)
        c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < k2; kk++) {
        __m512bh b0v = (__m512bh)_mm512_loadu_si512(b + kk * NR * 2);
        __m512bh b1v = np == 2 ? (__m512bh)_mm512_loadu_si512(b1 + kk * NR * 2) : b0v;
#pragma GCC unroll 12
        for (int r = 0; r < MRB; r++) {
            int32_t pair;
            memcpy(&pair, a + r * lda + 2 * kk, sizeof(pair));
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0v);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1v);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MRB; r++) {
        _mm512_storeu_ps(t + r * ldt, c[r][0]);
        _mm512_storeu_ps(t + r * ldt + NR, c[r][1]);
    }
}

/* The pair kernel for one or two panels, chosen once per pair of panels (the branch in
   tile() is then known where it is inlined). */
__attribute__((target("avx512f,avx512bf16"))) static void
tile2(size_t k2, const uint16_t *a, size_t lda, const uint16_t *b, float *t, size_t ldt)
{
    tile(k2, a, lda, b, 2, t, ldt);
}

__attribute__((target("avx512f,avx512bf16"))) static void
tile1(size_t k2, const uint16_t *a, size_t lda, const uint16_t *b, float *t, size_t ldt)
{
    tile(k2, a, lda, b, 1, t, ldt);
}

void cpu_gemm_bf16_panels(size_t n0, size_t n1, size_t m, size_t k, const uint16_t *a,
                          const uint16_t *wp, float *c, size_t ldc)
{
    const size_t k2 = (k + 1) / 2, kp = 2 * k2;
    float t[MRB * 2 * NR];
    for (size_t j0 = n0; j0 < n1; j0 += 2 * NR) {
        const uint16_t *b = wp + j0 * kp;
        size_t nc = n1 - j0 < 2 * NR ? n1 - j0 : 2 * NR;
        for (size_t r0 = 0; r0 < m; r0 += MRB) {
            /* A whole tile goes straight into c; an edge one through t, its part copied. */
            int whole = nc == 2 * NR && r0 + MRB <= m;
            float *dst = whole ? c + r0 * ldc + (j0 - n0) : t;
            size_t ldd = whole ? ldc : 2 * NR;
            if (nc > NR)
                tile2(k2, a + r0 * kp, kp, b, dst, ldd);
            else
                tile1(k2, a + r0 * kp, kp, b, dst, ldd);
            for (size_t r = 0; !whole && r < MRB && r0 + r < m; r++)
                memcpy(c + (r0 + r) * ldc + (j0 - n0), t + r * 2 * NR, nc * sizeof(float));
        }
    }
}
