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
 * chain of fused multiply-adds (or bf16 pair dot products) over k in ascending order,
 * started from zero, whatever m, the columns asked for, or the tile it falls in (edge tiles
 * are zero-padded copies run through the same code).  One process always takes the same
 * path (cpu_isa: AVX-512, AVX2 with FMA, or portable C; bf16 weights on AVX512-BF16 where
 * the CPU has it).  The fp32 chains are the same on every path (a fused multiply-add rounds
 * once whatever its width), so fp32 and fp16 weights give the same bits on any of them.
 */
#ifndef INCMOE_MOE_CPU_GEMM_H
#define INCMOE_MOE_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe.h"

#define CPU_GEMM_NR      16 /* output columns of a panel */
#define CPU_GEMM_MR_MAX  12 /* rows of the tallest tile (AVX-512's, the bf16 kernel's) */
#define CPU_GEMM_MR_BF16 12 /* rows of a tile of the bf16 kernel */

/* The kernels a process runs, lowest first. */
typedef enum {
    CPU_ISA_PORTABLE,   /* C, fmaf */
    CPU_ISA_AVX2,       /* AVX2, FMA and F16C */
    CPU_ISA_AVX512,     /* AVX-512F */
    CPU_ISA_AVX512_BF16 /* and AVX512-BF16: bf16 weights on vdpbf16ps */
} cpu_isa_t;

/* --- isa.c --- */
/* The level this process runs (the same at every call unless a test caps it). */
cpu_isa_t cpu_isa(void);

/* Elements of W [n][k] (dtype) once packed: whole panels of CPU_GEMM_NR columns. */
size_t cpu_gemm_packed_elems(size_t n, size_t k, incmoe_dtype_t dtype);

/* Packs W [n][k] (dtype, rows ldw apart) into dst: panel p holds columns [16p, 16p + 16),
   as [k][16], or for bf16 where the bf16 kernel runs as [k / 2][16][2] (pairs of k, as
   vdpbf16ps takes them); what lies past n or k is zero. */
void cpu_gemm_pack(void *dst, const void *w, size_t n, size_t k, size_t ldw, incmoe_dtype_t dtype);

/* Floats of scratch a worker's GEMMs of at most m rows and k <= kmax need. */
size_t cpu_gemm_scratch_floats(size_t m, size_t kmax);

/* The A of one or more GEMMs: fp32 rows, and where the bf16 kernel runs, the same rows
   rounded to bf16 (in the caller's scratch). */
typedef struct {
    size_t m, k;
    const float *f;
    size_t lda;
    const uint16_t *bf; /* [m rounded up to a tile][k rounded up to even], or NULL */
} cpu_gemm_a_t;

/* Readies rows (m of k fp32, lda apart) as the A of GEMMs against dtype weights. */
void cpu_gemm_prepare(cpu_gemm_a_t *a, size_t m, size_t k, const float *rows, size_t lda,
                      incmoe_dtype_t dtype, float *scratch);

/*
 * C[m][0, n1 - n0) (ldc) = A * W^T over output columns [n0, n1) of W packed by
 * cpu_gemm_pack (dtype); n0 a multiple of CPU_GEMM_NR; scratch as cpu_gemm_prepare's.
 * fp32, and fp16 / bf16 without the bf16 kernel: W's panel is widened to fp32 and every
 * element is one FMA chain over k.  bf16 where the CPU has AVX512-BF16: A is A rounded to
 * bf16 (the activations, as torch's bf16 linears round them) and every element is one
 * chain of vdpbf16ps over pairs of k, in order.
 */
void cpu_gemm_packed(size_t n0, size_t n1, const cpu_gemm_a_t *a, const void *wp,
                     incmoe_dtype_t dtype, float *c, size_t ldc, float *scratch);

/* dst[0..n) = src (dtype) widened to fp32 (exactly: the same bits on every path). */
void cpu_widen(float *dst, const void *src, size_t n, incmoe_dtype_t dtype);

/* --- gemm_bf16.c: the bf16 kernel (AVX512-BF16, where cpu_isa() says so) --- */
/* W [n][k] bf16 into panels [k / 2][16][2]. */
void cpu_gemm_bf16_pack(uint16_t *dst, const uint16_t *w, size_t n, size_t k, size_t ldw);
/* m fp32 rows rounded to bf16 into dst [m up to a tile][k up to even], the pads zero. */
void cpu_gemm_bf16_prepare(uint16_t *dst, size_t m, size_t k, const float *rows, size_t lda);
/* C[m][0, n1 - n0) = A (prepared) * W^T over columns [n0, n1) of packed W. */
void cpu_gemm_bf16_panels(size_t n0, size_t n1, size_t m, size_t k, const uint16_t *a,
                          const uint16_t *wp, float *c, size_t ldc);

#endif
