/*
 * moe_bench.c - incmoe-moe-bench, the INC-MoE layer benchmark (paper Figures 1 and 7).
 *
 *   incmoe-moe-bench [-N 4] [-t 64,256,1024] [-E 16] [-k 4] [-H 512] [-I 256] [-d float]
 *                    [-b BANDS] [--model olmoe] [--algo inc,ring,a2a] [--routing full,masked]
 *                    [--route uniform|zipf:S] [--seed S] [-n 5] [-w 2] [--link-mbps BW]
 *                    [--depth D] [--no-verify] [--backend cpu|cuda] [--ranks-in-process]
 *   incmoe-moe-bench --switch HOST:PORT --rank R -N N [--job ID] ...  (one rank of a job)
 *
 * For each collective algorithm, routing and token count per rank it runs the
 * MoE layer in baseline mode (AllGather, every expert, ReduceScatter: vLLM's
 * default expert-parallel path; with masked routing dispatch, every expert,
 * combine: the all-to-all baseline on the a2a algorithm) and in pipelined mode
 * (INC-MoE's band pipeline), checks the outputs (per-token cosine similarity
 * between the modes and a relative error against an fp64 evaluation of
 * Equation (1) on sample tokens), and prints the layer time, tokens/s per rank
 * and the speedup over the ring baseline, then the ratios the MoE targets of
 * issue 18 name.  Embedded (no --rank) it starts incmoe-switchd on loopback and
 * N rank processes itself; with --rank it is one rank of a job whose ranks all
 * run the same command (tools/testbed run), and rank 0 prints the table.
 *
 * Routing (--route, seeded by --seed): uniform draws a token's k distinct
 * experts uniformly; zipf:S draws them without replacement in proportion to
 * expert e's popularity (e+1)^-S.  The experts are placed contiguously (rank r
 * holds experts r*E/N ... (r+1)*E/N - 1, so rank 0 holds the most popular):
 * tools/incmoe-model's --placement contiguous.
 *
 * Layer time is the median over the timed forwards of the slowest rank.
 *
 * --backend cuda runs the layer's CUDA backend (inputs in device memory, one
 * stream per rank); --ranks-in-process runs the N ranks as threads of this
 * process instead of processes, so with CUDA their persistent kernels run
 * concurrently on one GPU, each rank on its own stream with at most 1/N of
 * the SMs' worth of role blocks.  The exit status is non-zero when a check
 * fails: pipelined vs baseline cosine >= 0.99999 per token, and against fp64
 * a relative error <= 1e-4 (float), 5e-3 (half), 3e-2 (bfloat16).  These hold
 * for the CUDA backend as well, whose tensor-core path rounds the SwiGLU rows
 * to the datatype between its two GEMMs (the CPU keeps them in fp32).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "incmoe/incmoe.h"
#include "base/config.h"
#include "base/dtype.h"
#include "args.h"
#include "incmoe/incmoe_moe.h"
#include "launch.h"
#include "switchd_find.h"
#include "base/clock.h"

#ifdef INCMOE_MOE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_T     32
#define MAX_RANKS 64
#define NALGO     3 /* results are indexed by incmoe_algo_t: inc, ring, a2a */
#define NROUTING  3 /* and by incmoe_moe_routing_t: full, masked, auto */

typedef struct {
    int nranks, rank; /* rank -1: embedded */
    int E, k, H, I;
    incmoe_dtype_t dtype;
    int tokens[MAX_T], ntokens;
    int bands, iters, warmup, verify;
    int depth; /* INCMOE_MOE_DEPTH, 0: the setting's */
    int algos[NALGO], nalgos;
    int routings[NROUTING], nroutings;
    double zipf;   /* --route zipf:S: S; 0 uniform */
    uint64_t seed; /* --seed: 0 draws the tokens as before routing existed */
    const char *switch_addr;
    uint64_t job;
    double link_mbps;
    const char *model;
    incmoe_moe_backend_t backend;
    int in_process; /* ranks as threads of this process */
} opts_t;

/* One measurement: an algorithm, a routing, a token count, a mode. */
typedef struct {
    int algo, routing, ti, mode;
    int used;       /* the routing the forwards ran (auto resolved) */
    double ms;      /* median layer time; -1: the algorithm has no dispatch and combine */
    double cos_min; /* pipelined vs baseline (pipelined rows only) */
    double ref_err; /* worst sample-token relative error against fp64 */
    /* Baseline phases (medians): header exchange, AllGather or dispatch, FFN, ReduceScatter
       or combine. */
    double ex_ms, out_ms, ffn_ms, back_ms;
    /* This rank's tokens: other ranks a token goes to (k-bar), share needed elsewhere (u). */
    double kbar, ufrac;
    char cfg[96];
} result_t;

/* ------------------------------------------------------------ problem data */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A uniform value in [-1, 1) that any rank can recompute from (stream, index). */
static double uval(uint64_t stream, uint64_t i)
{
    return (double)(mix(stream * 0x100000001b3ull ^ mix(i)) >> 11) * (2.0 / 9007199254740992.0) -
           1.0;
}

static void put(void *base, size_t i, double v, incmoe_dtype_t dt)
{
    if (dt == INCMOE_FLOAT16)
        ((uint16_t *)base)[i] = inc_dtype_float_to_half((float)v);
    else if (dt == INCMOE_BFLOAT16)
        ((uint16_t *)base)[i] = inc_dtype_float_to_bf16((float)v);
    else
        ((float *)base)[i] = (float)v;
}

static double get(const void *base, size_t i, incmoe_dtype_t dt)
{
    if (dt == INCMOE_FLOAT16)
        return inc_dtype_half_to_float(((const uint16_t *)base)[i]);
    if (dt == INCMOE_BFLOAT16)
        return inc_dtype_bf16_to_float(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

/* Weight streams: expert e's gate, up and down matrices. */
static uint64_t wstream(int e, int which)
{
    return 1000u + (uint64_t)e * 3u + (uint64_t)which;
}

static double wscale(const opts_t *o, int which)
{
    return which == 2 ? 2.0 / sqrt(o->I) : 2.0 / sqrt(o->H);
}

static void fill_weights(const opts_t *o, int e, int which, void *dst)
{
    size_t n = (size_t)o->H * o->I;
    double s = wscale(o, which);
    for (size_t i = 0; i < n; i++)
        put(dst, i, uval(wstream(e, which), i) * s, o->dtype);
}

/* Token t's k distinct experts by popularity (e+1)^-S, without replacement, into id[]. */
static void zipf_experts(const opts_t *o, uint64_t sx, int t, int32_t *id)
{
    double total = 0;
    for (int e = 0; e < o->E; e++)
        total += pow(e + 1, -o->zipf);
    for (int a = 0; a < o->k; a++) {
        double left = total * (0.5 + 0.5 * uval(sx + 2, (uint64_t)t * o->k + a));
        int32_t pick = -1;
        for (int e = 0; e < o->E; e++) {
            int taken = 0;
            for (int b = 0; b < a; b++)
                taken |= id[b] == e;
            if (taken)
                continue;
            pick = e; /* the last one left, should rounding leave some weight over */
            if ((left -= pow(e + 1, -o->zipf)) < 0)
                break;
        }
        id[a] = pick;
        total -= pow(pick + 1, -o->zipf);
    }
}

/* Token t's k distinct experts uniformly, into id[]. */
static void uniform_experts(const opts_t *o, uint64_t sx, int t, int32_t *id)
{
    for (int a = 0; a < o->k; a++) {
        int32_t e;
        int dup;
        uint64_t c = 0;
        do {
            e = (int32_t)(mix(sx ^ mix(((uint64_t)t << 8 | (uint64_t)a) + (c++ << 40))) %
                          (uint64_t)o->E);
            dup = 0;
            for (int b = 0; b < a; b++)
                dup |= id[b] == e;
        } while (dup);
        id[a] = e;
    }
}

/* Token inputs and routing of rank r at token count T (deterministic for the seed). */
static void make_tokens(const opts_t *o, int r, int T, void *x, int32_t *ids, float *w)
{
    uint64_t sx = mix(77 + (uint64_t)r * 1315423911u + (uint64_t)T + o->seed * 0x9e3779b9u);
    for (size_t i = 0; i < (size_t)T * o->H; i++)
        put(x, i, uval(sx, i), o->dtype);
    for (int t = 0; t < T; t++) {
        if (o->zipf > 0)
            zipf_experts(o, sx, t, ids + (size_t)t * o->k);
        else
            uniform_experts(o, sx, t, ids + (size_t)t * o->k);
        /* Weights as a router's softmax would give (not renormalised here). */
        for (int a = 0; a < o->k; a++)
            w[(size_t)t * o->k + a] =
                (float)(0.5 + 0.5 * uval(sx + 1, (uint64_t)t * o->k + a)) / (float)o->k;
    }
}

/* This rank's T tokens under the contiguous placement: the other ranks a token goes to, on
   average (k-bar), and the share of tokens some other rank needs (u). */
static void routing_stats(const opts_t *o, int rank, int T, const int32_t *ids, double *kbar_p,
                          double *ufrac_p)
{
    uint64_t pairs = 0, routed = 0;
    int per = o->E / o->nranks;
    for (int t = 0; t < T; t++) {
        char seen[MAX_RANKS] = {0};
        int others = 0;
        for (int a = 0; a < o->k; a++) {
            int r = ids[(size_t)t * o->k + a] / per;
            if (r != rank && !seen[r])
                seen[r] = 1, others++;
        }
        pairs += (uint64_t)others;
        routed += others > 0;
    }
    *kbar_p = T > 0 ? (double)pairs / T : 0;
    *ufrac_p = T > 0 ? (double)routed / T : 0;
}

/* What reference_token computes in: an expert's matrix and its SwiGLU rows. */
typedef struct {
    void *m;   /* H x I of the datatype */
    double *g; /* [I] gate */
    double *a; /* [I] activation */
} ref_scratch_t;

/* fp64 Equation (1) for token t of the inputs, recomputing the experts' weights into s. */
static void reference_token(const opts_t *o, const void *x, const int32_t *ids, const float *w,
                            int t, const ref_scratch_t *s, double *y)
{
    double *g = s->g, *a = s->a;
    void *m = s->m;
    memset(y, 0, sizeof(double) * (size_t)o->H);
    for (int c = 0; c < o->k; c++) {
        int e = ids[(size_t)t * o->k + c];
        fill_weights(o, e, 0, m);
        memset(g, 0, sizeof(double) * (size_t)o->I);
        for (int i = 0; i < o->I; i++)
            for (int h = 0; h < o->H; h++)
                g[i] +=
                    get(m, (size_t)i * o->H + h, o->dtype) * get(x, (size_t)t * o->H + h, o->dtype);
        fill_weights(o, e, 1, m);
        for (int i = 0; i < o->I; i++) {
            double u = 0;
            for (int h = 0; h < o->H; h++)
                u +=
                    get(m, (size_t)i * o->H + h, o->dtype) * get(x, (size_t)t * o->H + h, o->dtype);
            a[i] = g[i] / (1.0 + exp(-g[i])) * u;
        }
        fill_weights(o, e, 2, m);
        for (int h = 0; h < o->H; h++) {
            double acc = 0;
            for (int i = 0; i < o->I; i++)
                acc += get(m, (size_t)h * o->I + i, o->dtype) * a[i];
            y[h] += w[(size_t)t * o->k + c] * acc;
        }
    }
}

/* --------------------------------------------------------------- one rank */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n samples (sorts them). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static incmoe_comm_t *join(const opts_t *o, int rank, int algo)
{
    incmoe_comm_params_t p;
    memset(&p, 0, sizeof(p));
    p.switch_addr = o->switch_addr;
    p.job_id = o->job * NALGO + (uint64_t)algo;
    p.rank = rank;
    p.nranks = o->nranks;
    p.field_mask = INCMOE_COMM_PARAM_ALGO;
    p.algo = (incmoe_algo_t)algo;
    incmoe_comm_t *comm;
    incmoe_status_t st = incmoe_comm_create(&p, &comm);
    if (st != INCMOE_OK) {
        fprintf(stderr, "rank %d: joining the %s job failed: %s\n", rank,
                algo == INCMOE_ALGO_INC    ? "in-network"
                : algo == INCMOE_ALGO_RING ? "ring"
                                           : "a2a",
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
    int maxT, nl;          /* the largest token count; this rank's experts */
    size_t es, wsz;        /* bytes of an element; of one expert matrix */
    uint8_t *wg, *wu, *wd; /* this rank's experts' gate, up and down matrices */
    void *x;               /* the current token count's inputs, in host memory */
    int32_t *ids;
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
    free(b->w), free(b->ids), free(b->x);
    free(b->wd), free(b->wu), free(b->wg);
}

static int bench_alloc(const opts_t *o, int rank, FILE *out, bench_t *b)
{
    *b = (bench_t){.o = o, .rank = rank, .out = out, .nl = o->E / o->nranks};
    b->es = incmoe_dtype_size(o->dtype);
    b->wsz = (size_t)o->H * o->I * b->es;
    for (int i = 0; i < o->ntokens; i++)
        b->maxT = o->tokens[i] > b->maxT ? o->tokens[i] : b->maxT;
    size_t xs = (size_t)b->maxT * o->H * b->es, ks = (size_t)b->maxT * o->k;
    size_t ts = sizeof(double) * (size_t)o->iters;
    b->wg = buf_alloc(b->wsz * b->nl), b->wu = buf_alloc(b->wsz * b->nl);
    b->wd = buf_alloc(b->wsz * b->nl);
    b->x = buf_alloc(xs), b->ids = buf_alloc(sizeof(int32_t) * ks);
    b->w = buf_alloc(sizeof(float) * ks);
    b->base = buf_alloc(xs), b->outh = buf_alloc(xs), b->times = buf_alloc(ts);
    for (int i = 0; i < 4; i++)
        b->ph[i] = buf_alloc(ts);
    b->ref = buf_alloc(sizeof(double) * (size_t)o->H);
    b->scratch = (ref_scratch_t){buf_alloc(b->wsz), buf_alloc(sizeof(double) * (size_t)o->I),
                                 buf_alloc(sizeof(double) * (size_t)o->I)};
    const void *all[] = {b->wg,    b->wu,   b->wd,        b->x,         b->ids,      b->w,
                         b->base,  b->outh, b->times,     b->ph[0],     b->ph[1],    b->ph[2],
                         b->ph[3], b->ref,  b->scratch.m, b->scratch.g, b->scratch.a};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (all[i] == NULL) {
            fprintf(stderr, "rank %d: out of memory\n", rank);
            bench_free(b);
            return -1;
        }
    }
    return 0;
}

/* This rank's experts' weights, as every rank and the reference derive them. */
static void bench_fill_weights(bench_t *b)
{
    for (int le = 0; le < b->nl; le++) {
        int e = b->rank * b->nl + le;
        fill_weights(b->o, e, 0, b->wg + b->wsz * le);
        fill_weights(b->o, e, 1, b->wu + b->wsz * le);
        fill_weights(b->o, e, 2, b->wd + b->wsz * le);
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

static incmoe_moe_t *layer_create(const bench_t *b, incmoe_comm_t *comm)
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
    incmoe_moe_t *L;
    incmoe_status_t st = incmoe_moe_create(&p, &L);
    if (st != INCMOE_OK) {
        fprintf(stderr, "rank %d: layer create failed: %s\n", b->rank, incmoe_strerror(st));
        return NULL;
    }
    return L;
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
        if (it < o->warmup)
            continue;
        int masked = tm.routing == INCMOE_MOE_ROUTING_MASKED;
        b->times[it - o->warmup] = dt;
        b->ph[0][it - o->warmup] = tm.exchange_ms;
        b->ph[1][it - o->warmup] = masked ? tm.dispatch_ms : tm.allgather_ms;
        b->ph[2][it - o->warmup] = tm.ffn_ms;
        b->ph[3][it - o->warmup] = masked ? tm.combine_ms : tm.reducescatter_ms;
    }
    res->ms = median(b->times, o->iters) * 1e3;
    res->ex_ms = median(b->ph[0], o->iters);
    res->out_ms = median(b->ph[1], o->iters);
    res->ffn_ms = median(b->ph[2], o->iters);
    res->back_ms = median(b->ph[3], o->iters);
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
            double u = get(b->outh, (size_t)t * o->H + h, o->dtype);
            double v = get(b->base, (size_t)t * o->H + h, o->dtype);
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
        reference_token(o, b->x, b->ids, b->w, t, &b->scratch, b->ref);
        for (int h = 0; h < o->H; h++) {
            double d = get(b->outh, (size_t)t * o->H + h, o->dtype) - b->ref[h];
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

/* One token count (index ti) with one routing in both modes: timed, then checked, then
   written out. */
static int run_routing(bench_t *b, incmoe_moe_t *L, int algo, int routing, int ti)
{
    const opts_t *o = b->o;
    int T = o->tokens[ti], counts[MAX_RANKS];
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
    for (int mode = INCMOE_MOE_BASELINE; mode <= INCMOE_MOE_PIPELINED; mode++) {
        result_t res = {
            .algo = algo, .routing = routing, .ti = ti, .mode = mode, .cos_min = 1, .ref_err = 0};
        routing_stats(o, b->rank, T, b->ids, &res.kbar, &res.ufrac);
        void *out_p = NULL;
        f.mode = (incmoe_moe_mode_t)mode;
        int rc = time_forwards(b, L, &f, &res, &out_p);
        if (rc == 2) { /* no dispatch and combine: the row says so */
            res.ms = -1;
            snprintf(res.cfg, sizeof(res.cfg), "-");
            for (res.mode = INCMOE_MOE_BASELINE; res.mode <= INCMOE_MOE_PIPELINED; res.mode++)
                result_write(b->out, &res);
            return 0;
        }
        if (rc != 0)
            return 1;
        if (mode == INCMOE_MOE_PIPELINED) {
            incmoe_moe_config_t c;
            incmoe_moe_config_for(L, counts, &c);
            if (res.used == INCMOE_MOE_ROUTING_MASKED) /* one combine a band (incmoe_moe.h) */
                c.reduce_workers = 1, c.tail_bands = 0;
            incmoe_moe_config_str(&c, res.cfg, sizeof(res.cfg));
        } else {
            snprintf(res.cfg, sizeof(res.cfg), "-");
        }
        if (output_fetch(b, out_p, (size_t)T * o->H * b->es) != 0)
            return 1;
        if (mode == INCMOE_MOE_BASELINE) {
            memcpy(b->base, b->outh, (size_t)T * o->H * b->es);
        } else if (o->verify) {
            res.cos_min = cosine_min(b, T);
            res.ref_err = reference_error(b, T);
        }
        result_write(b->out, &res);
    }
    return 0;
}

/* One token count (index ti) with every routing. */
static int run_point(bench_t *b, incmoe_moe_t *L, int algo, int ti)
{
    make_tokens(b->o, b->rank, b->o->tokens[ti], b->x, b->ids, b->w);
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
    incmoe_comm_t *comm = join(b->o, b->rank, algo);
    if (comm == NULL)
        return 1;
    incmoe_moe_t *L = layer_create(b, comm);
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
static int run_rank(const opts_t *o, int rank, FILE *out)
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

/* ------------------------------------------------------------------ table */

static double tol_of(incmoe_dtype_t dt)
{
    return dt == INCMOE_BFLOAT16 ? 3e-2 : dt == INCMOE_FLOAT16 ? 5e-3 : 1e-4;
}

static const char *algo_name(int algo)
{
    return algo == INCMOE_ALGO_RING ? "ring" : algo == INCMOE_ALGO_A2A ? "a2a" : "inc";
}

/* Every rank's results folded per (algorithm, routing, token count): the slowest rank's times
   and the worst rank's checks, as the table prints them. */
typedef struct {
    int have[NALGO][NROUTING][MAX_T][2];  /* per mode: some rank reported it */
    double ms[NALGO][NROUTING][MAX_T][2]; /* per mode: layer time (-1: no dispatch/combine) */
    /* baseline: exchange, AllGather or dispatch, FFN, ReduceScatter or combine */
    double phase[NALGO][NROUTING][MAX_T][4];
    double cos[NALGO][NROUTING][MAX_T], err[NALGO][NROUTING][MAX_T];    /* pipelined */
    double kbar[NALGO][NROUTING][MAX_T], ufrac[NALGO][NROUTING][MAX_T]; /* mean over ranks */
    int nranks[NALGO][NROUTING][MAX_T];                                 /* that reported them */
    int used[NALGO][NROUTING][MAX_T];                                   /* the routing run */
    char cfg[NALGO][NROUTING][MAX_T][96];
} table_t;

static void table_fold(table_t *tb, const result_t *all, int n)
{
    memset(tb, 0, sizeof(*tb));
    for (int a = 0; a < NALGO; a++)
        for (int g = 0; g < NROUTING; g++)
            for (int t = 0; t < MAX_T; t++)
                tb->cos[a][g][t] = 1;
    for (int i = 0; i < n; i++) {
        const result_t *r = &all[i];
        const int a = r->algo, g = r->routing, t = r->ti;
        /* The slowest rank sets the layer time. */
        if (!tb->have[a][g][t][r->mode] || r->ms > tb->ms[a][g][t][r->mode])
            tb->ms[a][g][t][r->mode] = r->ms;
        tb->have[a][g][t][r->mode] = 1;
        tb->used[a][g][t] = r->used;
        if (r->mode == INCMOE_MOE_BASELINE) {
            double v[4] = {r->ex_ms, r->out_ms, r->ffn_ms, r->back_ms};
            for (int k = 0; k < 4; k++)
                tb->phase[a][g][t][k] = fmax(tb->phase[a][g][t][k], v[k]);
            tb->kbar[a][g][t] += r->kbar;
            tb->ufrac[a][g][t] += r->ufrac;
            tb->nranks[a][g][t]++;
        } else {
            tb->cos[a][g][t] = fmin(tb->cos[a][g][t], r->cos_min);
            tb->err[a][g][t] = fmax(tb->err[a][g][t], r->ref_err);
            snprintf(tb->cfg[a][g][t], sizeof(tb->cfg[0][0][0]), "%s", r->cfg);
        }
    }
    for (int a = 0; a < NALGO; a++)
        for (int g = 0; g < NROUTING; g++)
            for (int t = 0; t < MAX_T; t++)
                if (tb->nranks[a][g][t] > 0) {
                    tb->kbar[a][g][t] /= tb->nranks[a][g][t];
                    tb->ufrac[a][g][t] /= tb->nranks[a][g][t];
                }
}

/* The ideal pipeline: max(communication, FFN) plus the header exchange, from the baseline's
   phases ph.  In the network the outbound collective (AllGather or dispatch) and the inbound
   one (ReduceScatter or combine) in flight together share each link direction: the one alone
   moves max(u, k) rows on its busier direction, the two together u + k (u: rows a rank sends
   up once, k: rows it receives, per token; full routing u = 1, k = N - 1, so N/(N-1) of the
   longer one alone, paper section 3.2).  Point to point (ring, a2a) each already loads both
   directions, so they add up. */
static double ideal_ms(int algo, int masked, int N, double kbar, double ufrac, const double *ph)
{
    double u = masked ? ufrac : 1, k = masked ? kbar : N - 1;
    double comm = algo == INCMOE_ALGO_INC && fmax(u, k) > 0
                      ? fmax(ph[1], ph[3]) * (u + k) / fmax(u, k)
                      : ph[1] + ph[3];
    return fmax(comm, ph[2]) + ph[0];
}

static void table_header(const opts_t *o)
{
    printf(
        "\nincmoe-moe-bench: N=%d E=%d k=%d H=%d I=%d %s%s%s, %s backend%s, route %s (experts "
        "placed contiguously), median of %d forwards (slowest rank)\n",
        o->nranks, o->E, o->k, o->H, o->I, incmoe_dtype_name(o->dtype), o->model ? ", model " : "",
        o->model ? o->model : "", o->backend == INCMOE_MOE_BACKEND_CUDA ? "cuda" : "cpu",
        o->in_process ? ", ranks in one process" : "", o->zipf > 0 ? "zipf" : "uniform", o->iters);
    if (o->zipf > 0)
        printf("route zipf:%g, seed %llu\n", o->zipf, (unsigned long long)o->seed);
    printf("%8s %-5s %-13s %10s %10s %11s %11s %9s %9s %6s %9s %10s %10s %9s  %s\n", "tok/rank",
           "algo", "routing", "base_ms", "pipe_ms", "base_tok/s", "pipe_tok/s", "pipe/base",
           "vs_ring_b", "k-bar", "ideal_ms", "pipe/ideal", "min_cos", "ref_err",
           "pipelined config");
}

/* The routing column: the one asked for, and for auto the one it ran. */
static void routing_label(int asked, int used, char *buf, size_t len)
{
    if (asked == INCMOE_MOE_ROUTING_AUTO)
        snprintf(buf, len, "auto>%s", incmoe_moe_routing_name((incmoe_moe_routing_t)used));
    else
        snprintf(buf, len, "%s", incmoe_moe_routing_name((incmoe_moe_routing_t)asked));
}

/* The row of algorithm a with routing g at token count index t: 1 when its outputs passed the
   checks (or the algorithm has no dispatch and combine, which the row says). */
static int table_row(const opts_t *o, const table_t *tb, int t, int a, int g)
{
    int T = o->tokens[t];
    char route[24];
    routing_label(g, tb->used[a][g][t], route, sizeof(route));
    if (!tb->have[a][g][t][0] || !tb->have[a][g][t][1]) {
        printf("%8d %-5s %-13s   (missing results)\n", T, algo_name(a), route);
        return 0;
    }
    double b = tb->ms[a][g][t][0], p = tb->ms[a][g][t][1];
    if (b < 0 || p < 0) {
        printf("%8d %-5s %-13s   (the algorithm has no dispatch and combine in this build)\n", T,
               algo_name(a), route);
        return 1;
    }
    int good =
        o->verify ? (tb->cos[a][g][t] >= 0.99999 && tb->err[a][g][t] <= tol_of(o->dtype)) : 1;
    char vs[32] = "-";
    const int full = INCMOE_MOE_ROUTING_FULL;
    double ringb =
        tb->have[INCMOE_ALGO_RING][full][t][0] ? tb->ms[INCMOE_ALGO_RING][full][t][0] : 0;
    if (ringb > 0)
        snprintf(vs, sizeof(vs), "%.2fx", ringb / p);
    int masked = tb->used[a][g][t] == INCMOE_MOE_ROUTING_MASKED;
    double ideal =
        ideal_ms(a, masked, o->nranks, tb->kbar[a][g][t], tb->ufrac[a][g][t], tb->phase[a][g][t]);
    printf("%8d %-5s %-13s %10.3f %10.3f %11.0f %11.0f %8.2fx %9s %6.2f %9.3f %9.2fx %10.7f "
           "%9.2e  %s%s\n",
           T, algo_name(a), route, b, p, T / (b * 1e-3), T / (p * 1e-3), b / p, vs,
           tb->kbar[a][g][t], ideal, p / ideal, tb->cos[a][g][t], tb->err[a][g][t],
           tb->cfg[a][g][t], good ? "" : "  VERIFY FAILED");
    return good;
}

/* A time of the table, or -1 where it has none (not run, or no dispatch and combine). */
static double table_ms(const table_t *tb, int a, int g, int t, int mode)
{
    return tb->have[a][g][t][mode] ? tb->ms[a][g][t][mode] : -1;
}

/* The MoE targets of issue 18 that this run's rows give: pipelined masked in-network against
   the a2a baseline (dispatch, FFN, combine in sequence) and against pipelined full
   in-network. */
static void print_targets(const opts_t *o, const table_t *tb)
{
    const int inc = INCMOE_ALGO_INC, a2a = INCMOE_ALGO_A2A;
    const int masked = INCMOE_MOE_ROUTING_MASKED, full = INCMOE_MOE_ROUTING_FULL;
    for (int t = 0; t < o->ntokens; t++) {
        double mp = table_ms(tb, inc, masked, t, 1), ab = table_ms(tb, a2a, masked, t, 0);
        double fp = table_ms(tb, inc, full, t, 1);
        if (mp > 0 && ab > 0)
            printf("%8d tok/rank: pipelined masked inc / a2a baseline (masked) = %.3f\n",
                   o->tokens[t], mp / ab);
        if (mp > 0 && fp > 0)
            printf("%8d tok/rank: pipelined masked inc / pipelined full inc = %.3f\n", o->tokens[t],
                   mp / fp);
    }
}

/* The table of every rank's results: 0 when every row is there and passed its checks. */
static int print_table(const opts_t *o, const result_t *all, int n)
{
    table_t *tb = calloc(1, sizeof(*tb));
    int ok = 1;
    if (tb == NULL) {
        fprintf(stderr, "incmoe-moe-bench: out of memory for the table\n");
        return 1;
    }
    table_fold(tb, all, n);
    table_header(o);
    for (int t = 0; t < o->ntokens; t++)
        for (int ai = 0; ai < o->nalgos; ai++)
            for (int gi = 0; gi < o->nroutings; gi++)
                ok &= table_row(o, tb, t, o->algos[ai], o->routings[gi]);
    printf("pipe/base: speedup of the band pipeline over the same algorithm's baseline; "
           "vs_ring_b: pipelined layer time of this row against the ring baseline with full "
           "routing (vLLM's default path); k-bar: the other ranks a token goes to (mean over "
           "ranks); ideal_ms: max(outbound || inbound collective, FFN) + header exchange from "
           "the baseline's measured phases; pipe/ideal: how far the pipeline is from it.\n");
    print_targets(o, tb);
    printf("incmoe-moe-bench: %s\n", ok ? "outputs verified" : "VERIFICATION FAILED");
    free(tb);
    return ok ? 0 : 1;
}

/* Appends the result lines of f to all (at most max); 1 when a line was not a result of this
   run (it goes to stderr). */
static int parse_results(const opts_t *o, FILE *f, result_t *all, int *n, int max)
{
    char line[512];
    int bad = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        result_t r;
        int off = 0;
        if (*n < max &&
            sscanf(line, "result %d %d %d %d %d %lf %lf %le %lf %lf %lf %lf %lf %lf %n", &r.algo,
                   &r.routing, &r.used, &r.ti, &r.mode, &r.ms, &r.cos_min, &r.ref_err, &r.ex_ms,
                   &r.out_ms, &r.ffn_ms, &r.back_ms, &r.kbar, &r.ufrac, &off) == 14 &&
            r.algo >= 0 && r.algo < NALGO && r.routing >= 0 && r.routing < NROUTING &&
            r.used >= 0 && r.used < NROUTING && r.ti >= 0 && r.ti < o->ntokens && r.mode >= 0 &&
            r.mode < 2) {
            snprintf(r.cfg, sizeof(r.cfg), "%s", line + off);
            r.cfg[strcspn(r.cfg, "\n")] = '\0';
            all[(*n)++] = r;
        } else {
            fputs(line, stderr);
            bad = 1;
        }
    }
    return bad;
}

/* The table of the result lines in in[0..nin): 1 when a line was not a result or a row is
   missing or failed its checks. */
static int report(const opts_t *o, FILE *const *in, int nin)
{
    int max = 2 * NALGO * NROUTING * MAX_T * (nin > 0 ? nin : 1), n = 0, rc = 0;
    result_t *all = calloc((size_t)max, sizeof(result_t));
    if (all == NULL) {
        fprintf(stderr, "incmoe-moe-bench: out of memory for %d results\n", max);
        return 1;
    }
    for (int i = 0; i < nin; i++)
        rc |= parse_results(o, in[i], all, &n, max);
    rc |= print_table(o, all, n);
    free(all);
    return rc;
}

/* ------------------------------------------------------------- embedded */

/* What every embedded rank needs; out[r] collects rank r's result lines. */
typedef struct {
    const opts_t *o;
    FILE *out[MAX_RANKS];
} embedded_t;

static int embedded_rank(int rank, int nranks, const char *switch_addr, void *arg)
{
    (void)nranks;
    (void)switch_addr;
    embedded_t *e = arg;
    return run_rank(e->o, rank, e->out[rank]);
}

/* Starts the switch on loopback; -1 after saying why. */
static int start_switch(inc_launch_switch_t *sw)
{
    char why[1024];
    const char *path = inc_switchd_find(why, sizeof(why));
    if (path == NULL) {
        fprintf(stderr, "incmoe-moe-bench: %s, or pass --switch HOST:PORT\n", why);
        return -1;
    }
    if (inc_launch_switch_start(NULL, path, NULL, 20, sw) != 0) {
        fprintf(stderr, "incmoe-moe-bench: could not start %s\n", path);
        return -1;
    }
    return 0;
}

typedef struct {
    embedded_t *e;
    int rank, rc;
} rank_thread_t;

static void *rank_thread(void *arg)
{
    rank_thread_t *t = arg;
    t->rc = run_rank(t->e->o, t->rank, t->e->out[t->rank]);
    return NULL;
}

/* The ranks as threads of this process (--ranks-in-process): 0 when all returned 0. */
static int run_threads(const opts_t *o, embedded_t *e)
{
    rank_thread_t t[MAX_RANKS];
    pthread_t tid[MAX_RANKS];
    int started = 0, rc = 0;
    for (int r = 0; r < o->nranks; r++, started++) {
        t[r] = (rank_thread_t){e, r, 1};
        if (pthread_create(&tid[r], NULL, rank_thread, &t[r]) != 0) {
            fprintf(stderr, "incmoe-moe-bench: starting rank %d's thread failed\n", r);
            rc = 1;
            break;
        }
    }
    for (int r = 0; r < started; r++) {
        pthread_join(tid[r], NULL);
        rc |= t[r].rc != 0;
    }
    return rc;
}

/* Runs the ranks, each writing to its own file: 0 when every rank exited 0, 1 when one
   did not, -1 when the files could not be made. */
static int run_ranks(opts_t *o, inc_launch_switch_t *sw, embedded_t *e)
{
    for (int r = 0; r < o->nranks; r++)
        if ((e->out[r] = tmpfile()) == NULL) {
            fprintf(stderr, "incmoe-moe-bench: tmpfile: %s\n", strerror(errno));
            while (r-- > 0)
                fclose(e->out[r]);
            return -1;
        }
    if (o->in_process)
        return run_threads(o, e);
    inc_launch_params_t p = {.nranks = o->nranks,
                             .fn = embedded_rank,
                             .arg = e,
                             .switch_addr = o->switch_addr,
                             .prog = "incmoe-moe-bench"};
    inc_launch_result_t res;
    return inc_launch_ranks(&p, sw, NULL, &res) != 0 ? 1 : 0;
}

static int run_embedded(opts_t *o)
{
    inc_launch_switch_t sw = {.pid = -1};
    if (o->switch_addr == NULL) {
        if (start_switch(&sw) != 0)
            return 1;
        o->switch_addr = sw.addr;
    }
    if (o->job == 0)
        o->job = ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL);
    embedded_t e = {.o = o};
    int rc = run_ranks(o, &sw, &e);
    inc_launch_switch_stop(&sw, 5);
    if (rc < 0)
        return 1;
    for (int r = 0; r < o->nranks; r++)
        rewind(e.out[r]);
    rc |= report(o, e.out, o->nranks);
    for (int r = 0; r < o->nranks; r++)
        fclose(e.out[r]);
    return rc;
}

/* --------------------------------------------------------- one rank of a job */

/* --rank: this rank's part of a job whose ranks all run the same command; rank 0 prints its
   own measurements as the table. */
static int run_job_rank(opts_t *o)
{
    char *buf = NULL;
    size_t len = 0;
    if (o->job == 0)
        o->job = 1;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL) {
        fprintf(stderr, "incmoe-moe-bench: open_memstream: %s\n", strerror(errno));
        return 1;
    }
    int rc = run_rank(o, o->rank, mem);
    fclose(mem);
    if (o->rank == 0) {
        FILE *in = fmemopen(buf, len, "r");
        rc |= report(o, &in, in != NULL ? 1 : 0);
        if (in != NULL)
            fclose(in);
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ arguments */

static void usage(void)
{
    printf("usage: incmoe-moe-bench [options]\n"
           "  -N RANKS           ranks, 1..64 (default 4)\n"
           "  -t T1,T2,...       tokens per rank (default 64,256,1024)\n"
           "  -E, -k, -H, -I     experts, top-k, hidden, intermediate (default 16, 4, 512, 256;\n"
           "                     E a multiple of N, 1 <= k <= min(E, 64), H and I 1..65536)\n"
           "  -d TYPE            float, half or bfloat16 (default float)\n"
           "  -b BANDS           bands of the pipeline, 1..256 (default 0: chosen automatically)\n"
           "  --model olmoe      OLMoE-1B-7B's shape: E=64 k=8 H=2048 I=1024\n"
           "  --algo LIST        collective algorithms to run, of inc, ring, a2a (default\n"
           "                     inc,ring)\n"
           "  --routing LIST     the layer's routings, of full, masked, auto (default full)\n"
           "  --route R          expert choice: uniform, or zipf:S (popularity (e+1)^-S);\n"
           "                     experts placed contiguously, rank 0 holding the most popular\n"
           "  --seed S           seed of the tokens and their routing (default 0)\n"
           "  -n ITERS, -w WARM  timed and warm-up forwards per point (default 5, 2)\n"
           "  --link-mbps BW     per-rank link rate for the configuration model (default:\n"
           "                     measured when the layer is created, INCMOE_MOE_CALIBRATE)\n"
           "  --depth D          collectives each poster keeps in flight, 1..8 (default\n"
           "                     INCMOE_MOE_DEPTH, 4)\n"
           "  --no-verify        skip the output checks\n"
           "  --backend cpu|cuda the layer's backend (default cpu)\n"
           "  --ranks-in-process the ranks as threads of this process (with cuda: concurrent\n"
           "                     kernels on one GPU, one stream and 1/N of the SMs each)\n"
           "  --switch HOST:PORT --rank R [--job ID]   run as one rank of a job\n");
}

/* -t: token counts, each 0..2^20, at most MAX_T of them. */
static int tokens_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    char *copy = strdup(text), *save = NULL;
    if (copy == NULL) {
        fprintf(stderr, "incmoe-moe-bench: out of memory reading %s\n", flag);
        return -1;
    }
    o->ntokens = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long x;
        if (inc_parse_int(tok, 0, 1 << 20, 0, &x, NULL, 0) != 0 || o->ntokens == MAX_T) {
            o->ntokens = 0;
            break;
        }
        o->tokens[o->ntokens++] = (int)x;
    }
    free(copy);
    if (o->ntokens > 0)
        return 0;
    fprintf(stderr,
            "incmoe-moe-bench: bad value '%s' for -t: want token counts like 64,256,1024 (each "
            "0..1048576, at most %d)\n",
            text, MAX_T);
    return -1;
}

static int dtype_arg(void *dst, const char *flag, const char *text)
{
    incmoe_dtype_t *dt = dst;
    if (!strcmp(text, "float") || !strcmp(text, "fp32"))
        *dt = INCMOE_FLOAT32;
    else if (!strcmp(text, "half") || !strcmp(text, "fp16"))
        *dt = INCMOE_FLOAT16;
    else if (!strcmp(text, "bfloat16") || !strcmp(text, "bf16"))
        *dt = INCMOE_BFLOAT16;
    else {
        fprintf(stderr, "incmoe-moe-bench: -d takes float, half or bfloat16\n");
        return -1;
    }
    return 0;
}

static int model_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    if (strcmp(text, "olmoe") != 0) {
        fprintf(stderr, "incmoe-moe-bench: the only --model is olmoe\n");
        return -1;
    }
    o->model = "olmoe-1b-7b", o->E = 64, o->k = 8, o->H = 2048, o->I = 1024;
    return 0;
}

/* A comma-separated list of names into out[] (the index of each name in names[], each at most
   once, in the order given): how many, or -1 for a word that is none of them. */
static int name_list(const char *text, const char *const *names, int nnames, int *out)
{
    int n = 0;
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0)
                found = i;
        for (int i = 0; i < n && found >= 0; i++)
            if (out[i] == found)
                found = -1;
        if (found < 0)
            return -1;
        out[n++] = found;
        p += len + (p[len] == ',');
    }
    return n;
}

static int algo_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    /* By incmoe_algo_t. */
    static const char *const names[NALGO] = {"inc", "ring", "a2a"};
    o->nalgos = name_list(text, names, NALGO, o->algos);
    if (o->nalgos <= 0) {
        fprintf(stderr, "incmoe-moe-bench: --algo takes a list of inc, ring and a2a, e.g. "
                        "inc,a2a\n");
        return -1;
    }
    return 0;
}

static int routing_arg(void *dst, const char *flag, const char *text)
{
    opts_t *o = dst;
    /* By incmoe_moe_routing_t. */
    static const char *const names[NROUTING] = {"full", "masked", "auto"};
    o->nroutings = name_list(text, names, NROUTING, o->routings);
    if (o->nroutings <= 0) {
        fprintf(stderr, "incmoe-moe-bench: --routing takes a list of full, masked and auto, e.g. "
                        "full,masked\n");
        return -1;
    }
    return 0;
}

static int route_arg(void *dst, const char *flag, const char *text)
{
    double *zipf = dst;
    if (strcmp(text, "uniform") == 0) {
        *zipf = 0;
        return 0;
    }
    if (strncmp(text, "zipf:", 5) == 0 && inc_arg_double(text + 5, 0, 100, zipf) == 0)
        return 0;
    fprintf(stderr,
            "incmoe-moe-bench: bad value '%s' for --route: want uniform or zipf:S with "
            "0 < S <= 100\n",
            text);
    return -1;
}

static int seed_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --seed: want 0..2^64-1\n", text);
        return -1;
    }
    return 0;
}

static int job_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --job: want 0..2^64-1\n", text);
        return -1;
    }
    return 0;
}

static int link_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_double(text, 0, 1e9, dst) != 0) {
        fprintf(stderr, "incmoe-moe-bench: bad value '%s' for --link-mbps: want 0 < BW <= 1e9\n",
                text);
        return -1;
    }
    return 0;
}

static int backend_arg(void *dst, const char *flag, const char *text)
{
    incmoe_moe_backend_t *b = dst;
    if (!strcmp(text, "cpu"))
        *b = INCMOE_MOE_BACKEND_CPU;
    else if (!strcmp(text, "cuda"))
        *b = INCMOE_MOE_BACKEND_CUDA;
    else {
        fprintf(stderr, "incmoe-moe-bench: --backend takes cpu or cuda\n");
        return -1;
    }
    return 0;
}

/* As inc_arg_getopt: 0 to run, 1 for --help, -1 or -2 on a bad command line (said). */
static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.nranks = 4,
                  .rank = -1,
                  .E = 16,
                  .k = 4,
                  .H = 512,
                  .I = 256,
                  .dtype = INCMOE_FLOAT32,
                  .tokens = {64, 256, 1024},
                  .ntokens = 3,
                  .iters = 5,
                  .warmup = 2,
                  .verify = 1,
                  .algos = {INCMOE_ALGO_RING, INCMOE_ALGO_INC},
                  .nalgos = 2,
                  .routings = {INCMOE_MOE_ROUTING_FULL},
                  .nroutings = 1};
    const inc_arg_t args[] = {
        {"-N", NULL, INC_ARG_INT, 1, MAX_RANKS, &o->nranks},
        {"-t", NULL, INC_ARG_FN, .dst = o, .fn = tokens_arg},
        {"-E", NULL, INC_ARG_INT, 1, 1 << 16, &o->E},
        {"-k", NULL, INC_ARG_INT, 1, INCMOE_MOE_MAX_TOPK, &o->k},
        {"-H", NULL, INC_ARG_INT, 1, 1 << 16, &o->H},
        {"-I", NULL, INC_ARG_INT, 1, 1 << 16, &o->I},
        {"-d", NULL, INC_ARG_FN, .dst = &o->dtype, .fn = dtype_arg},
        {"-b", NULL, INC_ARG_INT, 0, INCMOE_MOE_MAX_BANDS, &o->bands},
        {"-n", NULL, INC_ARG_INT, 1, 1 << 20, &o->iters},
        {"-w", NULL, INC_ARG_INT, 0, 1 << 20, &o->warmup},
        {"--model", NULL, INC_ARG_FN, .dst = o, .fn = model_arg},
        {"--algo", NULL, INC_ARG_FN, .dst = o, .fn = algo_arg},
        {"--routing", NULL, INC_ARG_FN, .dst = o, .fn = routing_arg},
        {"--route", NULL, INC_ARG_FN, .dst = &o->zipf, .fn = route_arg},
        {"--seed", NULL, INC_ARG_FN, .dst = &o->seed, .fn = seed_arg},
        {"--switch", NULL, INC_ARG_TEXT, .dst = &o->switch_addr},
        {"--rank", NULL, INC_ARG_INT, 0, MAX_RANKS - 1, &o->rank},
        {"--job", NULL, INC_ARG_FN, .dst = &o->job, .fn = job_arg},
        {"--link-mbps", NULL, INC_ARG_FN, .dst = &o->link_mbps, .fn = link_arg},
        {"--depth", NULL, INC_ARG_INT, 1, 8, &o->depth},
        {"--no-verify", NULL, INC_ARG_SET, 0, .dst = &o->verify},
        {"--backend", NULL, INC_ARG_FN, .dst = &o->backend, .fn = backend_arg},
        {"--ranks-in-process", NULL, INC_ARG_SET, 1, .dst = &o->in_process},
        {"-h", "--help", INC_ARG_HELP},
    };
    return inc_arg_getopt("incmoe-moe-bench", args, sizeof(args) / sizeof(args[0]), argc, argv);
}

/* What no single option can check: the options against each other and this build. */
static int check_opts(const opts_t *o)
{
    if (o->nranks < 1 || o->nranks > MAX_RANKS || o->E < o->nranks || o->E % o->nranks != 0 ||
        o->k < 1 || o->k > o->E || o->H < 1 || o->I < 1 || o->iters < 1 || o->warmup < 0 ||
        o->bands < 0) {
        fprintf(stderr,
                "incmoe-moe-bench: need 1 <= N <= %d, E a multiple of N, 1 <= k <= E, "
                "H, I, -n >= 1 (got N=%d E=%d k=%d H=%d I=%d n=%d)\n",
                MAX_RANKS, o->nranks, o->E, o->k, o->H, o->I, o->iters);
        return -1;
    }
#ifndef INCMOE_MOE_CUDA
    if (o->backend == INCMOE_MOE_BACKEND_CUDA) {
        fprintf(stderr, "incmoe-moe-bench: --backend cuda: this build has no CUDA backend "
                        "(configure found no CUDA toolkit)\n");
        return -1;
    }
#endif
    if (o->in_process && o->rank >= 0) {
        fprintf(stderr, "incmoe-moe-bench: --ranks-in-process runs every rank; drop --rank\n");
        return -1;
    }
    if (o->rank >= 0 && (o->switch_addr == NULL || o->rank >= o->nranks)) {
        fprintf(stderr, "incmoe-moe-bench: --rank needs --switch and a rank below -N\n");
        return -1;
    }
    return 0;
}

/* The settings the layer reads from the environment. */
static void set_environment(const opts_t *o)
{
    /* One BLAS thread per rank: the ranks share the machine's cores. */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    if (o->link_mbps > 0) {
        char v[32];
        snprintf(v, sizeof(v), "%.0f", o->link_mbps);
        setenv("INCMOE_MOE_LINK_MBPS", v, 1);
    }
    if (o->depth > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", o->depth);
        setenv("INCMOE_MOE_DEPTH", v, 1);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    int p = parse_args(argc, argv, &o);
    if (p == 1 || p == -2)
        usage();
    if (p != 0)
        return p == 1 ? 0 : 2;
    if (check_opts(&o) != 0)
        return 2;
    set_environment(&o);
    return o.rank < 0 ? run_embedded(&o) : run_job_rank(&o);
}
