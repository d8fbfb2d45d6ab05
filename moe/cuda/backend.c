/*
 * backend.c - the CUDA backend: weights, scratch and progress counters in
 * device memory, the collectives' buffers where placement.h says, the FIFO's
 * shared block in host-mapped memory drained by the FIFO's host proxy
 * (plugin/fifo.c), and one persistent kernel per forward (kernel.cu) on the
 * caller's stream.
 *
 * The forward enqueues the kernel behind the caller's work on its stream and
 * returns once the kernel finished, with its status: every wait inside the
 * kernel is bounded by the layer's timeout and gives up on the abort word,
 * so the return comes.  The counters are then copied back so the layer
 * reports the first failure as for the CPU backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "layer.h"
#include "plan.h"

#include "base/log.h"
#include "base/ucx_util.h"
#include "cuda/kernel.h"
#include "cuda/placement.h"
#include "cuda/state.h"

#define SUBSYS        "moe"
#define FIFO_SLOTS    256
#define PROXY_IDLE_US 20 /* a device push cannot wake the proxy: it polls this often */

typedef struct {
    int device, sms, blocks_per_sm;
    moe_cuda_buf_t placement;
    char why[128];
    cuda_state_t st;    /* host copy of *st_d */
    cuda_state_t *st_d; /* what the kernel reads */
    void *w_gu_d, *w_down_d;
    int *ids_d;
    float *scratch_d, *own_d;
    devfifo_words_t *words_d;
    moe_counters_t *cnt_d;
    moe_counters_t cnt_h; /* copied back after every kernel (L->ctx.cnt) */
    size_t *counts_d;
    uint8_t *xg, *z; /* the buffers as registered (host pointers when host-mapped) */
    size_t gsize, zsize;
    incmoe_mr_t *xg_mr, *z_mr;
    /* Masked routing (ctx.h): the rows to dispatch and the combined outputs (registered, as
       xg and z), their sets and the dispatch blocks (host-mapped: the proxy reads the sets
       and writes R), the placement (device memory). */
    uint8_t *xs, *zo;
    incmoe_mr_t *xs_mr, *zo_mr;
    uint64_t *sets_h;
    incmoe_fifo_dispatch_t *dcb_h;
    uint32_t *src_h;
    int32_t *owner_d;
    incmoe_comm_t *comm;
    incmoe_fifo_t *fifo;
    void *fifo_h, *fifo_d; /* the FIFO's shared block: host and device addresses */
    cudaEvent_t done;
    int32_t *ids_h; /* pinned staging of the expert ids for the host's checks */
    size_t ids_cap;
} cuda_be_t;

/* Logs a failed CUDA call once, where it is seen; the layer's status for it. */
static incmoe_status_t cu_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return INCMOE_OK;
    log_error(SUBSYS, "CUDA backend: %s failed: %s (%s)", what, cudaGetErrorString(e),
              cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? INCMOE_ERR_NO_MEMORY : INCMOE_ERR_TRANSPORT;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        incmoe_status_t st_ = cu_check((call), #call);                                             \
        if (st_ != INCMOE_OK)                                                                      \
            return st_;                                                                            \
    } while (0)

/* ------------------------------------------------ the FIFO's shared block */

static void *mapped_alloc(void *ctx, size_t bytes)
{
    cuda_be_t *cb = ctx;
    void *p = NULL;
    if (cu_check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                 "cudaHostAlloc (FIFO)") != INCMOE_OK)
        return NULL;
    if (cu_check(cudaHostGetDevicePointer(&cb->fifo_d, p, 0), "cudaHostGetDevicePointer (FIFO)") !=
        INCMOE_OK) {
        cudaFreeHost(p);
        return NULL;
    }
    cb->fifo_h = p;
    return p;
}

static void mapped_free(void *ctx, void *p)
{
    (void)ctx;
    cudaFreeHost(p);
}

/* The host handle's pointers as the device sees them. */
static void *fifo_dev_addr(const cuda_be_t *cb, const void *host)
{
    return (uint8_t *)cb->fifo_d + ((const uint8_t *)host - (const uint8_t *)cb->fifo_h);
}

static incmoe_status_t fifo_setup(cuda_be_t *cb, incmoe_fifo_device_t *dev)
{
    incmoe_fifo_params_t fp = {.field_mask = INCMOE_FIFO_PARAM_CAPACITY |
                                             INCMOE_FIFO_PARAM_ALLOCATOR |
                                             INCMOE_FIFO_PARAM_IDLE_US,
                               .capacity = FIFO_SLOTS,
                               .allocator = {mapped_alloc, mapped_free, cb},
                               .idle_us = PROXY_IDLE_US};
    incmoe_status_t st = incmoe_fifo_create_ex(cb->comm, &fp, &cb->fifo);
    if (st != INCMOE_OK)
        return st;
    incmoe_fifo_device_t h;
    incmoe_fifo_device(cb->fifo, &h);
    *dev = h;
    dev->slots = fifo_dev_addr(cb, h.slots);
    dev->completed = fifo_dev_addr(cb, h.completed);
    dev->error = fifo_dev_addr(cb, h.error);
    /* Host producers' and host waiters' words: the device must not use them. */
    dev->tail = dev->pushed = NULL;
    dev->doorbell = dev->bell = NULL;
    return INCMOE_OK;
}

/* ------------------------------------------------------------- creation */

static incmoe_status_t buffer_alloc(cuda_be_t *cb, size_t bytes, uint8_t **host_p, uint8_t **dev_p)
{
    void *p = NULL;
    if (cb->placement == MOE_CUDA_BUF_DEVICE) {
        CU(cudaMalloc(&p, bytes));
        *host_p = *dev_p = p;
        CU(cudaMemset(p, 0, bytes));
        return INCMOE_OK;
    }
    CU(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    *host_p = p;
    memset(p, 0, bytes);
    void *d = NULL;
    CU(cudaHostGetDevicePointer(&d, p, 0));
    *dev_p = d;
    return INCMOE_OK;
}

/* Host-mapped pinned memory, zeroed: its host address and the device's. */
static incmoe_status_t mapped_pair_alloc(size_t bytes, void **host_p, void **dev_p)
{
    CU(cudaHostAlloc(host_p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(*host_p, 0, bytes);
    CU(cudaHostGetDevicePointer(dev_p, *host_p, 0));
    return INCMOE_OK;
}

/* What masked routing adds: xs and zo where xg and z are (registered), the sets and the
   dispatch blocks host-mapped, the placement on the device. */
static incmoe_status_t masked_setup(cuda_be_t *cb, incmoe_moe_t *L, size_t tokens)
{
    moe_ctx_t *x = &L->ctx;
    size_t words = INCMOE_SET_WORDS(L->N);
    void *sets_d = NULL, *dcb_d = NULL, *src_d = NULL;
    incmoe_status_t st;
    if ((st = buffer_alloc(cb, tokens * L->grow, &cb->xs, &x->xs)) != INCMOE_OK ||
        (st = buffer_alloc(cb, tokens * L->zrow, &cb->zo, &x->zo)) != INCMOE_OK ||
        (st = incmoe_mem_register(L->comm, cb->xs, tokens * L->grow, &cb->xs_mr)) != INCMOE_OK ||
        (st = incmoe_mem_register(L->comm, cb->zo, tokens * L->zrow, &cb->zo_mr)) != INCMOE_OK ||
        (st = mapped_pair_alloc(tokens * words * sizeof(uint64_t), (void **)&cb->sets_h,
                                &sets_d)) != INCMOE_OK ||
        (st = mapped_pair_alloc(INCMOE_MOE_MAX_BANDS * sizeof(incmoe_fifo_dispatch_t),
                                (void **)&cb->dcb_h, &dcb_d)) != INCMOE_OK ||
        (st = mapped_pair_alloc((size_t)L->N * tokens * 2 * sizeof(uint32_t), (void **)&cb->src_h,
                                &src_d)) != INCMOE_OK)
        return st;
    /* The wire ids' ranks (replica_plan.h); one slot here: replicas run on the CPU only. */
    const size_t ids = (size_t)L->E * (size_t)L->slots;
    CU(cudaMalloc((void **)&cb->owner_d, ids * sizeof(int32_t)));
    CU(cudaMemcpy(cb->owner_d, L->owner, ids * sizeof(int32_t), cudaMemcpyHostToDevice));
    x->E = L->E;
    x->words = words;
    x->owner = cb->owner_d;
    x->sets = sets_d;
    x->sets_host = (uint64_t)(uintptr_t)cb->sets_h;
    x->dcb = dcb_d;
    x->dcb_host = (uint64_t)(uintptr_t)cb->dcb_h;
    x->src = src_d;
    x->src_host = (uint64_t)(uintptr_t)cb->src_h;
    x->xs_mr = (uint64_t)(uintptr_t)cb->xs_mr;
    x->zo_mr = (uint64_t)(uintptr_t)cb->zo_mr;
    return INCMOE_OK;
}

static incmoe_status_t weights_load(cuda_be_t *cb, const incmoe_moe_t *L,
                                    const incmoe_moe_params_t *p)
{
    size_t nl = (size_t)(L->n_local > 0 ? L->n_local : 1);
    size_t m = (size_t)L->I * L->H * L->esize; /* bytes of one matrix */
    CU(cudaMalloc(&cb->w_gu_d, nl * 2 * m));
    CU(cudaMalloc(&cb->w_down_d, nl * m));
    CU(cudaMalloc((void **)&cb->ids_d, nl * sizeof(int)));
    for (int le = 0; le < L->n_local; le++) {
        uint8_t *gu = (uint8_t *)cb->w_gu_d + (size_t)le * 2 * m;
        CU(cudaMemcpy(gu, (const uint8_t *)p->w_gate + le * m, m, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(gu + m, (const uint8_t *)p->w_up + le * m, m, cudaMemcpyHostToDevice));
        CU(cudaMemcpy((uint8_t *)cb->w_down_d + le * m, (const uint8_t *)p->w_down + le * m, m,
                      cudaMemcpyHostToDevice));
    }
    if (L->n_local > 0)
        CU(cudaMemcpy(cb->ids_d, L->local_ids, (size_t)L->n_local * sizeof(int),
                      cudaMemcpyHostToDevice));
    return INCMOE_OK;
}

static incmoe_status_t device_pick(cuda_be_t *cb)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        log_error(SUBSYS, "CUDA backend: no CUDA device (%s)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return INCMOE_ERR_UNSUPPORTED;
    }
    CU(cudaGetDevice(&cb->device));
    CU(cudaDeviceGetAttribute(&cb->sms, cudaDevAttrMultiProcessorCount, cb->device));
    if (moe_cuda_blocks_per_sm(&cb->blocks_per_sm) != 0 || cb->blocks_per_sm < 1) {
        log_error(SUBSYS, "CUDA backend: the kernel cannot run on device %d (built for %s)",
                  cb->device, INCMOE_CUDA_ARCHS);
        return INCMOE_ERR_UNSUPPORTED;
    }
    return INCMOE_OK;
}

static incmoe_status_t cuda_create(incmoe_moe_t *L, const incmoe_moe_params_t *p)
{
    cuda_be_t *cb = calloc(1, sizeof(*cb));
    if (cb == NULL)
        return INCMOE_ERR_NO_MEMORY;
    L->be = cb;
    cb->comm = L->comm;
    incmoe_status_t st = device_pick(cb);
    if (st != INCMOE_OK)
        return st;
    uint64_t types = 0;
    if ((st = inc_ucx_memory_types(&types)) != INCMOE_OK)
        return st;
    /* The client reduces the root's partial and copies eager payloads on the host. */
    cb->placement = moe_cuda_placement(types, 0, cb->why, sizeof(cb->why));
    if ((st = weights_load(cb, L, p)) != INCMOE_OK)
        return st;

    size_t tokens = L->max_tokens > 0 ? L->max_tokens : 1;
    size_t rows = (size_t)L->N * tokens;
    cb->gsize = rows * L->grow;
    cb->zsize = rows * L->zrow;
    moe_ctx_t *x = &L->ctx;
    if ((st = buffer_alloc(cb, cb->gsize, &cb->xg, &x->xg)) != INCMOE_OK ||
        (st = buffer_alloc(cb, cb->zsize, &cb->z, &x->z)) != INCMOE_OK)
        return st;
    if ((st = incmoe_mem_register(L->comm, cb->xg, cb->gsize, &cb->xg_mr)) != INCMOE_OK ||
        (st = incmoe_mem_register(L->comm, cb->z, cb->zsize, &cb->z_mr)) != INCMOE_OK ||
        (st = masked_setup(cb, L, tokens)) != INCMOE_OK)
        return st;
    size_t sf = cuda_scratch_floats(L->H, L->I);
    CU(cudaMalloc((void **)&cb->own_d, tokens * (size_t)L->H * sizeof(float)));
    CU(cudaMalloc((void **)&cb->scratch_d, INCMOE_MOE_MAX_WORKERS * sf * sizeof(float)));
    CU(cudaMalloc((void **)&cb->cnt_d, sizeof(moe_counters_t)));
    CU(cudaMemset(cb->cnt_d, 0, sizeof(moe_counters_t)));
    CU(cudaMalloc((void **)&cb->words_d, sizeof(devfifo_words_t)));
    CU(cudaMemset(cb->words_d, 0, sizeof(devfifo_words_t)));
    CU(cudaMalloc((void **)&cb->counts_d, (size_t)L->N * sizeof(size_t)));
    CU(cudaEventCreateWithFlags(&cb->done, cudaEventBlockingSync | cudaEventDisableTiming));
    if ((st = fifo_setup(cb, &x->fifo)) != INCMOE_OK)
        return st;

    cb->st = (cuda_state_t){.I = L->I,
                            .n_local = L->n_local,
                            .tensor_cores =
                                L->dtype != INCMOE_FLOAT32 && L->H % 16 == 0 && L->I % 16 == 0,
                            .local_ids = cb->ids_d,
                            .w_gu = cb->w_gu_d,
                            .w_down = cb->w_down_d,
                            .scratch = cb->scratch_d,
                            .scratch_floats = sf,
                            .fifo_words = cb->words_d};
    CU(cudaMalloc((void **)&cb->st_d, sizeof(cuda_state_t)));
    CU(cudaMemcpy(cb->st_d, &cb->st, sizeof(cuda_state_t), cudaMemcpyHostToDevice));
    x->own = cb->own_d;
    x->xg_mr = (uint64_t)(uintptr_t)cb->xg_mr;
    x->z_mr = (uint64_t)(uintptr_t)cb->z_mr;
    x->cnt = &cb->cnt_h;
    x->host_fifo = NULL;
    x->be = cb->st_d;
    return INCMOE_OK;
}

static incmoe_status_t cuda_destroy(incmoe_moe_t *L)
{
    cuda_be_t *cb = L->be;
    if (cb == NULL)
        return INCMOE_OK;
    incmoe_status_t st = incmoe_fifo_destroy(cb->fifo);
    if (cb->xg_mr)
        incmoe_mem_deregister(cb->comm, cb->xg_mr);
    if (cb->z_mr)
        incmoe_mem_deregister(cb->comm, cb->z_mr);
    if (cb->xs_mr)
        incmoe_mem_deregister(cb->comm, cb->xs_mr);
    if (cb->zo_mr)
        incmoe_mem_deregister(cb->comm, cb->zo_mr);
    if (cb->placement == MOE_CUDA_BUF_DEVICE) {
        cudaFree(cb->xg);
        cudaFree(cb->z);
        cudaFree(cb->xs);
        cudaFree(cb->zo);
    } else {
        cudaFreeHost(cb->xg);
        cudaFreeHost(cb->z);
        cudaFreeHost(cb->xs);
        cudaFreeHost(cb->zo);
    }
    cudaFreeHost(cb->sets_h);
    cudaFreeHost(cb->dcb_h);
    cudaFreeHost(cb->src_h);
    cudaFree(cb->owner_d);
    cudaFree(cb->w_gu_d);
    cudaFree(cb->w_down_d);
    cudaFree(cb->ids_d);
    cudaFree(cb->own_d);
    cudaFree(cb->scratch_d);
    cudaFree(cb->cnt_d);
    cudaFree(cb->words_d);
    cudaFree(cb->counts_d);
    cudaFree(cb->st_d);
    cudaFreeHost(cb->ids_h);
    if (cb->done)
        cudaEventDestroy(cb->done);
    free(cb);
    L->be = NULL;
    return st;
}

/* -------------------------------------------------------------- forward */

static incmoe_status_t cuda_stage_ids(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                                      const int32_t *ids, size_t n, const int32_t **host_p)
{
    cuda_be_t *cb = L->be;
    cudaStream_t s = (f->field_mask & INCMOE_MOE_FWD_STREAM) ? (cudaStream_t)f->stream : NULL;
    if (n > cb->ids_cap) {
        cudaFreeHost(cb->ids_h);
        cb->ids_h = NULL;
        cb->ids_cap = 0;
        CU(cudaMallocHost((void **)&cb->ids_h, n * sizeof(int32_t)));
        cb->ids_cap = n;
    }
    if (n > 0) {
        /* Behind the caller's work on its stream: the ids may be written there. */
        CU(cudaMemcpyAsync(cb->ids_h, ids, n * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
        CU(cudaStreamSynchronize(s));
    }
    *host_p = cb->ids_h;
    return INCMOE_OK;
}

static incmoe_status_t cuda_forward(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f)
{
    cuda_be_t *cb = L->be;
    const moe_ctx_t *x = &L->ctx;
    cudaStream_t s = (f->field_mask & INCMOE_MOE_FWD_STREAM) ? (cudaStream_t)f->stream : NULL;
    int blocks = x->G + x->C + x->R;
    if (blocks > cb->sms * cb->blocks_per_sm) {
        log_error(SUBSYS,
                  "rank %d: CUDA backend: %d role blocks cannot all be resident on %d SMs x %d",
                  L->rank, blocks, cb->sms, cb->blocks_per_sm);
        return INCMOE_ERR_UNSUPPORTED;
    }
    CU(cudaSetDevice(cb->device));
    CU(cudaMemcpyAsync(cb->counts_d, x->counts, (size_t)L->N * sizeof(size_t),
                       cudaMemcpyHostToDevice, s));
    /* Pipelined, full routing: this rank's block of Z is zero (its partial waits in own). */
    if (x->pipelined && !x->masked && x->counts[x->rank] > 0)
        CU(cudaMemsetAsync(z_row(x, (size_t)x->rank, 0), 0, x->counts[x->rank] * x->zrow, s));
    moe_ctx_t k = *x;
    k.cnt = cb->cnt_d;
    k.counts = cb->counts_d;
    CU((cudaError_t)moe_cuda_launch(&k, s));
    CU(cudaEventRecord(cb->done, s));
    CU(cudaEventSynchronize(cb->done));
    CU(cudaMemcpy(&cb->cnt_h, cb->cnt_d, sizeof(cb->cnt_h), cudaMemcpyDeviceToHost));
    return INCMOE_OK;
}

static int cuda_describe(const incmoe_moe_t *L, char *buf, size_t len)
{
    const cuda_be_t *cb = L->be;
    return snprintf(buf, len, "cuda device %d (%d SMs), buffers %s (%s), FFN %s", cb->device,
                    cb->sms, moe_cuda_buf_name(cb->placement), cb->why,
                    cb->st.tensor_cores ? "tensor cores (WMMA)" : "SIMT fp32");
}

const moe_backend_ops_t moe_cuda_backend = {.name = "cuda",
                                            .device_inputs = 1,
                                            .create = cuda_create,
                                            .forward = cuda_forward,
                                            .destroy = cuda_destroy,
                                            .stage_ids = cuda_stage_ids,
                                            .describe = cuda_describe};
