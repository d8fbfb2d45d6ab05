/*
 * ffn_bench.c - incmoe-ffn-bench: the CPU backend's expert compute alone (moe/cpu/ffn.c,
 * compiled in), one rank, no network, against one large OpenBLAS sgemm of the same FLOPs
 * on the same number of threads (the machine's limit).
 *
 * One forward of baseline mode on one rank: T tokens, each routed to k of E experts (all
 * local), run by a team of `threads` compute workers as the layer runs them.  FLOPs: 6 H I
 * per (token, expert) pair.  Prints per thread count the median (min-max) of the runs in
 * ms and GFLOP/s, and the ratio to the sgemm run by run.  The Python twin, against torch's
 * experts: python -m incmoe.bench.ffn.
 *
 *   incmoe-ffn-bench --shape h512 --threads 1,2 -n 5
 */
#include <cblas.h>
#undef I /* complex.h's, from cblas.h */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "cpu/cpu.h"

void openblas_set_num_threads(int num_threads);

#define MAX_RUNS  64
#define MAX_BANDS 16

typedef struct {
    const char *name;
    int E, k, H, I, T;
    int local; /* experts on this rank (0: all E); the other hits are another rank's */
} shape_t;

/* As bindings/python/incmoe/bench/ffn.py's. */
static const shape_t shapes[] = {
    {"h512", 16, 4, 512, 2048, 2048},
    {"h2048", 16, 4, 2048, 1024, 1024},
    {"olmoe", 64, 8, 512, 256, 2048},
    /* the prefill bench's MoE block at N=4 with --intermediate 2048 (-B 4 -L 128): a rank's
       16 experts over every rank's 512 tokens, as full routing runs them */
    {"olmoe-n4-i2048", 64, 8, 512, 2048, 2048, 16},
};

typedef struct {
    shape_t s;
    incmoe_dtype_t dtype;
    int threads[INCMOE_MOE_MAX_WORKERS];
    int nthreads, iters, warmup;
    int bands[MAX_BANDS]; /* --bands: the forward split into that many bands, in turn */
    int nbands;
} opts_t;

/* One layer's worth of state: rows, weights, the team. */
typedef struct {
    moe_ctx_t x;
    moe_counters_t cnt;
    cpu_state_t cs;
    size_t counts[1];
    int *local;
    uint8_t *xg, *z;
    size_t hits; /* (token, local expert) pairs: the rows the experts run */
} bench_t;

static float frand(unsigned *seed, float scale)
{
    return scale * ((float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f);
}

static void *rand_array(unsigned *seed, size_t n, float scale, incmoe_dtype_t dt, size_t es)
{
    float *f = malloc(n * sizeof(float));
    void *out = malloc(n * es);
    if (f == NULL || out == NULL) {
        fprintf(stderr, "incmoe-ffn-bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        f[i] = frand(seed, scale);
    inc_dtype_from_float(out, f, n, dt);
    free(f);
    return out;
}

/* Token t's rows of xg: H values, k distinct experts, k weights. */
static void fill_rows(bench_t *b, unsigned *seed)
{
    const size_t hb = (size_t)b->x.H * b->x.esize;
    void *xs = rand_array(seed, (size_t)b->x.tmax * b->x.H, 2.0f, b->x.dtype, b->x.esize);
    for (size_t t = 0; t < b->x.tmax; t++) {
        uint8_t *row = b->xg + t * b->x.grow;
        memcpy(row, (uint8_t *)xs + t * hb, hb);
        int32_t *ids = (int32_t *)(row + hb);
        float *w = (float *)(row + hb + 4 * (size_t)b->x.k);
        for (int j = 0; j < b->x.k; j++) {
            int e, dup;
            do {
                e = rand_r(seed) % b->x.E;
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= ids[i] == e;
            } while (dup);
            ids[j] = e;
            w[j] = (float)rand_r(seed) / (float)RAND_MAX;
        }
    }
    free(xs);
}

static void bench_init(bench_t *b, const opts_t *o)
{
    const shape_t *s = &o->s;
    const size_t es = o->dtype == INCMOE_FLOAT32 ? 4 : 2;
    unsigned seed = 1;
    memset(b, 0, sizeof(*b));
    b->counts[0] = (size_t)s->T;
    moe_ctx_t *x = &b->x;
    x->N = 1, x->H = s->H, x->k = s->k, x->dtype = o->dtype, x->esize = es;
    x->grow = (size_t)s->H * es + 8 * (size_t)s->k, x->zrow = (size_t)s->H * es;
    x->tmax = (size_t)s->T, x->nb = 1, x->counts = b->counts, x->E = s->E;
    x->cnt = &b->cnt, x->timeout_ms = 600000;
    b->xg = malloc(x->tmax * x->grow);
    b->z = malloc(x->tmax * x->zrow);
    b->local = malloc((size_t)s->E * sizeof(int));
    if (b->xg == NULL || b->z == NULL || b->local == NULL) {
        fprintf(stderr, "incmoe-ffn-bench: out of memory\n");
        exit(1);
    }
    x->xg = b->xg, x->z = b->z;
    fill_rows(b, &seed);
    for (int e = 0; e < s->E; e++)
        b->local[e] = e;
    const int nl = s->local > 0 ? s->local : s->E;
    for (size_t t = 0; t < x->tmax; t++) {
        const int32_t *ids = (const int32_t *)(b->xg + t * x->grow + (size_t)s->H * es);
        for (int j = 0; j < s->k; j++)
            b->hits += ids[j] < nl;
    }
    cpu_state_t *cs = &b->cs;
    cs->H = s->H, cs->I = s->I, cs->n_local = nl, cs->local_ids = b->local;
    incmoe_moe_params_t p;
    memset(&p, 0, sizeof(p));
    p.dtype = o->dtype;
    size_t mat = (size_t)nl * s->I * s->H;
    p.w_gate = rand_array(&seed, mat, 1.0f / sqrtf((float)s->H), o->dtype, es);
    p.w_up = rand_array(&seed, mat, 1.0f / sqrtf((float)s->H), o->dtype, es);
    p.w_down = rand_array(&seed, mat, 1.0f / sqrtf((float)s->I), o->dtype, es);
    if (ffn_weights_load(cs, &p, es) != INCMOE_OK ||
        ffn_team_create(cs, s->E, 1, NULL, 0, s->k, x->tmax) != INCMOE_OK ||
        ffn_scratch_reserve(cs, INCMOE_MOE_MAX_WORKERS) != INCMOE_OK) {
        fprintf(stderr, "incmoe-ffn-bench: out of memory\n");
        exit(1);
    }
    free((void *)p.w_gate);
    free((void *)p.w_up);
    free((void *)p.w_down);
}

typedef struct {
    bench_t *b;
    int c;
} worker_t;

/* A worker's share of every band of the forward, band after band. */
static void *worker(void *arg)
{
    worker_t *w = arg;
    for (size_t j = 0; j < w->b->x.nb; j++) {
        band_t band = band_get(w->b->x.tmax, w->b->x.nb, j);
        if (ffn_band(&w->b->x, &w->b->cs, w->c, j, band) != INCMOE_OK) {
            fprintf(stderr, "incmoe-ffn-bench: worker %d gave up\n", w->c);
            exit(1);
        }
    }
    return NULL;
}

/* One forward's expert compute on C workers over nb bands; its ms. */
static double run_team(bench_t *b, int C, int nb)
{
    pthread_t tid[INCMOE_MOE_MAX_WORKERS];
    worker_t arg[INCMOE_MOE_MAX_WORKERS];
    b->x.C = C;
    b->x.nb = (size_t)nb;
    ffn_team_reset(&b->cs);
    double t0 = inc_now_ms();
    for (int c = 0; c < C; c++) {
        arg[c] = (worker_t){b, c};
        if (pthread_create(&tid[c], NULL, worker, &arg[c]) != 0) {
            fprintf(stderr, "incmoe-ffn-bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (int c = 0; c < C; c++)
        pthread_join(tid[c], NULL);
    return inc_now_ms() - t0;
}

/* One sgemm of the forward's FLOPs: [T k] x [H] times [H] x [3 I], on C threads; its ms. */
static double run_sgemm(const bench_t *b, const shape_t *s, int C, const float *a, const float *w,
                        float *c)
{
    openblas_set_num_threads(C);
    int M = (int)b->hits, N = 3 * s->I, K = s->H;
    double t0 = inc_now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, w, K, 0.0f, c, N);
    return inc_now_ms() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "median (min-max)" of v[0..n) into buf. */
static const char *stats(double *v, int n, char *buf, size_t len)
{
    double s[MAX_RUNS];
    memcpy(s, v, (size_t)n * sizeof(double));
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    snprintf(buf, len, "%.2f (%.2f-%.2f)", med, s[0], s[n - 1]);
    return buf;
}

static void bench_threads(bench_t *b, const opts_t *o, int C, float *a, float *w, float *c)
{
    const shape_t *s = &o->s;
    const double gflop = 6.0 * s->H * s->I * (double)b->hits / 1e9;
    double ms[MAX_RUNS], mm[MAX_RUNS], gf[MAX_RUNS], gm[MAX_RUNS], ratio[MAX_RUNS];
    for (int i = 0; i < o->warmup; i++) {
        run_team(b, C, 1);
        run_sgemm(b, s, C, a, w, c);
    }
    for (int i = 0; i < o->iters; i++) { /* side by side, run by run */
        ms[i] = run_team(b, C, 1);
        mm[i] = run_sgemm(b, s, C, a, w, c);
        gf[i] = gflop / (ms[i] / 1e3);
        gm[i] = gflop / (mm[i] / 1e3);
        ratio[i] = gf[i] / gm[i];
    }
    char b1[64], b2[64], b3[64], b4[64];
    printf("%-6s %-8s %2d | ffn %s ms %s GF/s | sgemm %s GF/s | ffn/sgemm %s\n", s->name,
           incmoe_dtype_name(o->dtype), C, stats(ms, o->iters, b1, sizeof(b1)),
           stats(gf, o->iters, b2, sizeof(b2)), stats(gm, o->iters, b3, sizeof(b3)),
           stats(ratio, o->iters, b4, sizeof(b4)));
    fflush(stdout);
}

/* The same forward split into each of o->bands band counts, run by run in turn (a slow
   spell of the machine falls on every count alike): each count's ms and its time over the
   first count's.  A band runs every local expert over its rows, so what a band costs
   beyond its rows' FLOPs shows here without a network. */
static void bench_bands(bench_t *b, const opts_t *o, int C)
{
    double ms[MAX_BANDS][MAX_RUNS], ratio[MAX_BANDS][MAX_RUNS];
    for (int i = 0; i < o->warmup; i++)
        for (int j = 0; j < o->nbands; j++)
            run_team(b, C, o->bands[j]);
    for (int i = 0; i < o->iters; i++)
        for (int j = 0; j < o->nbands; j++) {
            ms[j][i] = run_team(b, C, o->bands[j]);
            ratio[j][i] = ms[j][i] / ms[0][i];
        }
    const double gflop = 6.0 * o->s.H * o->s.I * (double)b->hits / 1e9;
    for (int j = 0; j < o->nbands; j++) {
        char b1[64], b2[64];
        double sorted[MAX_RUNS];
        memcpy(sorted, ms[j], (size_t)o->iters * sizeof(double));
        qsort(sorted, (size_t)o->iters, sizeof(double), cmp_double);
        printf("%-6s %-8s %2d | bands %3d | ffn %s ms %.1f GF/s | / %d band(s) %s | per band "
               "%.2f ms\n",
               o->s.name, incmoe_dtype_name(o->dtype), C, o->bands[j],
               stats(ms[j], o->iters, b1, sizeof(b1)), gflop / (sorted[o->iters / 2] / 1e3),
               o->bands[0], stats(ratio[j], o->iters, b2, sizeof(b2)),
               sorted[o->iters / 2] / o->bands[j]);
    }
    fflush(stdout);
}

static void usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: incmoe-ffn-bench [--shape h512|h2048|olmoe|olmoe-n4-i2048]\n"
            "                        [--dtype float32|bfloat16|float16] [--threads 1,2]\n"
            "                        [--bands 1,4,16] [-n runs] [-w warm-up runs]\n"
            "  --bands LIST  the forward split into each many bands (as the pipelined layer\n"
            "                runs them), instead of the sgemm beside it\n");
    exit(code);
}

/* A comma-separated list of 1..most, at most cap of them, into v; their count. */
static int parse_list(const char *opt, const char *arg, int most, int cap, int *v)
{
    char *end;
    int n = 0;
    for (const char *p = arg; *p;) {
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > most || n == cap || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "incmoe-ffn-bench: %s '%s': expected a list of 1..%d (at most %d)\n",
                    opt, arg, most, cap);
            exit(2);
        }
        v[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (n == 0)
        usage(2);
    return n;
}

static void parse(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"shape", required_argument, 0, 's'},   {"dtype", required_argument, 0, 'd'},
        {"threads", required_argument, 0, 't'}, {"bands", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    *o = (opts_t){shapes[0], INCMOE_FLOAT32, {1, 2}, 2, 5, 1, {0}, 0};
    int ch;
    while ((ch = getopt_long(argc, argv, "n:w:h", lo, NULL)) != -1) {
        if (ch == 's') {
            size_t i = 0;
            while (i < sizeof(shapes) / sizeof(shapes[0]) && strcmp(shapes[i].name, optarg))
                i++;
            if (i == sizeof(shapes) / sizeof(shapes[0])) {
                fprintf(stderr,
                        "incmoe-ffn-bench: --shape '%s': expected h512, h2048, olmoe or "
                        "olmoe-n4-i2048\n",
                        optarg);
                exit(2);
            }
            o->s = shapes[i];
        } else if (ch == 'd') {
            if (!strcmp(optarg, "float32"))
                o->dtype = INCMOE_FLOAT32;
            else if (!strcmp(optarg, "bfloat16"))
                o->dtype = INCMOE_BFLOAT16;
            else if (!strcmp(optarg, "float16"))
                o->dtype = INCMOE_FLOAT16;
            else {
                fprintf(stderr,
                        "incmoe-ffn-bench: --dtype '%s': expected float32, bfloat16 or "
                        "float16\n",
                        optarg);
                exit(2);
            }
        } else if (ch == 't')
            o->nthreads = parse_list("--threads", optarg, INCMOE_MOE_MAX_WORKERS,
                                     INCMOE_MOE_MAX_WORKERS, o->threads);
        else if (ch == 'b')
            o->nbands = parse_list("--bands", optarg, INCMOE_MOE_MAX_BANDS, MAX_BANDS, o->bands);
        else if (ch == 'n' || ch == 'w') {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < (ch == 'n') || v > MAX_RUNS) {
                fprintf(stderr, "incmoe-ffn-bench: -%c '%s': expected %d..%d\n", ch, optarg,
                        ch == 'n', MAX_RUNS);
                exit(2);
            }
            *(ch == 'n' ? &o->iters : &o->warmup) = (int)v;
        } else
            usage(ch == 'h' ? 0 : 2);
    }
    if (optind < argc)
        usage(2);
}

int main(int argc, char **argv)
{
    opts_t o;
    parse(argc, argv, &o);
    bench_t b;
    bench_init(&b, &o);
    const shape_t *s = &o.s;
    size_t M = b.hits, N = 3 * (size_t)s->I, K = (size_t)s->H;
    float *a = malloc(M * K * sizeof(float)), *w = malloc(N * K * sizeof(float));
    float *c = malloc(M * N * sizeof(float));
    if (a == NULL || w == NULL || c == NULL) {
        fprintf(stderr, "incmoe-ffn-bench: out of memory\n");
        return 1;
    }
    unsigned seed = 2;
    for (size_t i = 0; i < M * K; i++)
        a[i] = frand(&seed, 1.0f);
    for (size_t i = 0; i < N * K; i++)
        w[i] = frand(&seed, 1.0f);
    printf("# %s: E=%d k=%d H=%d I=%d, %d tokens, one rank; median (min-max) of %d runs after "
           "%d warm-up; sgemm: OpenBLAS [%zu x %zu] x [%zu x %zu] on the same threads\n",
           s->name, s->E, s->k, s->H, s->I, s->T, o.iters, o.warmup, M, K, K, N);
    for (int i = 0; i < o.nthreads; i++) {
        if (o.nbands > 0)
            bench_bands(&b, &o, o.threads[i]);
        else
            bench_threads(&b, &o, o.threads[i], a, w, c);
    }
    free(a);
    free(w);
    free(c);
    return 0;
}
