/*
 * gemm_bf16.c - bf16 weights on CPUs with AVX512-BF16: W packed as pairs of k, A rounded
 * to bf16, a 12 x 16 tile of vdpbf16ps (16 output columns, each lane the dot product of a
 * pair of k added into fp32).  Every element is one chain over the pairs in order; the
 * conversion of A takes every element through the same instruction (a tail is padded),
 * since vcvtneps2bf16 treats denormals as zero where a scalar rounding would not.
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

/* One MRB x NR tile over the k2 pairs: a (MRB rows, lda), b (a panel [k2][NR][2]). */
__attribute__((target("avx512f,avx512bf16"))) static void
tile(size_t k2, const uint16_t *a, size_t lda, const uint16_t *b, float *t)
{
    __m512 c[MRB];
#pragma GCC unroll 12
    for (int r = 0; r < MRB; r++)
        c[r] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < k2; kk++) {
        __m512bh bv = (__m512bh)_mm512_loadu_si512(b + kk * NR * 2);
#pragma GCC unroll 12
        for (int r = 0; r < MRB; r++) {
            int32_t pair;
            memcpy(&pair, a + r * lda + 2 * kk, sizeof(pair));
            c[r] = _mm512_dpbf16_ps(c[r], (__m512bh)_mm512_set1_epi32(pair), bv);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MRB; r++)
        _mm512_storeu_ps(t + r * NR, c[r]);
}

void cpu_gemm_bf16_panels(size_t n0, size_t n1, size_t m, size_t k, const uint16_t *a,
                          const uint16_t *wp, float *c, size_t ldc)
{
    const size_t k2 = (k + 1) / 2, kp = 2 * k2;
    float t[MRB * NR];
    for (size_t j0 = n0; j0 < n1; j0 += NR) {
        const uint16_t *b = wp + j0 * kp;
        size_t nc = n1 - j0 < NR ? n1 - j0 : NR;
        for (size_t r0 = 0; r0 < m; r0 += MRB) {
            tile(k2, a + r0 * kp, kp, b, t);
            for (size_t r = 0; r < MRB && r0 + r < m; r++)
                memcpy(c + (r0 + r) * ldc + (j0 - n0), t + r * NR, nc * sizeof(float));
        }
    }
}
