/*
 * prims.cuh - the CUDA backend's primitives for the role loops of roles.h:
 * each role is one thread block of a persistent kernel.  Every thread of a
 * block calls the role loop; thread 0 waits, posts and publishes (system
 * scope: the other side is the host proxy), the block's threads share the
 * data work, and __syncthreads hands results between them.
 *
 * Waits spin on an acquire load with a __nanosleep back-off, give up on the
 * layer's abort word or the FIFO's error word, and time out on the global
 * timer.  Counters and the FIFO's words are plain integers in memory both
 * the host and the device can reach, accessed through the atomic helpers of
 * api/incmoe_fifo.h (cuda::atomic_ref at system scope on the device).
 */
#ifndef INCMOE_MOE_CUDA_PRIMS_CUH
#define INCMOE_MOE_CUDA_PRIMS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ctx.h"
#include "plan.h"

/* The backend state the primitives read through moe_ctx_t.be (device memory). */
typedef struct {
    int I, n_local;
    const int *local_ids; /* [n_local] global ids, ascending */
    const float *w_gu;    /* [n_local][2I][H], fp32 */
    const float *w_down;  /* [n_local][H][I], fp32 */
    float *scratch;       /* [compute workers][I + H]: SwiGLU row, weighted sum */
} cuda_state_t;

#define MOE_CUDA_BACKOFF_MAX_NS 1024

static __device__ inline uint64_t cuda_now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Status of the block-wide operation thread 0 did, handed to every thread. */
static __device__ inline incmoe_status_t cuda_block_share(incmoe_status_t st)
{
    __shared__ int shared_st;
    if (threadIdx.x == 0)
        shared_st = (int)st;
    __syncthreads();
    incmoe_status_t r = (incmoe_status_t)shared_st;
    __syncthreads();
    return r;
}

/* Thread 0: until *c >= v (acquire), an abort word is set, or the timeout. */
static __device__ inline incmoe_status_t cuda_wait_counter(const uint64_t *c, uint64_t v,
                                                           const int32_t *abort1,
                                                           const int32_t *abort2, int timeout_ms)
{
    unsigned ns = 32;
    uint64_t deadline = cuda_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        if (incmoe_atomic_load_acquire64(c) >= v)
            return INCMOE_OK;
        int32_t a = incmoe_atomic_load_acquire32(abort1);
        if (a == 0 && abort2 != NULL)
            a = incmoe_atomic_load_acquire32(abort2);
        if (a != 0)
            return (incmoe_status_t)a;
        if (cuda_now_ns() > deadline)
            return INCMOE_ERR_TIMEOUT;
        __nanosleep(ns);
        ns = ns < MOE_CUDA_BACKOFF_MAX_NS ? 2 * ns : MOE_CUDA_BACKOFF_MAX_NS;
    }
}

static __device__ inline incmoe_status_t prim_wait_geq(const moe_ctx_t *x, const uint64_t *c,
                                                       uint64_t v)
{
    incmoe_status_t st = INCMOE_OK;
    if (threadIdx.x == 0)
        st = cuda_wait_counter(c, v, &x->cnt->abort, NULL, x->timeout_ms);
    return cuda_block_share(st);
}

static __device__ inline void prim_publish(const moe_ctx_t *x, uint64_t *c, uint64_t v)
{
    (void)x;
    __syncthreads(); /* every thread's writes of the block precede the publication */
    if (threadIdx.x == 0) {
        __threadfence_system();
        uint64_t cur = incmoe_atomic_load_relaxed64(c);
        /* release: pairs with the waiter's acquire load of the counter */
        while (cur < v && !incmoe_atomic_cas_release64(c, &cur, v))
            ;
    }
}

static __device__ inline incmoe_status_t prim_post(const moe_ctx_t *x,
                                                   const incmoe_fifo_trigger_t *t, uint64_t *ticket)
{
    __shared__ uint64_t shared_ticket;
    incmoe_status_t st = INCMOE_OK;
    __syncthreads(); /* the data the collective sends is written */
    if (threadIdx.x == 0) {
        __threadfence_system();
        unsigned ns = 32;
        uint64_t deadline = cuda_now_ns() + (uint64_t)x->timeout_ms * 1000000ull;
        while ((st = incmoe_fifo_dev_try_push(&x->fifo, t, &shared_ticket)) == INCMOE_IN_PROGRESS) {
            if (incmoe_atomic_load_acquire32(&x->cnt->abort) != 0) {
                st = (incmoe_status_t)incmoe_atomic_load_acquire32(&x->cnt->abort);
                break;
            }
            if (cuda_now_ns() > deadline) {
                st = INCMOE_ERR_TIMEOUT;
                break;
            }
            __nanosleep(ns);
            ns = ns < MOE_CUDA_BACKOFF_MAX_NS ? 2 * ns : MOE_CUDA_BACKOFF_MAX_NS;
        }
    }
    st = cuda_block_share(st);
    *ticket = shared_ticket;
    return st;
}

static __device__ inline incmoe_status_t prim_wait_ticket(const moe_ctx_t *x, int stream,
                                                          uint64_t ticket)
{
    incmoe_status_t st = INCMOE_OK;
    if (threadIdx.x == 0)
        st = cuda_wait_counter(&x->fifo.completed[stream], ticket, &x->cnt->abort, x->fifo.error,
                               x->timeout_ms);
    return cuda_block_share(st);
}

static __device__ inline void prim_abort(const moe_ctx_t *x, incmoe_status_t st, moe_fail_t what,
                                         size_t band)
{
    if (threadIdx.x != 0)
        return;
    int32_t expected = 0;
    if (st == INCMOE_OK)
        st = INCMOE_ERR_CLOSED;
    /* acq_rel: the record of where is ordered before other blocks see the abort */
    if (incmoe_atomic_cas_acq_rel32(&x->cnt->abort, &expected, (int32_t)st)) {
        x->cnt->fail_what = (int32_t)what;
        x->cnt->fail_band = (uint64_t)band;
        __threadfence_system();
    }
}

static __device__ inline float cuda_load(const uint8_t *p, size_t i, int32_t dtype)
{
    if (dtype == INCMOE_FLOAT16)
        return __half2float(__ushort_as_half(((const unsigned short *)p)[i]));
    if (dtype == INCMOE_BFLOAT16)
        return __bfloat162float(__ushort_as_bfloat16(((const unsigned short *)p)[i]));
    return ((const float *)p)[i];
}

static __device__ inline void cuda_store(uint8_t *p, size_t i, float v, int32_t dtype)
{
    if (dtype == INCMOE_FLOAT16)
        ((unsigned short *)p)[i] = __half_as_ushort(__float2half_rn(v));
    else if (dtype == INCMOE_BFLOAT16)
        ((unsigned short *)p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else
        ((float *)p)[i] = v;
}

/* v rounded to dtype and widened back. */
static __device__ inline float cuda_round(float v, int32_t dtype)
{
    if (dtype == INCMOE_FLOAT16)
        return __half2float(__float2half_rn(v));
    if (dtype == INCMOE_BFLOAT16)
        return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

static __device__ inline void prim_pack_rows(const moe_ctx_t *x, band_t b)
{
    size_t hb = (size_t)x->H * x->esize, kb = (size_t)x->k * 4;
    size_t rowb = hb + 2 * kb;
    for (size_t i = threadIdx.x; i < b.rows * rowb; i += blockDim.x) {
        size_t t = b.start + i / rowb, o = i % rowb;
        uint8_t *dst = xg_row(x, (size_t)x->rank, t);
        const uint8_t *src = o < hb ? (const uint8_t *)x->x + t * hb + o
                             : o < hb + kb
                                 ? (const uint8_t *)(x->ids + t * (size_t)x->k) + o - hb
                                 : (const uint8_t *)(x->w + t * (size_t)x->k) + o - hb - kb;
        dst[o] = *src;
    }
}

/* One row of the band's row list: the block and row it lies in. */
static __device__ inline void cuda_locate(const moe_ctx_t *x, band_t b, size_t pos, size_t *blk,
                                          size_t *row)
{
    size_t s = 0;
    while (s < (size_t)x->N && pos >= band_valid_rows(b, x->counts[s]))
        pos -= band_valid_rows(b, x->counts[s++]);
    *blk = s;
    *row = b.start + pos;
}

static __device__ inline void prim_ffn_rows(const moe_ctx_t *x, int c, band_t b, size_t first,
                                            size_t n)
{
    const cuda_state_t *cs = (const cuda_state_t *)x->be;
    const size_t H = (size_t)x->H, I = (size_t)cs->I;
    const size_t hb = H * x->esize;
    float *act = cs->scratch + (size_t)c * (I + H);
    float *acc = act + I;
    for (size_t p = first; p < first + n; p++) {
        size_t blk, r;
        cuda_locate(x, b, p, &blk, &r);
        const uint8_t *row = xg_row(x, blk, r);
        const int32_t *ids = (const int32_t *)(row + hb);
        const float *w = (const float *)(row + hb + (size_t)x->k * 4);
        for (size_t h = threadIdx.x; h < H; h += blockDim.x)
            acc[h] = 0.0f;
        for (int le = 0; le < cs->n_local; le++) {
            float gw = 0.0f;
            int routed = 0;
            for (int kk = 0; kk < x->k; kk++)
                if (ids[kk] == cs->local_ids[le])
                    routed = 1, gw = w[kk];
            if (!routed)
                continue;
            const float *wgu = cs->w_gu + (size_t)le * 2 * I * H;
            const float *wd = cs->w_down + (size_t)le * H * I;
            __syncthreads();
            for (size_t i = threadIdx.x; i < I; i += blockDim.x) {
                float g = 0.0f, u = 0.0f;
                for (size_t h = 0; h < H; h++) {
                    float a = cuda_load(row, h, x->dtype);
                    g += wgu[i * H + h] * a;
                    u += wgu[(I + i) * H + h] * a;
                }
                act[i] = g / (1.0f + expf(-g)) * u;
            }
            __syncthreads();
            for (size_t h = threadIdx.x; h < H; h += blockDim.x) {
                float o = 0.0f;
                for (size_t i = 0; i < I; i++)
                    o += wd[h * I + i] * act[i];
                acc[h] += gw * o;
            }
        }
        __syncthreads();
        for (size_t h = threadIdx.x; h < H; h += blockDim.x) {
            if (x->pipelined && blk == (size_t)x->rank)
                x->own[r * H + h] = cuda_round(acc[h], x->dtype);
            else
                cuda_store(z_row(x, blk, r), h, acc[h], x->dtype);
        }
        __syncthreads();
    }
}

static __device__ inline void prim_local_reduce(const moe_ctx_t *x, band_t part)
{
    size_t rows = band_valid_rows(part, x->counts[x->rank]);
    const size_t H = (size_t)x->H;
    for (size_t i = threadIdx.x; i < rows * H; i += blockDim.x) {
        size_t t = part.start + i / H, h = i % H;
        uint8_t *z = z_row(x, (size_t)x->rank, t);
        cuda_store(z, h, cuda_load(z, h, x->dtype) + x->own[t * H + h], x->dtype);
    }
    __syncthreads();
}

#define ROLE_FN static __device__ inline
#include "roles.h"

#endif
