/*
 * replica_rows.c - incmoe-replica-rows: the busiest rank's received rows under
 * skewed routing, without replicas, with DeepSeek's EPLB placement and a static
 * split (eplb.h), and with incmoe_moe_placement_choose's placement and the
 * layer's per-token rule (incmoe_moe.h, "Choosing a placement"): issue 29's
 * target row "yours / EPLB's <= 0.90".
 *
 *   incmoe-replica-rows [-N 8,16] [-E 64] [-k 8] [--route zipf:1] [-t 256]
 *                       [--extra 1] [--seed 1]
 *
 * The routing is incmoe-moe-bench's (moe_bench_data.c: zipf:S with expert e
 * drawn in proportion to (e+1)^-S, so the popular experts sit on rank 0 under
 * the contiguous placement).  Both placements are chosen on one sample (seed
 * S) and measured on another (seed S + 1) of the same size, as a placement
 * chosen from yesterday's load serves today's.  Integers only: the output is
 * the same on every machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "eplb.h"
#include "moe_bench.h"

#include "incmoe/incmoe_moe.h"

#define MAX_NS 8

typedef struct {
    opts_t o; /* E, k, zipf, seed: what mb_make_tokens reads */
    int ns[MAX_NS], nns;
    int tokens, extra;
} rr_opts_t;

/* One sample's arrays. */
typedef struct {
    incmoe_moe_routing_sample_t s;
    int counts[MAX_RANKS];
    int32_t *ids;
} rr_sample_t;

static void usage(void)
{
    printf("usage: incmoe-replica-rows [options]\n"
           "  -N N1,N2,...   ranks, each 1..%d dividing E (default 8,16)\n"
           "  -E, -k         experts and top-k (default 64, 8)\n"
           "  --route R      uniform, or zipf:S (default zipf:1)\n"
           "  -t T           tokens per rank in each sample (default 256)\n"
           "  --extra X      extra expert slots per rank (default 1)\n"
           "  --seed S       the choosing sample's seed; the measured one is S + 1 (default 1)\n",
           MAX_RANKS);
}

static int ns_arg(void *dst, const char *flag, const char *text)
{
    rr_opts_t *r = dst;
    r->nns = 0;
    for (const char *p = text; *p != '\0';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MAX_RANKS || r->nns == MAX_NS || (*end != ',' && *end)) {
            fprintf(stderr,
                    "incmoe-replica-rows: bad value '%s' for %s: want up to %d of "
                    "1..%d, comma-separated\n",
                    text, flag, MAX_NS, MAX_RANKS);
            return -1;
        }
        r->ns[r->nns++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static int seed_arg(void *dst, const char *flag, const char *text)
{
    if (inc_arg_u64(text, dst) != 0) {
        fprintf(stderr, "incmoe-replica-rows: bad value '%s' for %s: want 0..2^64-2\n", text, flag);
        return -1;
    }
    return 0;
}

/* 0: run; 1: help shown; 2: refused (said). */
static int parse(rr_opts_t *r, int argc, char **argv)
{
    *r = (rr_opts_t){.ns = {8, 16}, .nns = 2, .tokens = 256, .extra = 1};
    r->o = (opts_t){.E = 64, .k = 8, .H = 1, .dtype = INCMOE_FLOAT32, .zipf = 1, .seed = 1};
    const inc_arg_t args[] = {
        {"-N", NULL, INC_ARG_FN, .dst = r, .fn = ns_arg},
        {"-E", NULL, INC_ARG_INT, 1, 1 << 16, &r->o.E},
        {"-k", NULL, INC_ARG_INT, 1, INCMOE_MOE_MAX_TOPK, &r->o.k},
        {"--route", NULL, INC_ARG_ZIPF, .dst = &r->o.zipf},
        {"-t", NULL, INC_ARG_INT, 0, 1 << 20, &r->tokens},
        {"--extra", NULL, INC_ARG_INT, 0, 1 << 16, &r->extra},
        {"--seed", NULL, INC_ARG_FN, .dst = &r->o.seed, .fn = seed_arg},
        {"-h", "--help", INC_ARG_HELP},
    };
    int rc =
        inc_arg_getopt("incmoe-replica-rows", args, sizeof(args) / sizeof(args[0]), argc, argv);
    if (rc == 1 || rc == -2)
        usage();
    return rc == 0 ? 0 : rc == 1 ? 1 : 2;
}

/* Every rank's tokens of opts' seed: 0, or -1 out of memory. */
static int sample_make(const rr_opts_t *r, int N, uint64_t seed, rr_sample_t *out)
{
    opts_t o = r->o;
    o.nranks = N;
    o.seed = seed;
    size_t T = (size_t)r->tokens;
    out->ids = malloc(sizeof(int32_t) * (T * (size_t)N * (size_t)o.k + 1));
    float *x = malloc(sizeof(float) * (T + 1)), *w = malloc(sizeof(float) * (T * o.k + 1));
    int ok = out->ids != NULL && x != NULL && w != NULL;
    for (int rank = 0; ok && rank < N; rank++) {
        out->counts[rank] = r->tokens;
        mb_make_tokens(&o, rank, r->tokens, x, out->ids + (size_t)rank * T * o.k, w);
    }
    free(x);
    free(w);
    out->s = (incmoe_moe_routing_sample_t){
        .num_experts = o.E, .top_k = o.k, .nranks = N, .counts = out->counts, .topk_ids = out->ids};
    return ok ? 0 : -1;
}

/* A placement's arrays, sized for E experts with up to extra replicas per rank on N ranks. */
typedef struct {
    int *offsets, *ranks;
} rr_place_t;

static int place_alloc(rr_place_t *p, int E, int N, int extra)
{
    p->offsets = malloc(sizeof(int) * ((size_t)E + 1));
    p->ranks = malloc(sizeof(int) * ((size_t)E + (size_t)N * extra));
    return p->offsets != NULL && p->ranks != NULL ? 0 : -1;
}

static void place_free(rr_place_t *p)
{
    free(p->offsets);
    free(p->ranks);
}

/* The busiest rank's rows of sample s on p with the split; -1 (said) on a failure. */
static int64_t busiest(const rr_sample_t *s, const rr_place_t *p, incmoe_moe_split_t split)
{
    int64_t rows[MAX_RANKS], max = 0;
    char why[256];
    incmoe_moe_placement_t pl = {.offsets = p->offsets, .ranks = p->ranks};
    if (incmoe_moe_placement_rows(&s->s, &pl, split, rows, why, sizeof(why)) != INCMOE_OK) {
        fprintf(stderr, "incmoe-replica-rows: %s\n", why);
        return -1;
    }
    for (int r = 0; r < s->s.nranks; r++)
        max = rows[r] > max ? rows[r] : max;
    return max;
}

/* The busiest rank's rows: none, EPLB static and per-token, ours static and per-token. */
enum { RR_NONE, RR_EPLB_STATIC, RR_EPLB_TOKEN, RR_OURS_STATIC, RR_OURS_TOKEN, RR_NCOLS };

/* The three placements for the choosing sample c: base, EPLB's, ours.  0, or -1 (said). */
static int choose_all(const rr_opts_t *r, const rr_sample_t *c, rr_place_t *pl)
{
    int E = r->o.E, N = c->s.nranks, per = E / N;
    char why[256] = "out of memory";
    int64_t *load = malloc(sizeof(int64_t) * (size_t)E);
    int ok = load != NULL;
    for (int i = 0; i < 3 && ok; i++)
        ok = place_alloc(&pl[i], E, N, r->extra) == 0;
    for (int e = 0; ok && e <= E; e++) {
        pl[0].offsets[e] = e;
        if (e < E)
            pl[0].ranks[e] = e / per;
    }
    if (ok) {
        eplb_expert_load(&c->s, load);
        ok = eplb_place(load, E, N, r->extra, pl[1].offsets, pl[1].ranks) == 0;
    }
    if (ok)
        ok = incmoe_moe_placement_choose(&c->s, r->extra, pl[2].offsets, pl[2].ranks, why,
                                         sizeof(why)) == INCMOE_OK;
    if (!ok)
        fprintf(stderr, "incmoe-replica-rows: N=%d: %s\n", N, why);
    free(load);
    return ok ? 0 : -1;
}

/* col[RR_NCOLS] for N ranks: 0, or -1 (said). */
static int rr_one(const rr_opts_t *r, int N, int64_t *col)
{
    rr_sample_t c = {0}, m = {0};
    rr_place_t pl[3] = {{0}};
    int ok = sample_make(r, N, r->o.seed, &c) == 0 && sample_make(r, N, r->o.seed + 1, &m) == 0;
    if (!ok)
        fprintf(stderr, "incmoe-replica-rows: out of memory for N=%d's samples\n", N);
    if (ok && choose_all(r, &c, pl) == 0) {
        col[RR_NONE] = busiest(&m, &pl[0], INCMOE_MOE_SPLIT_PER_TOKEN);
        col[RR_EPLB_STATIC] = busiest(&m, &pl[1], INCMOE_MOE_SPLIT_STATIC);
        col[RR_EPLB_TOKEN] = busiest(&m, &pl[1], INCMOE_MOE_SPLIT_PER_TOKEN);
        col[RR_OURS_STATIC] = busiest(&m, &pl[2], INCMOE_MOE_SPLIT_STATIC);
        col[RR_OURS_TOKEN] = busiest(&m, &pl[2], INCMOE_MOE_SPLIT_PER_TOKEN);
        for (int i = 0; i < RR_NCOLS; i++)
            ok &= col[i] >= 0;
    } else {
        ok = 0;
    }
    for (int i = 0; i < 3; i++)
        place_free(&pl[i]);
    free(c.ids);
    free(m.ids);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    rr_opts_t r;
    int rc = parse(&r, argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    for (int i = 0; i < r.nns; i++) {
        int N = r.ns[i];
        if (r.o.E % N != 0 || r.o.k > r.o.E || r.extra > r.o.E - r.o.E / N) {
            fprintf(stderr,
                    "incmoe-replica-rows: need E (%d) a multiple of N (%d), k (%d) <= E "
                    "and extra (%d) <= E - E/N\n",
                    r.o.E, N, r.o.k, r.extra);
            return 2;
        }
    }
    printf("busiest rank's received rows: E=%d k=%d route %s%.6g, %d tokens per rank, %d extra "
           "slot(s) per rank; placements chosen on seed %llu, measured on seed %llu\n",
           r.o.E, r.o.k, r.o.zipf > 0 ? "zipf:" : "uniform", r.o.zipf > 0 ? r.o.zipf : 0, r.tokens,
           r.extra, (unsigned long long)r.o.seed, (unsigned long long)r.o.seed + 1);
    printf("%4s %8s %12s %15s %12s %15s %10s\n", "N", "none", "EPLB+static", "EPLB+per-token",
           "ours+static", "ours+per-token", "ours/EPLB");
    for (int i = 0; i < r.nns; i++) {
        int64_t col[RR_NCOLS];
        if (rr_one(&r, r.ns[i], col) != 0)
            return 1;
        printf("%4d %8lld %12lld %15lld %12lld %15lld %10.3f\n", r.ns[i], (long long)col[0],
               (long long)col[1], (long long)col[2], (long long)col[3], (long long)col[4],
               col[RR_EPLB_STATIC] > 0 ? (double)col[RR_OURS_TOKEN] / col[RR_EPLB_STATIC] : 0.0);
    }
    return 0;
}
