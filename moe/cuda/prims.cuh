/*
 * prims.cuh - the CUDA backend's primitives for the role loops of roles.h:
 * each role is one thread block of a persistent kernel.  Every thread of a
 * block calls the role loop; thread 0 waits, posts and publishes, the
 * block's threads share the data work, and __syncthreads hands results
 * between them.
 *
 * Memory and scopes:
 * - the progress counters (ctx.h) are device memory, shared by the blocks of
 *   one kernel: device-scope atomics.  A publication fences at system scope
 *   first, since the rows it announces may sit in host-mapped memory that
 *   the host proxy sends after a later post.
 * - the FIFO is the one of devfifo.h: positions reserved in device memory,
 *   descriptors handed over in host-mapped memory, completions and the
 *   proxy's error read at system scope.
 * Every wait spins on an acquire load with a __nanosleep back-off, gives up
 * on the layer's abort word (and for tickets on the FIFO's error word) and
 * times out on the global timer after x->timeout_ms, so a failed collective
 * ends the kernel instead of hanging it.
 */
#ifndef INCMOE_MOE_CUDA_PRIMS_CUH
#define INCMOE_MOE_CUDA_PRIMS_CUH

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ctx.h"
#include "plan.h"

#include "cuda/devfifo.h"
#include "cuda/state.h"

#define MOE_CUDA_BACKOFF_MAX_NS 1024

static __device__ inline uint64_t cuda_now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#define CNT_REF(T, p) cuda::atomic_ref<T, cuda::thread_scope_device>(*(T *)(p))

static __device__ inline uint64_t cnt_load(const uint64_t *c)
{
    return CNT_REF(uint64_t, c).load(cuda::memory_order_acquire);
}

static __device__ inline int32_t abort_load(const int32_t *a)
{
    return CNT_REF(int32_t, a).load(cuda::memory_order_acquire);
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

/* Back-off state of one wait: doubling sleeps, a deadline on the global timer. */
typedef struct {
    unsigned ns;
    uint64_t deadline;
} cuda_backoff_t;

static __device__ inline cuda_backoff_t cuda_backoff_start(int timeout_ms)
{
    cuda_backoff_t b = {32, cuda_now_ns() + (uint64_t)timeout_ms * 1000000ull};
    return b;
}

/* Sleeps a little; INCMOE_ERR_TIMEOUT once the deadline passed. */
static __device__ inline incmoe_status_t cuda_backoff(cuda_backoff_t *b)
{
    if (cuda_now_ns() > b->deadline)
        return INCMOE_ERR_TIMEOUT;
    __nanosleep(b->ns);
    b->ns = b->ns < MOE_CUDA_BACKOFF_MAX_NS ? 2 * b->ns : MOE_CUDA_BACKOFF_MAX_NS;
    return INCMOE_OK;
}

/* The layer's abort word, then the FIFO's error word (NULL: not checked). */
static __device__ inline incmoe_status_t cuda_aborted(const moe_ctx_t *x, const int32_t *fifo_err)
{
    int32_t a = abort_load(&x->cnt->abort);
    if (a == 0 && fifo_err != NULL)
        a = incmoe_atomic_load_acquire32(fifo_err);
    return (incmoe_status_t)a;
}

static __device__ inline incmoe_status_t prim_wait_geq(const moe_ctx_t *x, const uint64_t *c,
                                                       uint64_t v)
{
    incmoe_status_t st = INCMOE_OK;
    if (threadIdx.x == 0) {
        cuda_backoff_t b = cuda_backoff_start(x->timeout_ms);
        while (cnt_load(c) < v) {
            if ((st = cuda_aborted(x, NULL)) != INCMOE_OK || (st = cuda_backoff(&b)) != INCMOE_OK)
                break;
        }
    }
    return cuda_block_share(st);
}

static __device__ inline void prim_publish(const moe_ctx_t *x, uint64_t *c, uint64_t v)
{
    (void)x;
    __syncthreads(); /* every thread's writes of the block precede the publication */
    if (threadIdx.x == 0) {
        __threadfence_system();
        uint64_t cur = CNT_REF(uint64_t, c).load(cuda::memory_order_relaxed);
        /* release: pairs with the waiter's acquire load of the counter */
        while (cur < v && !CNT_REF(uint64_t, c)
                               .compare_exchange_weak(cur, v, cuda::memory_order_release,
                                                      cuda::memory_order_relaxed))
            ;
    }
}

/* Thread 0: reserve a position, wait for its slot, hand the descriptor over. */
static __device__ inline incmoe_status_t cuda_post(const moe_ctx_t *x,
                                                   const incmoe_fifo_trigger_t *t, uint64_t *ticket)
{
    const cuda_state_t *cs = (const cuda_state_t *)x->be;
    devfifo_t f = {x->fifo, cs->fifo_words};
    uint64_t pos = devfifo_reserve(&f);
    cuda_backoff_t b = cuda_backoff_start(x->timeout_ms);
    incmoe_status_t st;
    while ((st = devfifo_slot_free(&f, pos)) == INCMOE_IN_PROGRESS) {
        if ((st = cuda_aborted(x, NULL)) != INCMOE_OK || (st = cuda_backoff(&b)) != INCMOE_OK)
            return st;
    }
    if (st != INCMOE_OK)
        return st;
    *ticket = devfifo_publish(&f, pos, t);
    return INCMOE_OK;
}

static __device__ inline incmoe_status_t prim_post(const moe_ctx_t *x,
                                                   const incmoe_fifo_trigger_t *t, uint64_t *ticket)
{
    __shared__ uint64_t shared_ticket;
    incmoe_status_t st = INCMOE_OK;
    __syncthreads(); /* the data the collective sends is written */
    if (threadIdx.x == 0) {
        __threadfence_system();
        shared_ticket = 0;
        st = cuda_post(x, t, &shared_ticket);
    }
    st = cuda_block_share(st);
    *ticket = shared_ticket;
    return st;
}

static __device__ inline incmoe_status_t prim_wait_ticket(const moe_ctx_t *x, int stream,
                                                          uint64_t ticket)
{
    incmoe_status_t st = INCMOE_OK;
    if (threadIdx.x == 0) {
        const cuda_state_t *cs = (const cuda_state_t *)x->be;
        devfifo_t f = {x->fifo, cs->fifo_words};
        cuda_backoff_t b = cuda_backoff_start(x->timeout_ms);
        while (devfifo_completed(&f, stream) < ticket) {
            if ((st = cuda_aborted(x, x->fifo.error)) != INCMOE_OK ||
                (st = cuda_backoff(&b)) != INCMOE_OK)
                break;
        }
    }
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
    if (CNT_REF(int32_t, &x->cnt->abort)
            .compare_exchange_strong(expected, (int32_t)st, cuda::memory_order_acq_rel,
                                     cuda::memory_order_acquire)) {
        x->cnt->fail_what = (int32_t)what;
        x->cnt->fail_band = (uint64_t)band;
        __threadfence();
    }
}

static __device__ inline float cuda_load(const void *p, size_t i, int32_t dtype)
{
    if (dtype == INCMOE_FLOAT16)
        return __half2float(((const __half *)p)[i]);
    if (dtype == INCMOE_BFLOAT16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

static __device__ inline void cuda_store(void *p, size_t i, float v, int32_t dtype)
{
    if (dtype == INCMOE_FLOAT16)
        ((__half *)p)[i] = __float2half_rn(v);
    else if (dtype == INCMOE_BFLOAT16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
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

/* This rank's rows b of x, ids and weights into its gather block (masked: into xs, and one
   thread per row writes its destination set; byte copies: a row is H elements, then k ids,
   then k weights). */
static __device__ inline void prim_pack_rows(const moe_ctx_t *x, band_t b)
{
    size_t hb = (size_t)x->H * x->esize, kb = (size_t)x->k * 4;
    size_t rowb = hb + 2 * kb;
    if (x->masked)
        for (size_t t = b.start + threadIdx.x; t < b.start + b.rows; t += blockDim.x)
            plan_token_set(x->owner, x->ids + t * (size_t)x->k, x->k, x->sets + t * x->words,
                           x->words);
    for (size_t i = threadIdx.x; i < b.rows * rowb; i += blockDim.x) {
        size_t t = b.start + i / rowb, o = i % rowb;
        uint8_t *dst = x->masked ? x->xs + t * x->grow : xg_row(x, (size_t)x->rank, t);
        const uint8_t *src = o < hb ? (const uint8_t *)x->x + t * hb + o
                             : o < hb + kb
                                 ? (const uint8_t *)(x->ids + t * (size_t)x->k) + o - hb
                                 : (const uint8_t *)(x->w + t * (size_t)x->k) + o - hb - kb;
        dst[o] = *src;
    }
}

/* The root's local reduction: own rows of part += own partial (fp32), in place in Z. */
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

#include "cuda/ffn.cuh"

#define ROLE_FN static __device__ inline
#include "roles.h"

#endif
