/*
 * ffn.cuh - the expert FFNs of a band inside the persistent kernel (paper
 * section 3.5), run by one compute block over a share of the band's rows.
 *
 * Per tile of up to MOE_CUDA_FFN_TILE rows and per local expert: the rows
 * routed to the expert, in GEMMs of MOE_CUDA_FFN_M rows: [m x H] against the
 * gate and up weights, SwiGLU, [m x I] against the down weights, and the
 * router-weighted sum (Equation (1), the weights used as given) in fp32.  A
 * row is rounded to the datatype once, when it is stored into the reduce
 * buffer (or kept as this rank's own partial), as on the CPU.  With masked
 * routing a tile of positions holds the received rows among them (plan.h) and
 * every partial goes to the reduce buffer in received order.
 *
 * fp16 and bf16 run on tensor cores (WMMA 16x16x16, fp32 accumulation) when
 * H and I are multiples of 16; the SwiGLU rows between the two GEMMs are then
 * rounded to the datatype (the CPU keeps them in fp32).  fp32, and shapes
 * that do not tile by 16, run on the SIMT cores with fp32 throughout (no TF32).
 */
#ifndef INCMOE_MOE_CUDA_FFN_CUH
#define INCMOE_MOE_CUDA_FFN_CUH

#include <mma.h>

#include "cuda/state.h"

/* Shared memory of one compute block. */
typedef struct {
    __align__(32) float a[MOE_CUDA_FFN_M * MOE_CUDA_FFN_KC]; /* rows' chunk (fp32, or 16-bit) */
    __align__(32) float stage[MOE_CUDA_THREADS / 32][2][16 * 16]; /* one warp's output tiles */
    const uint8_t *row[MOE_CUDA_FFN_TILE];                        /* gather row of tile row i */
    int32_t blk[MOE_CUDA_FFN_TILE];
    int32_t r[MOE_CUDA_FFN_TILE];
    int32_t sel[MOE_CUDA_FFN_TILE]; /* tile rows routed to the expert */
    float selw[MOE_CUDA_FFN_TILE];  /* their router weights */
    int m;
} ffn_smem_t;

static __device__ inline float ffn_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

/*
 * SIMT: rows sel[m0..m0+mm) of the tile through expert le, weighted into acc.
 * Each thread owns one column (of I, then of H) for all MOE_CUDA_FFN_M rows.
 */
static __device__ void ffn_chunk_simt(const moe_ctx_t *x, const cuda_state_t *cs, ffn_smem_t *sm,
                                      int le, int m0, int mm, float *acc, float *act)
{
    const int H = x->H, I = cs->I, KC = MOE_CUDA_FFN_KC;
    const size_t es = x->esize;
    const uint8_t *wgu = (const uint8_t *)cs->w_gu + (size_t)le * 2 * I * H * es;
    const uint8_t *wd = (const uint8_t *)cs->w_down + (size_t)le * H * I * es;
    for (int i0 = 0; i0 < I; i0 += blockDim.x) {
        int i = i0 + (int)threadIdx.x;
        float g[MOE_CUDA_FFN_M], u[MOE_CUDA_FFN_M];
#pragma unroll
        for (int r = 0; r < MOE_CUDA_FFN_M; r++)
            g[r] = u[r] = 0.0f;
        for (int k0 = 0; k0 < H; k0 += KC) {
            int kc = H - k0 < KC ? H - k0 : KC;
            __syncthreads();
            for (int e = threadIdx.x; e < MOE_CUDA_FFN_M * kc; e += blockDim.x) {
                int r = e / kc, kk = e % kc;
                sm->a[r * KC + kk] =
                    r < mm ? cuda_load(sm->row[sm->sel[m0 + r]], (size_t)(k0 + kk), x->dtype)
                           : 0.0f;
            }
            __syncthreads();
            if (i < I) {
                for (int kk = 0; kk < kc; kk++) {
                    float wg = cuda_load(wgu, (size_t)i * H + k0 + kk, x->dtype);
                    float wu = cuda_load(wgu, ((size_t)I + i) * H + k0 + kk, x->dtype);
#pragma unroll
                    for (int r = 0; r < MOE_CUDA_FFN_M; r++) {
                        g[r] += sm->a[r * KC + kk] * wg;
                        u[r] += sm->a[r * KC + kk] * wu;
                    }
                }
            }
        }
        if (i < I)
            for (int r = 0; r < mm; r++)
                act[(size_t)r * I + i] = ffn_silu_mul(g[r], u[r]);
    }
    __syncthreads();
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float o[MOE_CUDA_FFN_M];
#pragma unroll
        for (int r = 0; r < MOE_CUDA_FFN_M; r++)
            o[r] = 0.0f;
        for (int i = 0; i < I; i++) {
            float w = cuda_load(wd, (size_t)h * I + i, x->dtype);
#pragma unroll
            for (int r = 0; r < MOE_CUDA_FFN_M; r++)
                o[r] += act[(size_t)r * I + i] * w;
        }
        for (int r = 0; r < mm; r++)
            acc[(size_t)sm->sel[m0 + r] * H + h] += sm->selw[m0 + r] * o[r];
    }
    __syncthreads();
}

/*
 * Tensor cores (T = __half or __nv_bfloat16; H and I multiples of 16): warp w
 * owns 16-column tiles w, w + warps, ... of the gate/up product, then of the
 * down product.  B operands load straight from the weights (column-major views
 * of the row-major matrices); A from the staged rows, then from the SwiGLU rows.
 */
template <typename T>
static __device__ void ffn_chunk_wmma(const moe_ctx_t *x, const cuda_state_t *cs, ffn_smem_t *sm,
                                      int le, int m0, int mm, float *acc, float *act_f)
{
    using namespace nvcuda;
    const int H = x->H, I = cs->I, KC = MOE_CUDA_FFN_KC;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    const int warps = (int)blockDim.x / 32;
    const T *wgu = (const T *)cs->w_gu + (size_t)le * 2 * I * H;
    const T *wd = (const T *)cs->w_down + (size_t)le * H * I;
    T *as = (T *)sm->a;  /* [M][KC] */
    T *act = (T *)act_f; /* [M][I] */
    float *st0 = sm->stage[warp][0], *st1 = sm->stage[warp][1];

    for (int nt0 = 0; nt0 < I / 16; nt0 += warps) {
        const int nt = nt0 + warp;
        const bool mine = nt < I / 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> fg, fu;
        wmma::fill_fragment(fg, 0.0f);
        wmma::fill_fragment(fu, 0.0f);
        for (int k0 = 0; k0 < H; k0 += KC) {
            int kc = H - k0 < KC ? H - k0 : KC;
            __syncthreads();
            for (int e = threadIdx.x; e < MOE_CUDA_FFN_M * kc; e += blockDim.x) {
                int r = e / kc, kk = e % kc;
                as[r * KC + kk] = r < mm ? ((const T *)sm->row[sm->sel[m0 + r]])[k0 + kk] : T(0.0f);
            }
            __syncthreads();
            if (!mine)
                continue;
            for (int kk = 0; kk < kc; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, as + kk, KC);
                wmma::load_matrix_sync(fb, wgu + (size_t)nt * 16 * H + k0 + kk, H);
                wmma::mma_sync(fg, fa, fb, fg);
                wmma::load_matrix_sync(fb, wgu + ((size_t)I + (size_t)nt * 16) * H + k0 + kk, H);
                wmma::mma_sync(fu, fa, fb, fu);
            }
        }
        if (mine) {
            wmma::store_matrix_sync(st0, fg, 16, wmma::mem_row_major);
            wmma::store_matrix_sync(st1, fu, 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int r = e / 16, j = e % 16;
                act[(size_t)r * I + nt * 16 + j] = T(r < mm ? ffn_silu_mul(st0[e], st1[e]) : 0.0f);
            }
            __syncwarp();
        }
    }
    __syncthreads(); /* every warp's SwiGLU rows are written */
    for (int nt = warp; nt < H / 16; nt += warps) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> fo;
        wmma::fill_fragment(fo, 0.0f);
        for (int k = 0; k < I; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, act + k, I);
            wmma::load_matrix_sync(fb, wd + (size_t)nt * 16 * I + k, I);
            wmma::mma_sync(fo, fa, fb, fo);
        }
        wmma::store_matrix_sync(st0, fo, 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int r = e / 16, j = e % 16;
            if (r < mm)
                acc[(size_t)sm->sel[m0 + r] * H + nt * 16 + j] += sm->selw[m0 + r] * st0[e];
        }
        __syncwarp();
    }
    __syncthreads();
}

/* Thread 0: the tile rows routed to local expert le into sm->sel, sm->selw, sm->m. */
static __device__ inline void ffn_select(const moe_ctx_t *x, const cuda_state_t *cs, ffn_smem_t *sm,
                                         int le, int tile)
{
    const size_t hb = (size_t)x->H * x->esize;
    int m = 0;
    for (int i = 0; i < tile; i++) {
        const int32_t *ids = (const int32_t *)(sm->row[i] + hb);
        const float *w = (const float *)(sm->row[i] + hb + (size_t)x->k * 4);
        for (int kk = 0; kk < x->k; kk++) {
            if (ids[kk] == cs->local_ids[le]) {
                sm->sel[m] = i;
                sm->selw[m] = w[kk];
                m++;
                break; /* ids of a token are distinct (checked on entry) */
            }
        }
    }
    sm->m = m;
}

/* The tile's sums stored where each row's result goes. */
static __device__ inline void ffn_store(const moe_ctx_t *x, band_t b, const ffn_smem_t *sm,
                                        const float *acc, int tile)
{
    const size_t H = (size_t)x->H;
    for (size_t e = threadIdx.x; e < (size_t)tile * H; e += blockDim.x) {
        int i = (int)(e / H);
        size_t h = e % H;
        if (x->masked) /* its own rows too: the combine adds this rank's partial last */
            cuda_store(partial_row(x, b, (size_t)sm->r[i]), h, acc[e], x->dtype);
        else if (x->pipelined && sm->blk[i] == x->rank)
            x->own[(size_t)sm->r[i] * H + h] = cuda_round(acc[e], x->dtype);
        else
            cuda_store(z_row(x, (size_t)sm->blk[i], (size_t)sm->r[i]), h, acc[e], x->dtype);
    }
}

/* Compute worker c: the local experts over positions [first, first + n) of band j's row list
   (masked routing: the received rows among them, plan.h). */
static __device__ inline void ffn_rows(const moe_ctx_t *x, int c, size_t j, band_t b, size_t first,
                                       size_t n)
{
    __shared__ ffn_smem_t sm;
    const cuda_state_t *cs = (const cuda_state_t *)x->be;
    const size_t H = (size_t)x->H;
    float *acc = cs->scratch + (size_t)c * cs->scratch_floats; /* [TILE][H] */
    float *act = acc + (size_t)MOE_CUDA_FFN_TILE * H;          /* [M][I] */
    /* Masked: the received rows of the tile's positions, [rows_at[0], rows_at[1]) (thread 0
       finds them in the source table, host-mapped; the others read them here). */
    __shared__ size_t rows_at[2];
    for (size_t done = 0; done < n; done += MOE_CUDA_FFN_TILE) {
        const size_t span = n - done < MOE_CUDA_FFN_TILE ? n - done : MOE_CUDA_FFN_TILE;
        if (x->masked && threadIdx.x == 0) {
            rows_at[0] = done == 0 ? plan_recv_lower(x, j, b, first) : rows_at[1];
            rows_at[1] = plan_recv_lower(x, j, b, first + done + span);
        }
        __syncthreads();
        const size_t ri = rows_at[0];
        const int tile = (int)(x->masked ? rows_at[1] - ri : span);
        for (int i = threadIdx.x; i < tile; i += blockDim.x) {
            size_t pos = first + done + (size_t)i, s = 0;
            if (x->masked) { /* the received rows of these positions, in order */
                sm.blk[i] = -1;
                sm.r[i] = (int32_t)(ri + (size_t)i);
                sm.row[i] = recv_row(x, b, ri + (size_t)i);
                continue;
            }
            /* The block and row of list position first + done + i. */
            while (s < (size_t)x->N && pos >= band_valid_rows(b, x->counts[s]))
                pos -= band_valid_rows(b, x->counts[s++]);
            sm.blk[i] = (int32_t)s;
            sm.r[i] = (int32_t)(b.start + pos);
            sm.row[i] = xg_row(x, s, b.start + pos);
        }
        for (size_t e = threadIdx.x; e < (size_t)tile * H; e += blockDim.x)
            acc[e] = 0.0f;
        __syncthreads();
        for (int le = 0; le < cs->n_local; le++) {
            if (threadIdx.x == 0)
                ffn_select(x, cs, &sm, le, tile);
            __syncthreads();
            const int m = sm.m;
            for (int m0 = 0; m0 < m; m0 += MOE_CUDA_FFN_M) {
                int mm = m - m0 < MOE_CUDA_FFN_M ? m - m0 : MOE_CUDA_FFN_M;
                if (cs->tensor_cores && x->dtype == INCMOE_FLOAT16)
                    ffn_chunk_wmma<__half>(x, cs, &sm, le, m0, mm, acc, act);
                else if (cs->tensor_cores && x->dtype == INCMOE_BFLOAT16)
                    ffn_chunk_wmma<__nv_bfloat16>(x, cs, &sm, le, m0, mm, acc, act);
                else
                    ffn_chunk_simt(x, cs, &sm, le, m0, mm, acc, act);
            }
            __syncthreads(); /* sm.m and sm.sel are rewritten for the next expert */
        }
        ffn_store(x, b, &sm, acc, tile);
        __syncthreads();
    }
}

/* Compute worker c of x->C: an equal share of band j's row list, every expert over it. */
static __device__ inline int prim_ffn_band(const moe_ctx_t *x, int c, size_t j, band_t b)
{
    const size_t C = (size_t)x->C, n = plan_band_rows(x, b);
    const size_t first = n * (size_t)c / C, last = n * ((size_t)c + 1) / C;
    ffn_rows(x, c, j, b, first, last - first);
    return 0;
}

#endif
