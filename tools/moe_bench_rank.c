/*
 * moe_bench_rank.c - one rank of incmoe-moe-bench: joins a job per algorithm,
 * creates the layer, times its forwards in baseline and pipelined mode for
 * each routing and token count, checks them (cosine between the modes, the
 * fp64 reference on sample tokens) and writes one "result" line each.  Every
 * #ifdef of the CUDA backend is in its "backend's memory" section.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"

#include "base/clock.h"

#ifdef INCMOE_MOE_CUDA
#include <cuda_runtime_api.h>
#endif

/* The job of one algorithm (MB_ALGO_AUTO: an in-network communicator, beside which the
   layer holds the others); *p keeps the parameters, which the auto layer's path names. */
static incmoe_comm_t *join(const opts_t *o, int rank, int algo, incmoe_comm_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->switch_addr = o->switch_addr;
    p->job_id = o->job * NALGO + (uint64_t)algo;
    p->rank = rank;
    p->nranks = o->nranks;
    p->field_mask = INCMOE_COMM_PARAM_ALGO;
    p->algo = algo == MB_ALGO_AUTO ? INCMOE_ALGO_INC : (incmoe_algo_t)algo;
    incmoe_comm_t *comm;
    incmoe_status_t st = incmoe_comm_create(p, &comm);
    if (st != INCMOE_OK) {
        fprintf(stderr, "rank %d: joining the %s job failed: %s\n", rank,
                algo == INCMOE_ALGO_INC    ? "in-network"
                : algo == INCMOE_ALGO_RING ? "ring"
                : algo == INCMOE_ALGO_A2A  ? "a2a"
                                           : "in-network (auto)",
                incmoe_strerror(st));
        return NULL;
    }
    return comm;
}

/* Where the layer reads its inputs: host arrays, or device copies on a stream. */
typedef struct {
    void *x;
    int32_t *ids;
    float *w;
    void *stream;
} inputs_t;

/* What one rank allocates once, sized for the largest token count, and what it measures
   into; every pointer is NULL or owned, so bench_free undoes any part of bench_alloc. */
typedef struct {
    const opts_t *o;
    int rank;
    FILE *out;             /* the "result ..." lines */
    int maxT, nl;          /* the largest token count; this rank's experts (replicas too) */
    int *experts;          /* [nl] their ids, ascending */
    size_t es, wsz;        /* bytes of an element; of one expert matrix */
    uint8_t *wg, *wu, *wd; /* this rank's experts' gate, up and down matrices */
    void *x;               /* the current token count's inputs, in host memory */
    int32_t *ids;
    int32_t *serve; /* [maxT][k]: the rank serving each pair (mb_serving_ranks) */
    float *w;
    void *base;    /* the baseline's output, for the pipelined mode's check */
    void *outh;    /* the last forward's output, copied to host memory */
    double *times; /* [iters] layer times */
    double *ph[4]; /* [iters] each: exchange, AllGather, FFN, ReduceScatter */
    double *ref;   /* [H] the fp64 reference of one token */
    ref_scratch_t scratch;
    inputs_t in;
} bench_t;

/* malloc of at least one byte, so that an empty buffer never reads as a failed one. */
static void *buf_alloc(size_t bytes)
{
    return malloc(bytes > 0 ? bytes : 1);
}

static void bench_free(bench_t *b)
{
    free(b->scratch.a), free(b->scratch.g), free(b->scratch.m), free(b->ref);
    for (int i = 0; i < 4; i++)
        free(b->ph[i]);
    free(b->times), free(b->outh), free(b->base);
    free(b->w), free(b->serve), free(b->ids), free(b->x);
    free(b->wd), free(b->wu), free(b->wg), free(b->experts);
}

static int bench_alloc(const opts_t *o, int rank, FILE *out, bench_t *b)
{
    *b = (bench_t){.o = o, .rank = rank, .out = out};
    b->experts = buf_alloc(sizeof(int) * (size_t)o->E);
    b->nl = b->experts != NULL ? mb_placement_hosted(o, rank, b->experts) : 0;
    b->es = incmoe_dtype_size(o->dtype);
    b->wsz = (size_t)o->H * o->I * b->es;
    for (int i = 0; i < o->ntokens; i++)
        b->maxT = o->tokens[i] > b->maxT ? o->tokens[i] : b->maxT;
    size_t xs = (size_t)b->maxT * o->H * b->es, ks = (size_t)b->maxT * o->k;
    size_t ts = sizeof(double) * (size_t)o->iters;
    b->wg = buf_alloc(b->wsz * b->nl), b->wu = buf_alloc(b->wsz * b->nl);
    b->wd = buf_alloc(b->wsz * b->nl);
    b->x = buf_alloc(xs), b->ids = buf_alloc(sizeof(int32_t) * ks);
    b->serve = buf_alloc(sizeof(int32_t) * ks);
    b->w = buf_alloc(sizeof(float) * ks);
    b->base = buf_alloc(xs), b->outh = buf_alloc(xs), b->times = buf_alloc(ts);
    for (int i = 0; i < 4; i++)
        b->ph[i] = buf_alloc(ts);
    b->ref = buf_alloc(sizeof(double) * (size_t)o->H);
    b->scratch = (ref_scratch_t){buf_alloc(b->wsz), buf_alloc(sizeof(double) * (size_t)o->I),
                                 buf_alloc(sizeof(double) * (size_t)o->I)};
    const void *all[] = {b->experts, b->serve,     b->wg,        b->wu,       b->wd,
                         b->x,       b->ids,       b->w,         b->base,     b->outh,
                         b->times,   b->ph[0],     b->ph[1],     b->ph[2],    b->ph[3],
                         b->ref,     b->scratch.m, b->scratch.g, b->scratch.a};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (all[i] == NULL) {
            fprintf(stderr, "rank %d: out of memory\n", rank);
            bench_free(b);
            return -1;
        }
    }
    return 0;
}

/* This rank's experts' weights, as every rank and the reference derive them (a replica's
   the same as its expert's on any other rank). */
static void bench_fill_weights(bench_t *b)
{
    for (int le = 0; le < b->nl; le++) {
        int e = b->experts[le];
        mb_fill_weights(b->o, e, 0, b->wg + b->wsz * le);
        mb_fill_weights(b->o, e, 1, b->wu + b->wsz * le);
        mb_fill_weights(b->o, e, 2, b->wd + b->wsz * le);
    }
}

/* --- the backend's memory: every #ifdef of the CUDA backend is in this section */

#ifdef INCMOE_MOE_CUDA
static int cuda_fail(int rank, const char *what, cudaError_t e)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
    return 1;
}
#endif

/* Where the inputs will be: the host arrays (CPU), or a stream for device copies (CUDA). */
static int inputs_open(bench_t *b)
{
    b->in = (inputs_t){b->x, b->ids, b->w, NULL};
#ifdef INCMOE_MOE_CUDA
    if (b->o->backend == INCMOE_MOE_BACKEND_CUDA) {
        cudaStream_t s;
        cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e != cudaSuccess)
            return cuda_fail(b->rank, "cudaStreamCreate", e);
        b->in = (inputs_t){NULL, NULL, NULL, s};
    }
#endif
    return 0;
}

static void inputs_close(bench_t *b)
{
#ifdef INCMOE_MOE_CUDA
    if (b->o->backend == INCMOE_MOE_BACKEND_CUDA) {
        cudaFree(b->in.x), cudaFree(b->in.ids), cudaFree(b->in.w);
        cudaStreamDestroy((cudaStream_t)b->in.stream);
    }
#else
    (void)b;
#endif
}

/* For CUDA: device copies of the host inputs of T tokens (the CPU reads the host arrays). */
static int inputs_stage(bench_t *b, int T)
{
#ifdef INCMOE_MOE_CUDA
    const opts_t *o = b->o;
    inputs_t *in = &b->in;
    size_t xs = (size_t)T * o->H * b->es, ks = (size_t)T * o->k * 4;
    cudaError_t e;
    if (o->backend != INCMOE_MOE_BACKEND_CUDA)
        return 0;
    cudaFree(in->x), cudaFree(in->ids), cudaFree(in->w);
    in->x = in->ids = NULL, in->w = NULL;
    if ((e = cudaMalloc(&in->x, xs ? xs : 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&in->ids, ks ? ks : 1)) != cudaSuccess ||
        (e = cudaMalloc((void **)&in->w, ks ? ks : 1)) != cudaSuccess)
        return cuda_fail(b->rank, "cudaMalloc of the inputs", e);
    if ((e = cudaMemcpy(in->x, b->x, xs, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(in->ids, b->ids, ks, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(in->w, b->w, ks, cudaMemcpyHostToDevice)) != cudaSuccess)
        return cuda_fail(b->rank, "copying the inputs to the device", e);
#else
    (void)b, (void)T;
#endif
    return 0;
}

/* The output view copied to b->outh (it is device-accessible memory for CUDA). */
static int output_fetch(bench_t *b, const void *view, size_t bytes)
{
    if (b->o->backend == INCMOE_MOE_BACKEND_CPU) {
        memcpy(b->outh, view, bytes);
        return 0;
    }
#ifdef INCMOE_MOE_CUDA
    cudaError_t e = cudaMemcpy(b->outh, view, bytes, cudaMemcpyDefault);
    if (e != cudaSuccess)
        return cuda_fail(b->rank, "copying the outputs back", e);
    return 0;
#else
    return 1;
#endif
}

/* In-process CUDA ranks share one GPU: each gets at most 1/N of the SMs' worth of blocks. */
static void share_device(const opts_t *o, incmoe_moe_params_t *p)
{
#ifdef INCMOE_MOE_CUDA
    int sms = 0;
    if (o->backend != INCMOE_MOE_BACKEND_CUDA || !o->in_process ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
        return;
    int share = sms / o->nranks; /* blocks of one rank: gather + compute + reduce */
    int g = share >= 12 ? 2 : 1, r = share >= 12 ? 2 : 1;
    int c = share - g - r;
    p->config.gather_workers = g;
    p->config.reduce_workers = r;
    p->config.compute_workers = c < 1 ? 1 : c > INCMOE_MOE_MAX_WORKERS ? INCMOE_MOE_MAX_WORKERS : c;
#else
    (void)o, (void)p;
#endif
}

/* --- the layer and its measurements */

/* cp: the parameters comm was made with; with algo MB_ALGO_AUTO the layer's path leaves the
   algorithm, and the mode and routing forwards do not force, to the layer. */
static incmoe_moe_t *layer_create(const bench_t *b, incmoe_comm_t *comm, int algo,
                                  const incmoe_comm_params_t *cp)
{
    const opts_t *o = b->o;
    incmoe_moe_params_t p;
    incmoe_moe_params_init(&p);
    p.num_experts = o->E;
    p.top_k = o->k;
    p.hidden = o->H;
    p.intermediate = o->I;
    p.dtype = o->dtype;
    p.comm = comm;
    p.max_tokens = b->maxT;
    p.w_gate = b->wg;
    p.w_up = b->wu;
    p.w_down = b->wd;
    p.config.nbands = o->bands;
    p.backend = o->backend;
    share_device(o, &p);
    incmoe_moe_params_ext_t ext;
    memset(&ext, 0, sizeof(ext));
    if (algo == MB_ALGO_AUTO) {
        ext.field_mask = INCMOE_MOE_PARAM_PATH;
        ext.path = (incmoe_moe_path_t){.algo = INCMOE_MOE_ALGO_AUTO,
                                       .mode = INCMOE_MOE_AUTO,
                                       .routing = INCMOE_MOE_ROUTING_AUTO,
                                       .comm_params = cp};
    }
    if (o->decode_tokens > 0) {
        ext.field_mask |= INCMOE_MOE_PARAM_DECODE;
        ext.decode_tokens = o->decode_tokens;
    }
    incmoe_moe_placement_t pl = {o->place_offsets, o->place_ranks};
    if (o->place_offsets != NULL) {
        ext.field_mask |= INCMOE_MOE_PARAM_PLACEMENT;
        ext.placement = &pl;
    }
    incmoe_moe_t *L;
    incmoe_status_t st = incmoe_moe_create_ex(&p, ext.field_mask != 0 ? &ext : NULL, &L);
    if (st != INCMOE_OK) {
        fprintf(stderr, "rank %d: layer create failed: %s\n", b->rank, incmoe_strerror(st));
        return NULL;
    }
    return L;
}

/* "path ALGO/MODE/ROUTING": what a forward with something left to the layer ran (a layer
   without a path names no algorithm: the row's). */
static void path_text(result_t *res, const incmoe_moe_timing_t *tm)
{
    static const char *const algos[] = {"inc", "ring", "a2a"};
    int a = tm->algo >= 0 && tm->algo < 3 ? tm->algo : res->algo;
    snprintf(res->cfg, sizeof(res->cfg), "path %s/%s/%s", a >= 0 && a < 3 ? algos[a] : "comm",
             incmoe_moe_mode_name(tm->mode), incmoe_moe_routing_name(tm->routing));
}

/* The warm-up and timed forwards of one mode: the medians of the layer time and of the
   baseline's phases into res, the routing they ran, the last output's view into *out_p.  0;
   2 when the algorithm has no dispatch and combine for masked routing (refused on every rank
   before anything moved); 1 on a failure (said). */
static int time_forwards(bench_t *b, incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                         result_t *res, void **out_p)
{
    const opts_t *o = b->o;
    for (int it = 0; it < o->warmup + o->iters; it++) {
        double t0 = inc_now_s();
        incmoe_status_t st = incmoe_moe_forward_ex(L, f, out_p);
        double dt = inc_now_s() - t0;
        if (st == INCMOE_ERR_UNSUPPORTED && f->routing == INCMOE_MOE_ROUTING_MASKED)
            return 2;
        if (st != INCMOE_OK) {
            fprintf(stderr, "rank %d: forward (%s routing) failed: %s\n", b->rank,
                    incmoe_moe_routing_name(f->routing), incmoe_strerror(st));
            return 1;
        }
        incmoe_moe_timing_t tm;
        incmoe_moe_last_timing_ex(L, &tm, sizeof(tm));
        res->used = (int)tm.routing;
        res->nbands = tm.nbands;
        if (res->algo == MB_ALGO_AUTO || res->mode == INCMOE_MOE_AUTO)
            path_text(res, &tm);
        if (it < o->warmup)
            continue;
        int masked = tm.routing == INCMOE_MOE_ROUTING_MASKED;
        b->times[it - o->warmup] = dt;
        b->ph[0][it - o->warmup] = tm.exchange_ms;
        b->ph[1][it - o->warmup] = masked ? tm.dispatch_ms : tm.allgather_ms;
        b->ph[2][it - o->warmup] = tm.ffn_ms;
        b->ph[3][it - o->warmup] = masked ? tm.combine_ms : tm.reducescatter_ms;
    }
    res->ms = mb_median(b->times, o->iters) * 1e3;
    res->ex_ms = mb_median(b->ph[0], o->iters);
    res->out_ms = mb_median(b->ph[1], o->iters);
    res->ffn_ms = mb_median(b->ph[2], o->iters);
    res->back_ms = mb_median(b->ph[3], o->iters);
    return 0;
}

/* The worst per-token cosine similarity of the pipelined output (b->outh) to the baseline's. */
static double cosine_min(const bench_t *b, int T)
{
    const opts_t *o = b->o;
    double worst = 1;
    for (int t = 0; t < T; t++) {
        double ab = 0, aa = 0, bb = 0;
        for (int h = 0; h < o->H; h++) {
            double u = mb_get(b->outh, (size_t)t * o->H + h, o->dtype);
            double v = mb_get(b->base, (size_t)t * o->H + h, o->dtype);
            ab += u * v, aa += u * u, bb += v * v;
        }
        double c = (aa == 0 && bb == 0) ? 1 : ab / sqrt(aa * bb);
        worst = c < worst ? c : worst;
    }
    return worst;
}

/* The worst relative error of the output against fp64 on two sample tokens: first and last. */
static double reference_error(const bench_t *b, int T)
{
    const opts_t *o = b->o;
    double worst = 0;
    for (int s = 0; s < 2 && T > 0; s++) {
        int t = s == 0 ? 0 : T - 1;
        double en = 0, rn = 0;
        mb_reference_token(o, b->x, b->ids, b->w, t, &b->scratch, b->ref);
        for (int h = 0; h < o->H; h++) {
            double d = mb_get(b->outh, (size_t)t * o->H + h, o->dtype) - b->ref[h];
            en += d * d, rn += b->ref[h] * b->ref[h];
        }
        double e = sqrt(en / (rn > 0 ? rn : 1));
        worst = e > worst ? e : worst;
    }
    return worst;
}

static void result_write(FILE *out, const result_t *res)
{
    fprintf(out, "result %d %d %d %d %d %.6f %.9f %.3e %.6f %.6f %.6f %.6f %.6f %.6f %s\n",
            res->algo, res->routing, res->used, res->ti, res->mode, res->ms, res->cos_min,
            res->ref_err, res->ex_ms, res->out_ms, res->ffn_ms, res->back_ms, res->kbar, res->ufrac,
            res->cfg);
    fflush(out);
}

/* A mode's outputs (in b->outh): baseline mode's kept as b->base; another mode's checked
   against them where baseline ran before, and against fp64 on sample tokens. */
static void check_mode(bench_t *b, int T, int have_base, result_t *res)
{
    const opts_t *o = b->o;
    if (res->mode == INCMOE_MOE_BASELINE) {
        memcpy(b->base, b->outh, (size_t)T * o->H * b->es);
        return;
    }
    if (!o->verify)
        return;
    if (have_base)
        res->cos_min = cosine_min(b, T);
    res->ref_err = reference_error(b, T);
}

/* The pipelined configuration column: the layer's for these counts with the bands the
   forwards ran (masked routing's follow its pairs), unless the path they ran says more
   (auto). */
static void config_column(incmoe_moe_t *L, const int *counts, result_t *res)
{
    if (res->cfg[0] != '\0')
        return;
    if (res->mode != INCMOE_MOE_PIPELINED) {
        snprintf(res->cfg, sizeof(res->cfg), "-");
        return;
    }
    incmoe_moe_config_t c;
    incmoe_moe_config_for(L, counts, &c);
    if (res->nbands > 0)
        c.nbands = res->nbands;
    if (res->used == INCMOE_MOE_ROUTING_MASKED) /* one combine a band (incmoe_moe.h) */
        c.reduce_workers = 1, c.tail_bands = 0;
    incmoe_moe_config_str(&c, res->cfg, sizeof(res->cfg));
}

/* One token count (index ti) with one routing in each mode of --mode: timed, then checked,
   then written out. */
static int run_routing(bench_t *b, incmoe_moe_t *L, int algo, int routing, int ti)
{
    const opts_t *o = b->o;
    int T = o->tokens[ti], counts[MAX_RANKS], have_base = 0;
    for (int r = 0; r < o->nranks; r++)
        counts[r] = T;
    incmoe_moe_forward_params_t f = {
        .field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS |
                      INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS | INCMOE_MOE_FWD_ROUTING |
                      (b->in.stream ? INCMOE_MOE_FWD_STREAM : 0),
        .x = b->in.x,
        .topk_ids = b->in.ids,
        .topk_weights = b->in.w,
        .counts = counts,
        .stream = b->in.stream,
        .routing = (incmoe_moe_routing_t)routing};
    for (int mi = 0; mi < o->nmodes; mi++) {
        result_t res = {.algo = algo,
                        .routing = routing,
                        .ti = ti,
                        .mode = o->modes[mi],
                        .cos_min = 1,
                        .ref_err = 0};
        mb_routing_stats(o, b->rank, T, b->serve, &res.kbar, &res.ufrac);
        void *out_p = NULL;
        f.mode = (incmoe_moe_mode_t)res.mode;
        int rc = time_forwards(b, L, &f, &res, &out_p);
        if (rc == 2) { /* no dispatch and combine: the row says so */
            res.ms = -1;
            snprintf(res.cfg, sizeof(res.cfg), "-");
            for (int mj = 0; mj < o->nmodes; mj++)
                res.mode = o->modes[mj], result_write(b->out, &res);
            return 0;
        }
        if (rc != 0)
            return 1;
        config_column(L, counts, &res);
        if (output_fetch(b, out_p, (size_t)T * o->H * b->es) != 0)
            return 1;
        check_mode(b, T, have_base, &res);
        have_base |= res.mode == INCMOE_MOE_BASELINE;
        result_write(b->out, &res);
    }
    return 0;
}

/* One token count (index ti) with every routing. */
static int run_point(bench_t *b, incmoe_moe_t *L, int algo, int ti)
{
    mb_make_tokens(b->o, b->rank, b->o->tokens[ti], b->x, b->ids, b->w);
    mb_serving_ranks(b->o, b->rank, b->o->tokens[ti], b->ids, b->serve);
    if (inputs_stage(b, b->o->tokens[ti]) != 0)
        return 1;
    int rc = 0;
    for (int i = 0; i < b->o->nroutings && rc == 0; i++)
        rc = run_routing(b, L, algo, b->o->routings[i], ti);
    return rc;
}

/* Every token count on one algorithm's communicator and layer. */
static int run_algo(bench_t *b, int algo, int first)
{
    int rc = 1;
    incmoe_comm_params_t cp;
    incmoe_comm_t *comm = join(b->o, b->rank, algo, &cp);
    if (comm == NULL)
        return 1;
    incmoe_moe_t *L = layer_create(b, comm, algo, &cp);
    if (L == NULL)
        goto out_destroy_comm;
    if (b->rank == 0 && first) {
        char desc[256];
        incmoe_moe_backend_str(L, desc, sizeof(desc));
        fprintf(stderr, "incmoe-moe-bench: backend %s\n", desc);
    }
    rc = 0;
    for (int ti = 0; ti < b->o->ntokens && rc == 0; ti++)
        rc = run_point(b, L, algo, ti);
    incmoe_moe_destroy(L);
out_destroy_comm:
    incmoe_comm_destroy(comm);
    return rc;
}

/* Runs every measurement of this rank; writes "result ..." lines to out. */
int mb_run_rank(const opts_t *o, int rank, FILE *out)
{
    bench_t b;
    int rc = 1;
    if (bench_alloc(o, rank, out, &b) != 0)
        return 1;
    if (inputs_open(&b) != 0)
        goto out_free_bench;
    bench_fill_weights(&b);
    rc = 0;
    for (int ai = 0; ai < o->nalgos && rc == 0; ai++)
        rc = run_algo(&b, o->algos[ai], ai == 0);
    inputs_close(&b);
out_free_bench:
    bench_free(&b);
    return rc;
}
