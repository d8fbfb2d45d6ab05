/*
 * gemm.h - the CPU backend's GEMM: C = A W^T with A fp32 rows and W an expert's weights
 * kept in their own type (fp32, fp16 or bf16), packed once at load into panels of 16
 * output columns, accumulated in fp32.
 *
 * Why our own kernel and not OpenBLAS's sgemm: a row's result must not depend on which
 * other rows share its GEMM, nor on how the workers split the columns.  OpenBLAS 0.3.21
 * (the Haswell kernels its DYNAMIC_ARCH picks on these CPUs) gives a row other bits when
 * the GEMM has fewer than 12 rows, and a column other bits with another column count
 * (README, "CPU expert compute"; tests/test_moe_ffn.cc).  Here every element of C is one
 * chain of fused multiply-adds over k in ascending order, started from zero, whatever m,
 * the columns asked for, or the tile it falls in (edge tiles are zero-padded copies run
 * through the same code).  One process always takes the same path (AVX2 with FMA where
 * the CPU has them, portable C otherwise).
 */
#ifndef INCMOE_MOE_CPU_GEMM_H
#define INCMOE_MOE_CPU_GEMM_H

#include <stddef.h>

#include "incmoe/incmoe.h"

#define CPU_GEMM_NR 16 /* output columns of a panel */
#define CPU_GEMM_MR 6  /* rows of a tile */

/* Elements of W [n][k] once packed: whole panels of CPU_GEMM_NR columns. */
static inline size_t cpu_gemm_packed_elems(size_t n, size_t k)
{
    return (n + CPU_GEMM_NR - 1) / CPU_GEMM_NR * CPU_GEMM_NR * k;
}

/* Packs W [n][k] (esize-byte elements, rows ldw apart) into dst: panel p holds columns
   [16p, 16p + 16) as [k][16], the columns past n zero. */
void cpu_gemm_pack(void *dst, const void *w, size_t n, size_t k, size_t ldw, size_t esize);

/*
 * C[m][0, n1 - n0) (ldc) = A[m][k] (lda, fp32) * W^T over output columns [n0, n1) of W
 * packed by cpu_gemm_pack (dtype); n0 a multiple of CPU_GEMM_NR.  scratch: at least
 * (CPU_GEMM_NR + CPU_GEMM_MR) * k floats.
 */
void cpu_gemm_packed(size_t m, size_t n0, size_t n1, size_t k, const float *a, size_t lda,
                     const void *wp, incmoe_dtype_t dtype, float *c, size_t ldc, float *scratch);

/* dst[0..n) = src (dtype) widened to fp32. */
void cpu_widen(float *dst, const void *src, size_t n, incmoe_dtype_t dtype);

#endif
