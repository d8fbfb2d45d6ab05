/*
 * layer.c - the layer object: creation, the forward pass in both modes, and
 * the argument checks every rank agrees on.
 *
 * Every create and forward starts with a small AllGather of a header per
 * rank (the shape, the token counts, the chosen configuration, and whether
 * the rank's own arguments passed its checks).  Each rank then judges all
 * headers alike, so a bad argument on one rank becomes the same clear error
 * on every rank instead of a hang.  The exchange also fences forwards: no
 * rank's data of forward f+1 can arrive before every rank entered it, so the
 * zero-copy output of forward f stays intact until the caller's next call.
 */
#include "layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/config.h"
#include "elem.h"
#include "base/log.h"
#include "base/clock.h"
#include "base/hash.h"

#define SUBSYS "moe"

#define HDR_MAGIC      0x494d4f45u /* "IMOE" */
#define HDR_CREATE     1
#define HDR_FORWARD    2
#define MOE_MAX_E      4096
#define MOE_MAX_DIM    (1 << 16)
#define MOE_MAX_TOKENS (1 << 20)
#define MOE_MAX_BYTES  (64ull << 30) /* bound on one registered buffer */
#define FIFO_SLOTS     256

typedef struct {
    uint32_t magic;
    int32_t status; /* this rank's own checks: 0 or an incmoe_status_t */
    uint32_t phase;
    uint32_t nranks;
    uint64_t seq;  /* forwards before this one */
    uint64_t hash; /* create: placement; forward: token counts */
    int32_t E, k, H, I, dtype, max_tokens;
    int32_t mode, nb, gather, reduce, tail;
} moe_hdr_t;

_Static_assert(sizeof(moe_hdr_t) <= MOE_HDR_BYTES, "header fits its block");

void incmoe_moe_params_init(incmoe_moe_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->dtype = INCMOE_FLOAT32;
    p->config.tail_bands = -1;
}

const char *incmoe_moe_mode_name(incmoe_moe_mode_t mode)
{
    switch (mode) {
    case INCMOE_MOE_BASELINE:
        return "baseline";
    case INCMOE_MOE_PIPELINED:
        return "pipelined";
    }
    return "unknown";
}

/* Waits for req at most L->timeout_ms, sleeping with a backoff (capped at 1 ms):
   a rank that left the job early must not hold the others here for ever. */
static incmoe_status_t wait_bounded(incmoe_moe_t *L, const incmoe_req_t *req)
{
    double deadline = inc_now_ms() + L->timeout_ms;
    long ns = 10000;
    for (;;) {
        incmoe_status_t st = incmoe_test(L->comm, req);
        if (st != INCMOE_IN_PROGRESS)
            return st;
        if (inc_now_ms() > deadline)
            return INCMOE_ERR_TIMEOUT;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = ns < 1000000 ? ns * 2 : 1000000;
    }
}

/* AllGathers every rank's header and judges them all the same way on every rank. */
static incmoe_status_t exchange(incmoe_moe_t *L, const moe_hdr_t *mine, const char *what)
{
    memset(L->hdr + (size_t)L->rank * MOE_HDR_BYTES, 0, MOE_HDR_BYTES);
    memcpy(L->hdr + (size_t)L->rank * MOE_HDR_BYTES, mine, sizeof(*mine));
    incmoe_layout_t layout = {MOE_HDR_BYTES, 0, sizeof(moe_hdr_t), NULL};
    incmoe_req_t req;
    incmoe_status_t st = incmoe_allgather(L->comm, L->hdr_mr, (size_t)L->rank * MOE_HDR_BYTES,
                                          L->hdr_mr, 0, &layout, &req);
    if (st == INCMOE_OK)
        st = wait_bounded(L, &req);
    if (st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: %s: header exchange failed: %s (%s)", L->rank, what,
                  incmoe_strerror(st), why);
        return st;
    }
    incmoe_status_t verdict = INCMOE_OK;
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * MOE_HDR_BYTES, sizeof(h));
        if (h.magic != HDR_MAGIC || h.phase != mine->phase || h.nranks != mine->nranks) {
            log_error(SUBSYS,
                      "rank %d: %s: rank %d is not in the same call (phase %u, %u ranks; "
                      "expected phase %u, %u ranks)",
                      L->rank, what, s, h.phase, h.nranks, mine->phase, mine->nranks);
            return INCMOE_ERR_MISMATCH;
        }
        if (h.status != 0) {
            if (s != L->rank)
                log_error(SUBSYS, "rank %d: %s: rank %d rejected its arguments (%s; see its log)",
                          L->rank, what, s, incmoe_strerror((incmoe_status_t)h.status));
            verdict = INCMOE_ERR_INVALID_ARG;
        }
    }
    if (verdict != INCMOE_OK)
        return verdict;
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * MOE_HDR_BYTES, sizeof(h));
        /* Compare everything but the per-rank status. */
        if (h.seq != mine->seq || h.hash != mine->hash || h.E != mine->E || h.k != mine->k ||
            h.H != mine->H || h.I != mine->I || h.dtype != mine->dtype ||
            h.max_tokens != mine->max_tokens || h.mode != mine->mode || h.nb != mine->nb ||
            h.gather != mine->gather || h.reduce != mine->reduce || h.tail != mine->tail) {
            log_error(SUBSYS,
                      "rank %d: %s: rank %d disagrees: it has call %llu, %s hash %016llx, "
                      "E=%d k=%d H=%d I=%d dtype=%d max_tokens=%d mode=%d nb=%d workers=%d/%d "
                      "tail=%d; this rank has call %llu, hash %016llx, E=%d k=%d H=%d I=%d "
                      "dtype=%d max_tokens=%d mode=%d nb=%d workers=%d/%d tail=%d",
                      L->rank, what, s, (unsigned long long)h.seq,
                      mine->phase == HDR_CREATE ? "placement" : "token counts",
                      (unsigned long long)h.hash, h.E, h.k, h.H, h.I, h.dtype, h.max_tokens, h.mode,
                      h.nb, h.gather, h.reduce, h.tail, (unsigned long long)mine->seq,
                      (unsigned long long)mine->hash, mine->E, mine->k, mine->H, mine->I,
                      mine->dtype, mine->max_tokens, mine->mode, mine->nb, mine->gather,
                      mine->reduce, mine->tail);
            return INCMOE_ERR_MISMATCH;
        }
    }
    return INCMOE_OK;
}

/* -------------------------------------------------------------- creation */

static incmoe_status_t check_params(const incmoe_moe_params_t *p, int N, int rank)
{
#define BAD(fmt, ...)                                                                              \
    do {                                                                                           \
        log_error(SUBSYS, "rank %d: create: " fmt, rank, ##__VA_ARGS__);                           \
        return INCMOE_ERR_INVALID_ARG;                                                             \
    } while (0)
    if (p->num_experts < 1 || p->num_experts > MOE_MAX_E)
        BAD("num_experts is %d, expected 1..%d", p->num_experts, MOE_MAX_E);
    if (p->top_k < 1 || p->top_k > p->num_experts || p->top_k > INCMOE_MOE_MAX_TOPK)
        BAD("top_k is %d, expected 1..min(E=%d, %d)", p->top_k, p->num_experts,
            INCMOE_MOE_MAX_TOPK);
    if (p->hidden < 1 || p->hidden > MOE_MAX_DIM || p->intermediate < 1 ||
        p->intermediate > MOE_MAX_DIM)
        BAD("hidden %d / intermediate %d, expected 1..%d", p->hidden, p->intermediate, MOE_MAX_DIM);
    if (p->dtype != INCMOE_FLOAT32 && p->dtype != INCMOE_FLOAT16 && p->dtype != INCMOE_BFLOAT16)
        BAD("datatype %s, expected float, half or bfloat16", incmoe_dtype_name(p->dtype));
    if (p->max_tokens < 0 || p->max_tokens > MOE_MAX_TOKENS)
        BAD("max_tokens is %d, expected 0..%d", p->max_tokens, MOE_MAX_TOKENS);
    if (p->expert_owner == NULL) {
        if (p->num_experts % N != 0)
            BAD("%d experts cannot be placed contiguously on %d ranks (not divisible)",
                p->num_experts, N);
    } else {
        for (int e = 0; e < p->num_experts; e++)
            if (p->expert_owner[e] < 0 || p->expert_owner[e] >= N)
                BAD("expert_owner[%d] is %d, expected a rank in 0..%d", e, p->expert_owner[e],
                    N - 1);
    }
    size_t grow = ((size_t)p->hidden * 4 + (size_t)p->top_k * 8 + 15) & ~(size_t)15;
    if ((double)N * p->max_tokens * grow > (double)MOE_MAX_BYTES)
        BAD("%d ranks x %d tokens x %zu bytes exceed the %llu-byte buffer bound", N, p->max_tokens,
            grow, (unsigned long long)MOE_MAX_BYTES);
    if (p->config.nbands < 0 || p->config.nbands > INCMOE_MOE_MAX_BANDS ||
        p->config.gather_workers < 0 || p->config.gather_workers > INCMOE_MOE_MAX_WORKERS ||
        p->config.compute_workers < 0 || p->config.compute_workers > INCMOE_MOE_MAX_WORKERS ||
        p->config.reduce_workers < 0 || p->config.reduce_workers > INCMOE_MOE_MAX_WORKERS ||
        p->config.tail_bands < -1 || p->config.tail_bands > INCMOE_MOE_MAX_BANDS)
        BAD("configuration override out of range (nb %d, workers %d/%d/%d, tail %d)",
            p->config.nbands, p->config.gather_workers, p->config.compute_workers,
            p->config.reduce_workers, p->config.tail_bands);
    return INCMOE_OK;
#undef BAD
}

static incmoe_status_t setup(incmoe_moe_t *L, const incmoe_moe_params_t *p)
{
    const size_t H = (size_t)L->H, I = (size_t)L->I;
    L->local_index = malloc((size_t)L->E * sizeof(int));
    L->local_ids = malloc((size_t)L->E * sizeof(int));
    if (L->local_index == NULL || L->local_ids == NULL)
        return INCMOE_ERR_NO_MEMORY;
    for (int e = 0; e < L->E; e++) {
        int owner = p->expert_owner ? p->expert_owner[e] : e / (L->E / L->N);
        L->local_index[e] = owner == L->rank ? L->n_local : -1;
        if (owner == L->rank)
            L->local_ids[L->n_local++] = e;
    }
    if (L->n_local > 0 && (p->w_gate == NULL || p->w_up == NULL || p->w_down == NULL)) {
        log_error(SUBSYS, "rank %d: create: hosts %d experts but a weight pointer is NULL", L->rank,
                  L->n_local);
        return INCMOE_ERR_INVALID_ARG;
    }
    size_t nl = (size_t)(L->n_local > 0 ? L->n_local : 1);
    L->w_gu = malloc(nl * 2 * I * H * sizeof(float));
    L->w_down = malloc(nl * H * I * sizeof(float));
    if (L->w_gu == NULL || L->w_down == NULL)
        return INCMOE_ERR_NO_MEMORY;
    for (int le = 0; le < L->n_local; le++) {
        const uint8_t *g = (const uint8_t *)p->w_gate + (size_t)le * I * H * L->esize;
        const uint8_t *u = (const uint8_t *)p->w_up + (size_t)le * I * H * L->esize;
        const uint8_t *d = (const uint8_t *)p->w_down + (size_t)le * H * I * L->esize;
        inc_dtype_to_float(L->w_gu + (size_t)le * 2 * I * H, g, I * H, L->dtype);
        inc_dtype_to_float(L->w_gu + (size_t)le * 2 * I * H + I * H, u, I * H, L->dtype);
        inc_dtype_to_float(L->w_down + (size_t)le * H * I, d, H * I, L->dtype);
    }
    size_t rows = (size_t)L->N * (L->max_tokens > 0 ? L->max_tokens : 1);
    size_t gsize = rows * L->grow, zsize = rows * L->zrow;
    L->xg = aligned_alloc(64, (gsize + 63) & ~(size_t)63);
    L->z = aligned_alloc(64, (zsize + 63) & ~(size_t)63);
    L->own = malloc((L->max_tokens > 0 ? L->max_tokens : 1) * H * sizeof(float));
    if (L->xg == NULL || L->z == NULL || L->own == NULL)
        return INCMOE_ERR_NO_MEMORY;
    memset(L->xg, 0, gsize);
    memset(L->z, 0, zsize);
    incmoe_status_t st = incmoe_mem_register(L->comm, L->xg, gsize, &L->xg_mr);
    if (st == INCMOE_OK)
        st = incmoe_mem_register(L->comm, L->z, zsize, &L->z_mr);
    if (st != INCMOE_OK)
        return st;
    for (int i = 0; i < INCMOE_MOE_MAX_WORKERS; i++)
        if ((st = ffn_scratch_alloc(L, &L->scratch[i])) != INCMOE_OK)
            return st;
    if ((st = incmoe_fifo_create(L->comm, FIFO_SLOTS, &L->fifo)) != INCMOE_OK)
        return st;
    return cpu_pool_create(L, &L->pool);
}

incmoe_status_t incmoe_moe_create(const incmoe_moe_params_t *p, incmoe_moe_t **layer_p)
{
    if (p == NULL || layer_p == NULL || p->comm == NULL) {
        log_error(SUBSYS, "create: parameters, output pointer and communicator are required");
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_moe_t *L = calloc(1, sizeof(*L));
    if (L == NULL)
        return INCMOE_ERR_NO_MEMORY;
    L->comm = p->comm;
    L->N = incmoe_comm_nranks(p->comm);
    L->rank = incmoe_comm_rank(p->comm);
    L->hdr = calloc((size_t)L->N, MOE_HDR_BYTES);
    incmoe_status_t st = L->hdr ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
    if (st == INCMOE_OK)
        st = incmoe_mem_register(L->comm, L->hdr, (size_t)L->N * MOE_HDR_BYTES, &L->hdr_mr);
    if (st != INCMOE_OK) {
        free(L->hdr);
        free(L);
        return st;
    }

    L->timeout_ms =
        p->timeout_ms > 0 ? p->timeout_ms : 2 * (int)inc_config_get_int("INCMOE_TIMEOUT_MS");
    incmoe_status_t local = check_params(p, L->N, L->rank);
    if (local == INCMOE_OK) {
        L->E = p->num_experts;
        L->k = p->top_k;
        L->H = p->hidden;
        L->I = p->intermediate;
        L->dtype = p->dtype;
        L->esize = incmoe_dtype_size(p->dtype);
        L->max_tokens = (size_t)p->max_tokens;
        L->override = p->config;
        L->grow = ((size_t)L->H * L->esize + (size_t)L->k * 8 + 15) & ~(size_t)15;
        L->zrow = (size_t)L->H * L->esize;
        uint64_t h = 1469598103934665603ull;
        for (int e = 0; e < L->E; e++) {
            int owner = p->expert_owner ? p->expert_owner[e] : e / (L->E / L->N);
            h = inc_fnv1a(h, &owner, sizeof(owner));
        }
        L->placement_hash = h;
        local = setup(L, p);
        if (local != INCMOE_OK)
            log_error(SUBSYS, "rank %d: create: setting up buffers failed: %s", L->rank,
                      incmoe_strerror(local));
    }
    moe_hdr_t mine = {.magic = HDR_MAGIC,
                      .status = local,
                      .phase = HDR_CREATE,
                      .nranks = (uint32_t)L->N,
                      .hash = L->placement_hash,
                      .E = L->E,
                      .k = L->k,
                      .H = L->H,
                      .I = L->I,
                      .dtype = (int32_t)L->dtype,
                      .max_tokens = (int32_t)L->max_tokens};
    st = exchange(L, &mine, "create");
    if (st != INCMOE_OK) {
        L->failed = 1;
        incmoe_moe_destroy(L);
        return st;
    }
    *layer_p = L;
    return INCMOE_OK;
}

incmoe_status_t incmoe_moe_destroy(incmoe_moe_t *L)
{
    if (L == NULL)
        return INCMOE_OK;
    cpu_pool_destroy(L->pool);
    incmoe_status_t st = incmoe_fifo_destroy(L->fifo);
    for (int i = 0; i < INCMOE_MOE_MAX_WORKERS; i++)
        ffn_scratch_free(&L->scratch[i]);
    if (L->xg_mr)
        incmoe_mem_deregister(L->comm, L->xg_mr);
    if (L->z_mr)
        incmoe_mem_deregister(L->comm, L->z_mr);
    if (L->hdr_mr)
        incmoe_mem_deregister(L->comm, L->hdr_mr);
    free(L->xg);
    free(L->z);
    free(L->own);
    free(L->hdr);
    free(L->w_gu);
    free(L->w_down);
    free(L->local_ids);
    free(L->local_index);
    free(L);
    return st;
}

/* --------------------------------------------------------------- forward */

static incmoe_status_t check_forward(const incmoe_moe_t *L, incmoe_moe_mode_t mode, const void *x,
                                     const int32_t *ids, const float *w, const int *counts,
                                     void **out_p)
{
#define BAD(fmt, ...)                                                                              \
    do {                                                                                           \
        log_error(SUBSYS, "rank %d: forward: " fmt, L->rank, ##__VA_ARGS__);                       \
        return INCMOE_ERR_INVALID_ARG;                                                             \
    } while (0)
    if (mode != INCMOE_MOE_BASELINE && mode != INCMOE_MOE_PIPELINED)
        BAD("mode %d is neither baseline nor pipelined", (int)mode);
    if (counts == NULL || out_p == NULL)
        BAD("counts and out_p are required");
    for (int s = 0; s < L->N; s++)
        if (counts[s] < 0 || (size_t)counts[s] > L->max_tokens)
            BAD("rank %d's token count is %d, expected 0..max_tokens=%zu", s, counts[s],
                L->max_tokens);
    int T = counts[L->rank];
    if (T > 0 && (x == NULL || ids == NULL || w == NULL))
        BAD("%d tokens but x, topk_ids or topk_weights is NULL", T);
    for (int t = 0; t < T; t++) {
        const int32_t *id = ids + (size_t)t * L->k;
        for (int a = 0; a < L->k; a++) {
            if (id[a] < 0 || id[a] >= L->E)
                BAD("token %d: expert id %d (choice %d) is outside 0..%d", t, id[a], a, L->E - 1);
            for (int b = 0; b < a; b++)
                if (id[b] == id[a])
                    BAD("token %d lists expert %d twice (choices %d and %d)", t, id[a], b, a);
        }
    }
    return INCMOE_OK;
#undef BAD
}

incmoe_status_t incmoe_moe_config_for(const incmoe_moe_t *L, const int *counts,
                                      incmoe_moe_config_t *cfg_p)
{
    if (L == NULL || counts == NULL || cfg_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    size_t tmax = 0;
    for (int s = 0; s < L->N; s++)
        if (counts[s] > 0 && (size_t)counts[s] > tmax)
            tmax = (size_t)counts[s];
    config_choose(L, tmax, cfg_p);
    return INCMOE_OK;
}

static incmoe_status_t forward_baseline(incmoe_moe_t *L)
{
    moe_plan_t *p = &L->plan;
    band_t all = {0, p->tmax};
    band_t own = {0, p->counts[L->rank]};
    incmoe_req_t req;
    incmoe_fifo_trigger_t t;
    double t0 = inc_now_ms();
    moe_pack_rows(L, own);
    moe_ag_trigger(L, all, &t);
    incmoe_layout_t lay = {t.desc.block_stride, t.desc.offset, t.desc.length, t.valid};
    incmoe_status_t st =
        incmoe_allgather(L->comm, L->xg_mr, t.desc.send_offset, L->xg_mr, 0, &lay, &req);
    if (st == INCMOE_OK)
        st = incmoe_wait(L->comm, &req);
    if (st != INCMOE_OK) {
        log_error(SUBSYS, "rank %d: baseline AllGather failed: %s", L->rank, incmoe_strerror(st));
        return st;
    }
    double t1 = inc_now_ms();
    sync_publish(&L->ag_ready, p->band_base + 1);
    if ((st = cpu_pool_run(L->pool, 0)) != INCMOE_OK)
        return st;
    if ((st = (incmoe_status_t)atomic_load(&L->abort)) != INCMOE_OK)
        return st;
    double t2 = inc_now_ms();
    moe_rs_trigger(L, all, &t);
    lay = (incmoe_layout_t){t.desc.block_stride, t.desc.offset, t.desc.length, t.valid};
    st = incmoe_reducescatter(L->comm, L->z_mr, 0, L->z_mr, t.desc.recv_offset, &lay, L->dtype,
                              INCMOE_SUM, &req);
    if (st == INCMOE_OK)
        st = incmoe_wait(L->comm, &req);
    if (st != INCMOE_OK)
        log_error(SUBSYS, "rank %d: baseline ReduceScatter failed: %s", L->rank,
                  incmoe_strerror(st));
    L->timing.allgather_ms = t1 - t0;
    L->timing.ffn_ms = t2 - t1;
    L->timing.reducescatter_ms = inc_now_ms() - t2;
    return st;
}

incmoe_status_t incmoe_moe_forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, const void *x,
                                   const int32_t *ids, const float *w, const int *counts,
                                   void **out_p)
{
    if (L == NULL) {
        log_error(SUBSYS, "forward: layer is NULL");
        return INCMOE_ERR_INVALID_ARG;
    }
    if (L->failed) {
        log_error(SUBSYS,
                  "rank %d: forward: an earlier forward failed mid-pipeline; the layer "
                  "must be destroyed",
                  L->rank);
        return INCMOE_ERR_CLOSED;
    }
    double t_start = inc_now_ms();
    incmoe_status_t local = check_forward(L, mode, x, ids, w, counts, out_p);
    incmoe_moe_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    uint64_t hash = 1469598103934665603ull;
    size_t tmax = 0;
    if (local == INCMOE_OK) {
        for (int s = 0; s < L->N; s++) {
            hash = inc_fnv1a(hash, &counts[s], sizeof(int));
            if ((size_t)counts[s] > tmax)
                tmax = (size_t)counts[s];
        }
        config_choose(L, tmax, &cfg);
        if (mode == INCMOE_MOE_BASELINE) /* one band, no pipeline roles */
            cfg.nbands = 1, cfg.gather_workers = 1, cfg.reduce_workers = 1, cfg.tail_bands = 0;
    }
    moe_hdr_t mine = {.magic = HDR_MAGIC,
                      .status = local,
                      .phase = HDR_FORWARD,
                      .nranks = (uint32_t)L->N,
                      .seq = L->band_total,
                      .hash = hash,
                      .mode = (int32_t)mode,
                      .nb = cfg.nbands,
                      .gather = cfg.gather_workers,
                      .reduce = cfg.reduce_workers,
                      .tail = cfg.tail_bands};
    incmoe_status_t st = exchange(L, &mine, "forward");
    if (st != INCMOE_OK)
        return st;
    double t_exchanged = inc_now_ms();
    memset(&L->timing, 0, sizeof(L->timing));

    moe_plan_t *p = &L->plan;
    p->mode = mode;
    p->cfg = cfg;
    p->tmax = tmax;
    p->nb = (size_t)cfg.nbands;
    p->x = x;
    p->ids = ids;
    p->w = w;
    p->band_base = L->band_total;
    p->rs_base = L->rs_total;
    for (int s = 0; s < L->N; s++) {
        p->counts[s] = (size_t)counts[s];
        p->valid_g[s] = p->counts[s] * L->grow;
        p->valid_z[s] = p->counts[s] * L->zrow;
    }
    if (mode == INCMOE_MOE_PIPELINED) {
        /* This rank's block of Z is what it contributes to its own shard:
           zero, since its own partial waits in L->own for the local reduction. */
        memset(z_row(L, (size_t)L->rank, 0), 0, p->counts[L->rank] * L->zrow);
        st = cpu_pool_run(L->pool, 1);
        if (st == INCMOE_OK)
            st = (incmoe_status_t)atomic_load(&L->abort);
        size_t parts = 0;
        for (size_t j = 0; j < p->nb; j++)
            parts += (size_t)cfg.reduce_workers +
                     (j >= p->nb - (size_t)cfg.tail_bands ? (size_t)cfg.gather_workers : 0);
        L->rs_total += parts;
    } else {
        st = forward_baseline(L);
    }
    L->band_total += p->nb;
    if (st != INCMOE_OK) {
        L->failed = 1;
        return st;
    }
    *out_p = z_row(L, (size_t)L->rank, 0);
    L->timing.exchange_ms = t_exchanged - t_start;
    L->timing.total_ms = inc_now_ms() - t_start;
    return INCMOE_OK;
}

incmoe_status_t incmoe_moe_last_timing(const incmoe_moe_t *L, incmoe_moe_timing_t *timing_p)
{
    if (L == NULL || timing_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    *timing_p = L->timing;
    return INCMOE_OK;
}
