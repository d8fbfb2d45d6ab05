/*
 * layer.c - the public API: creation, the forward pass, and the argument
 * checks every rank agrees on (through exchange.c).  Which path a forward runs
 * is choose.c's when some of it is left to the layer, running it is run.c's;
 * where the weights and buffers live and who runs the role loops is the
 * backend's (backend.h); this file names no backend internals.
 */
#include "layer.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choose.h"
#include "decode.h"
#include "ext.h"
#include "lanes.h"
#include "plan.h"
#include "replicas.h"
#include "routing.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/hash.h"
#include "base/log.h"

#define SUBSYS "moe"

#define MOE_MAX_E      4096
#define MOE_MAX_DIM    (1 << 16)
#define MOE_MAX_TOKENS (1 << 20)
#define MOE_MAX_BYTES  (64ull << 30) /* bound on one registered buffer */

void incmoe_moe_params_init(incmoe_moe_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->dtype = INCMOE_FLOAT32;
    p->config.tail_bands = -1;
    p->backend = INCMOE_MOE_BACKEND_CPU;
}

/* -------------------------------------------------------------- creation */

/* placed: the extension gives a placement (replicas.c checks it). */
static incmoe_status_t check_params(const incmoe_moe_params_t *p, int N, int rank, int placed)
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
        if (!placed && p->num_experts % N != 0)
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

static const moe_backend_ops_t *backend_ops(incmoe_moe_backend_t b)
{
    switch (b) {
    case INCMOE_MOE_BACKEND_CPU:
        return &moe_cpu_backend;
    case INCMOE_MOE_BACKEND_CUDA:
#ifdef INCMOE_MOE_CUDA
        return &moe_cuda_backend;
#else
        return NULL;
#endif
    }
    return NULL;
}

/* Shape, placement and the backend's buffers; this rank's verdict. */
static incmoe_status_t setup(incmoe_moe_t *L, const incmoe_moe_params_t *p,
                             const incmoe_moe_params_ext_t *ext)
{
    int placed = ext != NULL && (ext->field_mask & INCMOE_MOE_PARAM_PLACEMENT);
    incmoe_status_t st = check_params(p, L->N, L->rank, placed);
    if (st != INCMOE_OK)
        return st;
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
    if ((st = replicas_read(L, p, ext)) != INCMOE_OK)
        return st;
    if ((st = plan_place_experts(L, p->expert_owner)) != INCMOE_OK)
        return st;
    if (L->n_local > 0 && (p->w_gate == NULL || p->w_up == NULL || p->w_down == NULL)) {
        log_error(SUBSYS, "rank %d: create: hosts %d experts but a weight pointer is NULL", L->rank,
                  L->n_local);
        return INCMOE_ERR_INVALID_ARG;
    }
    L->ops = backend_ops(p->backend);
    if (L->ops == NULL) {
        log_error(SUBSYS, "rank %d: create: the %s backend is not built into this library", L->rank,
                  p->backend == INCMOE_MOE_BACKEND_CUDA ? "CUDA (configure found no CUDA toolkit)"
                                                        : "requested");
        return INCMOE_ERR_UNSUPPORTED;
    }
    st = L->ops->create(L, p);
    if (st != INCMOE_OK)
        log_error(SUBSYS, "rank %d: create: setting up the %s backend failed: %s", L->rank,
                  L->ops->name, incmoe_strerror(st));
    return st;
}

/* The create header's path fields: the path's, or values no path has. */
static void hdr_path(const incmoe_moe_t *L, moe_hdr_t *h)
{
    h->algo = L->has_path ? L->path.algo : -3;
    h->mode = L->has_path ? (int32_t)L->path.mode : -1;
    h->routing = L->has_path ? (int32_t)L->path.routing : -1;
}

incmoe_status_t incmoe_moe_create(const incmoe_moe_params_t *p, incmoe_moe_t **layer_p)
{
    return incmoe_moe_create_ex(p, NULL, layer_p);
}

incmoe_status_t incmoe_moe_create_ex(const incmoe_moe_params_t *p,
                                     const incmoe_moe_params_ext_t *ext, incmoe_moe_t **layer_p)
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
    /* Room for the forced rows a replicated placement's forwards add (replicas.h). */
    size_t hdr_most = replicas_hdr_bytes(
        L->N, ext != NULL && (ext->field_mask & INCMOE_MOE_PARAM_PLACEMENT) != 0);
    L->hdr_bytes = MOE_HDR_BYTES;
    L->hdr = calloc((size_t)L->N, hdr_most);
    incmoe_status_t st = L->hdr ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
    if (st == INCMOE_OK)
        st = incmoe_mem_register(L->comm, L->hdr, (size_t)L->N * hdr_most, &L->hdr_mr);
    if (st != INCMOE_OK) {
        free(L->hdr);
        free(L);
        return st;
    }
    /* Creating the communicator refused an out-of-range value; one changed since is logged and
       the default used.  At most a day, so twice it still fits. */
    long long timeout_ms;
    (void)inc_config_get_int("INCMOE_TIMEOUT_MS", &timeout_ms);
    L->timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : 2 * (int)timeout_ms;
    incmoe_status_t local = setup(L, p, ext);
    if (local == INCMOE_OK)
        local = ext_read(L, ext);
    if (local == INCMOE_OK)
        local = decode_setup(L);
    moe_hdr_t mine = {.status = local,
                      .phase = HDR_CREATE,
                      .nranks = (uint32_t)L->N,
                      .hash = L->placement_hash,
                      .E = L->E,
                      .k = L->k,
                      .H = L->H,
                      .I = L->I,
                      .dtype = (int32_t)L->dtype,
                      .max_tokens = (int32_t)L->max_tokens,
                      .calib = calib_wanted(L),
                      .decode = (int32_t)L->decode_tokens};
    hdr_path(L, &mine);
    st = exchange(L, &mine, "create");
    if (st == INCMOE_OK) {
        /* Every rank read every header: all measure, or none. */
        int32_t calib = 0;
        for (int s = 0; s < L->N; s++) {
            moe_hdr_t h;
            memcpy(&h, L->hdr + (size_t)s * MOE_HDR_BYTES, sizeof(h));
            calib |= h.calib;
        }
        /* Every rank has this placement: the forwards' blocks are alike. */
        L->hdr_bytes = replicas_hdr_bytes(L->N, L->replicated);
        st = calib_agree(L, calib != 0);
    }
    if (st == INCMOE_OK)
        st = lanes_open(L);
    if (st == INCMOE_OK)
        st = choices_hold(L);
    L->path.comm_params = NULL; /* read during create only */
    if (st != INCMOE_OK) {
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
    choices_put(L);
    incmoe_status_t lanes = L->ops ? lanes_close(L) : INCMOE_OK;
    incmoe_status_t st = L->ops ? L->ops->destroy(L) : INCMOE_OK;
    if (st == INCMOE_OK)
        st = lanes;
    if (L->hdr_mr)
        incmoe_mem_deregister(L->comm, L->hdr_mr);
    free(L->hdr);
    decode_free(L);
    replicas_free(L);
    free(L->local_ids);
    free(L->owner);
    free(L);
    return st;
}

/* --------------------------------------------------------------- forward */

/* The caller's stream, NULL when absent. */
static void *fwd_stream(const incmoe_moe_forward_params_t *f)
{
    return (f->field_mask & INCMOE_MOE_FWD_STREAM) ? f->stream : NULL;
}

/* The mode the forward asks for: its field, else the path's, else pipelined. */
static incmoe_moe_mode_t fwd_mode(const incmoe_moe_t *L, const incmoe_moe_forward_params_t *f)
{
    if (f->field_mask & INCMOE_MOE_FWD_MODE)
        return f->mode;
    return L->has_path ? L->path.mode : INCMOE_MOE_PIPELINED;
}

/* The routing the forward asks for: its field, else the path's, else the setting. */
static incmoe_moe_routing_t fwd_routing(const incmoe_moe_t *L, const incmoe_moe_forward_params_t *f)
{
    if (f->field_mask & INCMOE_MOE_FWD_ROUTING)
        return f->routing;
    return L->has_path ? L->path.routing : routing_setting();
}

/* This rank's arguments (a refusal: why[0 .. why_len) says why, for the decode step's
   dispatch to carry); with them, what its tokens need of the others (hdr->pairs,
   hdr->routed). */
static incmoe_status_t check_forward(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                                     incmoe_moe_mode_t mode, const void *x, const int32_t *ids,
                                     const float *w, const int *counts, void **out_p,
                                     moe_hdr_t *hdr, char *why, size_t why_len)
{
#define BAD(fmt, ...)                                                                              \
    do {                                                                                           \
        snprintf(why, why_len, "rank %d: forward: " fmt, L->rank, ##__VA_ARGS__);                  \
        log_error(SUBSYS, "%s", why);                                                              \
        return INCMOE_ERR_INVALID_ARG;                                                             \
    } while (0)
    if (f->field_mask & INCMOE_MOE_FWD_REFUSED)
        BAD("refused by its caller: %s", f->refused ? f->refused : "(no reason given)");
    if (mode != INCMOE_MOE_BASELINE && mode != INCMOE_MOE_PIPELINED && mode != INCMOE_MOE_AUTO &&
        mode != INCMOE_MOE_DECODE)
        BAD("mode %d is not baseline, pipelined, auto or decode", (int)mode);
    if (hdr->routing != INCMOE_MOE_ROUTING_FULL && hdr->routing != INCMOE_MOE_ROUTING_MASKED &&
        hdr->routing != INCMOE_MOE_ROUTING_AUTO)
        BAD("routing %d is not full, masked or auto", (int)hdr->routing);
    if (counts == NULL || out_p == NULL)
        BAD("counts and out_p are required");
    for (int s = 0; s < L->N; s++)
        if (counts[s] < 0 || (size_t)counts[s] > L->max_tokens)
            BAD("rank %d's token count is %d, expected 0..max_tokens=%zu", s, counts[s],
                L->max_tokens);
    int T = counts[L->rank];
    if (T > 0 && (x == NULL || ids == NULL || w == NULL))
        BAD("%d tokens but x, topk_ids or topk_weights is NULL", T);
    if (T > 0 && L->ops->stage_ids != NULL) {
        /* Device ids: checked on a host copy, so every rank agrees on the verdict. */
        incmoe_status_t st = L->ops->stage_ids(L, f, ids, (size_t)T * L->k, &ids);
        if (st != INCMOE_OK) {
            snprintf(why, why_len, "rank %d: forward: copying the expert ids failed: %s", L->rank,
                     incmoe_strerror(st));
            return st;
        }
    }
    if (fwd_stream(f) != NULL && !L->ops->device_inputs)
        BAD("the %s backend takes no stream", L->ops->name);
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
    replicas_local(L, ids, (size_t)T);
    routing_count(L->owner, L->N, L->rank, L->replicated ? L->chosen : ids, L->k, (size_t)T,
                  &hdr->pairs, &hdr->routed);
    return INCMOE_OK;
#undef BAD
}

/* The routing a forward that measures nothing runs on lane i, from what every rank asked
   for and what every header says its tokens need: the same on every rank.  A masked forward
   on an algorithm without dispatch and combine fails alike on every rank before anything is
   posted. */
static incmoe_status_t resolve_routing(incmoe_moe_t *L, int i, incmoe_moe_routing_t asked,
                                       const routing_load_t *load, incmoe_moe_routing_t *used_p)
{
    *used_p = INCMOE_MOE_ROUTING_FULL;
    if (asked == INCMOE_MOE_ROUTING_FULL)
        return INCMOE_OK;
    if (asked == INCMOE_MOE_ROUTING_AUTO) {
        if (routing_choose(load) == INCMOE_MOE_ROUTING_FULL)
            return INCMOE_OK;
    }
    incmoe_status_t st = lanes_dc_probe(L, i);
    if (st != INCMOE_OK)
        return st;
    if (L->lanes[i].dc_support == 0) {
        if (asked == INCMOE_MOE_ROUTING_AUTO)
            return INCMOE_OK;
        log_error(SUBSYS,
                  "rank %d: forward: routing masked needs dispatch and combine, which the "
                  "communicator's algorithm does not have",
                  L->rank);
        return INCMOE_ERR_UNSUPPORTED;
    }
    *used_p = INCMOE_MOE_ROUTING_MASKED;
    return INCMOE_OK;
}

/* What every header of the forward's exchange says the ranks' tokens need (read before
   anything else reuses the header buffer). */
static void fwd_load(const incmoe_moe_t *L, routing_load_t *load_p)
{
    routing_load_t load = {.N = L->N, .grow = L->grow, .zrow = L->zrow};
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * L->hdr_bytes, sizeof(h));
        load.tokens += L->counts[s];
        load.pairs += h.pairs;
        load.routed += h.routed;
    }
    *load_p = load;
}

/* The slowest rank's masked band cost as its last pipelined masked forward showed it: every
   rank reads the same headers, so every rank's model takes the same value. */
static void fwd_agree_band_seen(incmoe_moe_t *L)
{
    double most = 0;
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * L->hdr_bytes, sizeof(h));
        if (h.band_seen_s > most)
            most = h.band_seen_s;
    }
    L->model.masked_band_s = most;
}

/* Whether the forward leaves something to measure: its mode, or with a path its algorithm
   or routing (without one, routing auto is the bytes rule of routing.h). */
static int fwd_measures(const incmoe_moe_t *L, incmoe_moe_mode_t mode, incmoe_moe_routing_t routing)
{
    if (mode == INCMOE_MOE_AUTO)
        return 1;
    return L->has_path &&
           (L->path.algo == INCMOE_MOE_ALGO_AUTO || routing == INCMOE_MOE_ROUTING_AUTO);
}

/* Picks the path (measuring the candidates if choose.c must) and runs it unless measuring
   did; *ran_p: how many paths ran to choose, *runs_p: in how many forwards; *again_p: a
   decode step's form was refused (run.h). */
static incmoe_status_t fwd_run(incmoe_moe_t *L, const moe_inputs_t *in, incmoe_moe_mode_t mode,
                               incmoe_moe_routing_t routing, moe_path_t *path_p, int *ran_p,
                               int *runs_p, int *again_p)
{
    incmoe_status_t st;
    *ran_p = *runs_p = *again_p = 0;
    if (fwd_measures(L, mode, routing)) {
        st = choose_path(L, in, mode, routing, path_p, ran_p, runs_p, again_p);
    } else {
        int n;
        choose_lanes(L, &path_p->lane, &n);
        path_p->mode = mode;
        st = resolve_routing(L, path_p->lane, routing, &in->load, &path_p->routing);
    }
    if (st == INCMOE_OK && *ran_p == 0)
        st = run_path(L, path_p, in, again_p);
    return st;
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
    autotune_choose(L, tmax, NULL, cfg_p);
    return INCMOE_OK;
}

/* Whether some lane a forward of these counts may run on has a decode step that fits them. */
static int fwd_decode_fits(const incmoe_moe_t *L, const int *counts)
{
    int first, n;
    choose_lanes(L, &first, &n);
    for (int i = first; i < first + n; i++)
        if (decode_fits(L, i, counts))
            return 1;
    return 0;
}

/* The forward's header, with this rank's verdict on its arguments (why: its reason) and what
   it asks; mode decode where no decode step fits the counts asks pipelined. */
static void fwd_header(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f, void **out_p,
                       moe_hdr_t *mine, size_t *tmax_p, char *why, size_t why_len)
{
    const uint32_t m = f->field_mask;
    incmoe_moe_mode_t mode = fwd_mode(L, f);
    const int *counts = (m & INCMOE_MOE_FWD_COUNTS) ? f->counts : NULL;
    if (mode == INCMOE_MOE_DECODE && !fwd_decode_fits(L, counts))
        mode = INCMOE_MOE_PIPELINED;
    *mine = (moe_hdr_t){.phase = HDR_FORWARD,
                        .nranks = (uint32_t)L->N,
                        .seq = L->band_total,
                        .mode = (int32_t)mode,
                        .routing = (int32_t)fwd_routing(L, f)};
    incmoe_status_t local =
        check_forward(L, f, mode, (m & INCMOE_MOE_FWD_X) ? f->x : NULL,
                      (m & INCMOE_MOE_FWD_TOPK_IDS) ? f->topk_ids : NULL,
                      (m & INCMOE_MOE_FWD_TOPK_WEIGHTS) ? f->topk_weights : NULL, counts, out_p,
                      mine, why, why_len);
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
        /* auto and decode: the pipelined configuration a bulk candidate would run, as a
           check. */
        run_config(L, mode == INCMOE_MOE_BASELINE ? mode : INCMOE_MOE_PIPELINED, NULL, tmax, &cfg);
    }
    mine->status = local;
    mine->hash = hash;
    mine->nb = cfg.nbands;
    mine->gather = cfg.gather_workers;
    mine->reduce = cfg.reduce_workers;
    mine->tail = cfg.tail_bands;
    mine->band_seen_s = L->band_seen_s;
    *tmax_p = tmax;
}

/* Whether the forward runs the decode step without a header exchange (*path_p): its mode
   leaves the decode step to the layer or forces it, the counts fit, and the path is known
   without measuring (choose.h).  Every rank decides alike from the same counts and asks. */
static incmoe_status_t fwd_decode_first(incmoe_moe_t *L, const moe_inputs_t *in,
                                        const moe_hdr_t *mine, moe_path_t *path_p, int *decode_p)
{
    *decode_p = 0;
    incmoe_moe_mode_t mode = (incmoe_moe_mode_t)mine->mode;
    if ((mode != INCMOE_MOE_AUTO && mode != INCMOE_MOE_DECODE) || !fwd_decode_fits(L, in->counts))
        return INCMOE_OK;
    int known;
    incmoe_status_t st =
        choose_known(L, in->counts, mode, (incmoe_moe_routing_t)mine->routing, path_p, &known);
    *decode_p = st == INCMOE_OK && known && path_p->mode == INCMOE_MOE_DECODE;
    return st;
}

/* The bulk path: the header exchange, then the path chosen (and run) as fwd_run does. */
static incmoe_status_t fwd_bulk(incmoe_moe_t *L, double t_start, moe_hdr_t *mine, moe_inputs_t *in,
                                moe_path_t *path_p, int *ran_p, int *runs_p, int *again_p)
{
    *ran_p = *runs_p = *again_p = 0;
    incmoe_status_t st = exchange(L, mine, "forward");
    if (st != INCMOE_OK)
        return st;
    for (int s = 0; s < L->N; s++)
        L->counts[s] = (size_t)in->counts[s];
    fwd_load(L, &in->load);
    fwd_agree_band_seen(L);
    if (L->replicated) {
        replicas_bulk(L, in->ids, L->counts[L->rank]);
        in->ids = L->chosen;
    }
    L->timing.exchange_ms = inc_now_ms() - t_start;
    return fwd_run(L, in, (incmoe_moe_mode_t)mine->mode, (incmoe_moe_routing_t)mine->routing,
                   path_p, ran_p, runs_p, again_p);
}

/* One try of a forward; *again_p: a decode step's form was refused on every rank alike, so
   every rank tries again (on the bulk path where it was refused). */
static incmoe_status_t forward_once(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                                    void **out_p, int *again_p)
{
    double t_start = inc_now_ms();
    moe_hdr_t mine;
    size_t tmax;
    char why[INCMOE_REFUSAL_MAX] = "";
    fwd_header(L, f, out_p, &mine, &tmax, why, sizeof(why));
    memset(&L->timing, 0, sizeof(L->timing));
    const uint32_t m = f->field_mask;
    moe_inputs_t in = {.f = f,
                       .tmax = tmax,
                       .counts = (m & INCMOE_MOE_FWD_COUNTS) ? f->counts : NULL,
                       .x = (m & INCMOE_MOE_FWD_X) ? f->x : NULL,
                       .ids = (m & INCMOE_MOE_FWD_TOPK_IDS) ? f->topk_ids : NULL,
                       .w = (m & INCMOE_MOE_FWD_TOPK_WEIGHTS) ? f->topk_weights : NULL};
    moe_path_t path;
    int ran = 0, runs = 0, decode;
    *again_p = 0;
    incmoe_status_t st = fwd_decode_first(L, &in, &mine, &path, &decode);
    if (st == INCMOE_OK && decode) {
        if (L->replicated)
            in.ids = L->chosen; /* the decode step's choice: replicas_local's */
        st = decode_run(L, path.lane, &in, mine.status != INCMOE_OK ? why : NULL, again_p);
        if (st == INCMOE_OK && mine.status != INCMOE_OK)
            st = (incmoe_status_t)mine.status; /* only a library that lost the refusal */
    } else if (st == INCMOE_OK) {
        st = fwd_bulk(L, t_start, &mine, &in, &path, &ran, &runs, again_p);
    }
    if (st != INCMOE_OK) {
        memset(&L->timing, 0, sizeof(L->timing));
        return st;
    }
    *out_p = run_output(L);
    L->timing.total_ms = inc_now_ms() - t_start;
    L->timing.routing = path.routing;
    L->timing.algo = L->lanes[path.lane].algo;
    L->timing.mode = path.mode;
    L->timing.measured = ran;
    L->timing.measure_runs = runs;
    L->timing.nbands = (int)L->ctx.nb;
    return INCMOE_OK;
}

incmoe_status_t incmoe_moe_forward_ex(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                                      void **out_p)
{
    if (L == NULL || f == NULL) {
        log_error(SUBSYS, "forward: layer and parameters are required");
        return INCMOE_ERR_INVALID_ARG;
    }
    /* Each try that asks again turned one lane off the decode step: at most one per lane. */
    for (int tries = 0;; tries++) {
        if (L->failed) {
            log_error(SUBSYS,
                      "rank %d: forward: an earlier forward failed mid-pipeline; the layer "
                      "must be destroyed",
                      L->rank);
            return INCMOE_ERR_CLOSED;
        }
        int again;
        incmoe_status_t st = forward_once(L, f, out_p, &again);
        if (!again || tries >= MOE_MAX_LANES)
            return st;
    }
}

incmoe_status_t incmoe_moe_forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, const void *x,
                                   const int32_t *ids, const float *w, const int *counts,
                                   void **out_p)
{
    incmoe_moe_forward_params_t f = {
        .field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS |
                      INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS,
        .mode = mode,
        .x = x,
        .topk_ids = ids,
        .topk_weights = w,
        .counts = counts};
    return incmoe_moe_forward_ex(L, &f, out_p);
}

int incmoe_moe_backend_str(const incmoe_moe_t *L, char *buf, size_t len)
{
    if (L == NULL || L->ops == NULL)
        return snprintf(buf, len, "none");
    if (L->ops->describe == NULL || L->be == NULL)
        return snprintf(buf, len, "%s", L->ops->name);
    return L->ops->describe(L, buf, len);
}

incmoe_status_t incmoe_moe_last_timing_ex(const incmoe_moe_t *L, incmoe_moe_timing_t *timing_p,
                                          size_t timing_size)
{
    if (L == NULL || timing_p == NULL)
        return INCMOE_ERR_INVALID_ARG;
    memcpy(timing_p, &L->timing, timing_size < sizeof(L->timing) ? timing_size : sizeof(L->timing));
    return INCMOE_OK;
}

incmoe_status_t incmoe_moe_last_timing(const incmoe_moe_t *L, incmoe_moe_timing_t *timing_p)
{
    /* The fields a program built before routing allocated. */
    return incmoe_moe_last_timing_ex(L, timing_p, offsetof(incmoe_moe_timing_t, dispatch_ms));
}
