/*
 * moe_bench_table.c - the table rank 0 of incmoe-moe-bench prints from every
 * rank's result lines: layer time, tokens/s per rank, the speedup over the ring
 * baseline, the ideal of the cost model, then the ratios the MoE targets of
 * issue 18 name, then the decode rows (each mode's forward against the decode
 * bound of moe_bench_decode.c); a missing row or a failed check makes the exit
 * status 1.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n samples (sorts them). */
double mb_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static double tol_of(incmoe_dtype_t dt)
{
    return dt == INCMOE_BFLOAT16 ? 3e-2 : dt == INCMOE_FLOAT16 ? 5e-3 : 1e-4;
}

static const char *algo_name(int algo)
{
    return algo == INCMOE_ALGO_RING  ? "ring"
           : algo == INCMOE_ALGO_A2A ? "a2a"
           : algo == MB_ALGO_AUTO    ? "auto"
                                     : "inc";
}

/* Every rank's results folded per (algorithm, routing, token count): the slowest rank's times
   and the worst rank's checks, as the table prints them. */
typedef struct {
    int have[NALGO][NROUTING][MAX_T][NMODE];  /* per mode: some rank reported it */
    double ms[NALGO][NROUTING][MAX_T][NMODE]; /* per mode: layer time (-1: no dispatch/combine) */
    /* baseline: exchange, AllGather or dispatch, FFN, ReduceScatter or combine */
    double phase[NALGO][NROUTING][MAX_T][4];
    double ffn[NALGO][NROUTING][MAX_T][NMODE]; /* per mode: the FFN as the layer timed it */
    /* the worst over the modes: cosine against baseline mode, error against fp64 */
    double cos[NALGO][NROUTING][MAX_T], err[NALGO][NROUTING][MAX_T];
    double kbar[NALGO][NROUTING][MAX_T], ufrac[NALGO][NROUTING][MAX_T]; /* mean over ranks */
    int nranks[NALGO][NROUTING][MAX_T];                                 /* that reported them */
    int used[NALGO][NROUTING][MAX_T];                                   /* the routing run */
    char cfg[NALGO][NROUTING][MAX_T][NMODE][96]; /* config or path, per mode (alike on all ranks) */
    int stats_mode; /* the mode whose rows' routing statistics are averaged: the first run */
} table_t;

static void table_fold(const opts_t *o, table_t *tb, const result_t *all, int n)
{
    memset(tb, 0, sizeof(*tb));
    tb->stats_mode = o->modes[0];
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
        tb->ffn[a][g][t][r->mode] = fmax(tb->ffn[a][g][t][r->mode], r->ffn_ms);
        /* Every mode's rows carry the ranks' routing statistics; count them from one. */
        if (r->mode == INCMOE_MOE_BASELINE) {
            double v[4] = {r->ex_ms, r->out_ms, r->ffn_ms, r->back_ms};
            for (int k = 0; k < 4; k++)
                tb->phase[a][g][t][k] = fmax(tb->phase[a][g][t][k], v[k]);
        }
        if (r->mode == tb->stats_mode) {
            tb->kbar[a][g][t] += r->kbar;
            tb->ufrac[a][g][t] += r->ufrac;
            tb->nranks[a][g][t]++;
        }
        tb->cos[a][g][t] = fmin(tb->cos[a][g][t], r->cos_min);
        tb->err[a][g][t] = fmax(tb->err[a][g][t], r->ref_err);
        snprintf(tb->cfg[a][g][t][r->mode], sizeof(tb->cfg[0][0][0][0]), "%s", r->cfg);
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
    printf("\nincmoe-moe-bench: N=%d E=%d k=%d H=%d I=%d %s%s%s, %s backend%s, route %s (experts "
           "placed %s), median of %d forwards (slowest rank)\n",
           o->nranks, o->E, o->k, o->H, o->I, incmoe_dtype_name(o->dtype),
           o->model ? ", model " : "", o->model ? o->model : "",
           o->backend == INCMOE_MOE_BACKEND_CUDA ? "cuda" : "cpu",
           o->in_process ? ", ranks in one process" : "", o->zipf > 0 ? "zipf" : "uniform",
           o->place_offsets != NULL ? "with replicas" : "contiguously", o->iters);
    if (o->zipf > 0)
        printf("route zipf:%g, seed %llu\n", o->zipf, (unsigned long long)o->seed);
    mb_placement_print(o);
    for (int t = 0; t < o->ntokens && o->place_offsets != NULL; t++)
        printf("busiest rank's received rows per forward at %d tok/rank: %lld with replicas, "
               "%lld contiguous without (the layer's per-token rule as "
               "incmoe_moe_placement_rows replays it)\n",
               o->tokens[t], (long long)mb_placement_busiest(o, o->tokens[t], 1),
               (long long)mb_placement_busiest(o, o->tokens[t], 0));
    printf("%8s %-5s %-13s %10s %10s %10s %11s %11s %9s %9s %6s %9s %10s %10s %9s  %s\n",
           "tok/rank", "algo", "routing", "base_ms", "pipe_ms", "auto_ms", "base_tok/s",
           "pipe_tok/s", "pipe/base", "vs_ring_b", "k-bar", "ideal_ms", "pipe/ideal", "min_cos",
           "ref_err", "pipelined config; paths run where auto");
}

/* The routing column: the one asked for, and for auto the one it ran. */
static void routing_label(int asked, int used, char *buf, size_t len)
{
    if (asked == INCMOE_MOE_ROUTING_AUTO)
        snprintf(buf, len, "auto>%s", incmoe_moe_routing_name((incmoe_moe_routing_t)used));
    else
        snprintf(buf, len, "%s", incmoe_moe_routing_name((incmoe_moe_routing_t)asked));
}

/* A number of the table, or "-" where it has none (a mode not run, or a ratio without both
   of its sides). */
static const char *cell(char *buf, size_t len, const char *fmt, double v, int have)
{
    if (have)
        snprintf(buf, len, fmt, v);
    else
        snprintf(buf, len, "-");
    return buf;
}

/* The last column: pipelined mode's configuration, and the path each mode left to the layer
   ran ("baseline: path ...", "auto: path ..."). */
static void last_column(const table_t *tb, int a, int g, int t, char *buf, size_t len)
{
    const char *const *names = mb_mode_names;
    size_t at = 0;
    buf[0] = '\0';
    for (int m = 0; m < NMODE && at < len; m++) {
        const char *c = tb->cfg[a][g][t][m];
        if (!tb->have[a][g][t][m] || c[0] == '\0' || strcmp(c, "-") == 0)
            continue;
        int path = strncmp(c, "path ", 5) == 0;
        at += (size_t)snprintf(buf + at, len - at, "%s%s%s%s", at ? "; " : "", path ? names[m] : "",
                               path ? ": " : "", c);
    }
    if (at == 0)
        snprintf(buf, len, "-");
}

/* The row of algorithm a with routing g at token count index t: 1 when its outputs passed the
   checks (or the algorithm has no dispatch and combine, which the row says). */
static int table_row(const opts_t *o, const table_t *tb, int t, int a, int g)
{
    int T = o->tokens[t];
    char route[24], c[9][32], last[320];
    routing_label(g, tb->used[a][g][t], route, sizeof(route));
    for (int i = 0; i < o->nmodes; i++) {
        int m = o->modes[i];
        if (!tb->have[a][g][t][m]) {
            printf("%8d %-5s %-13s   (missing results)\n", T, algo_name(a), route);
            return 0;
        }
        if (tb->ms[a][g][t][m] < 0) {
            printf("%8d %-5s %-13s   (the algorithm has no dispatch and combine in this build)\n",
                   T, algo_name(a), route);
            return 1;
        }
    }
    int hb = tb->have[a][g][t][0], hp = tb->have[a][g][t][1], ha = tb->have[a][g][t][2];
    double b = tb->ms[a][g][t][0], p = tb->ms[a][g][t][1], au = tb->ms[a][g][t][2];
    int good =
        o->verify ? (tb->cos[a][g][t] >= 0.99999 && tb->err[a][g][t] <= tol_of(o->dtype)) : 1;
    const int full = INCMOE_MOE_ROUTING_FULL;
    double ringb =
        tb->have[INCMOE_ALGO_RING][full][t][0] ? tb->ms[INCMOE_ALGO_RING][full][t][0] : 0;
    int masked = tb->used[a][g][t] == INCMOE_MOE_ROUTING_MASKED;
    double ideal =
        ideal_ms(a, masked, o->nranks, tb->kbar[a][g][t], tb->ufrac[a][g][t], tb->phase[a][g][t]);
    last_column(tb, a, g, t, last, sizeof(last));
    printf("%8d %-5s %-13s %10s %10s %10s %11s %11s %9s %9s %6.2f %9s %10s %10.7f %9.2e  %s%s\n", T,
           algo_name(a), route, cell(c[0], 32, "%.3f", b, hb), cell(c[1], 32, "%.3f", p, hp),
           cell(c[2], 32, "%.3f", au, ha), cell(c[3], 32, "%.0f", T / (b * 1e-3), hb),
           cell(c[4], 32, "%.0f", T / (p * 1e-3), hp), cell(c[5], 32, "%.2fx", b / p, hb && hp),
           cell(c[6], 32, "%.2fx", ringb / p, hp && ringb > 0), tb->kbar[a][g][t],
           cell(c[7], 32, "%.3f", ideal, hb), cell(c[8], 32, "%.2fx", p / ideal, hb && hp),
           tb->cos[a][g][t], tb->err[a][g][t], last, good ? "" : "  VERIFY FAILED");
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

/* The FFN of a decode row: its mode's, else (a mode whose timing leaves it out) the
   baseline's of the same point; 0 when neither ran it. */
static double decode_ffn(const table_t *tb, int a, int g, int t, int m)
{
    if (tb->ffn[a][g][t][m] > 0)
        return tb->ffn[a][g][t][m];
    return tb->have[a][g][t][INCMOE_MOE_BASELINE] ? tb->ffn[a][g][t][INCMOE_MOE_BASELINE] : 0;
}

/* The decode rows: every mode's layer time of each point against the decode bound
   (moe_bench_decode.c), one row per mode, "-" where the bound lacks a part (no link rate
   known, no FFN timed).  Each line starts with "decode" so readers of the table above
   (tools/incmoe-model) tell them apart. */
static void print_decode(const opts_t *o, const table_t *tb)
{
    const double mbps = mb_link_mbps(o), row = (double)o->H * incmoe_dtype_size(o->dtype);
    printf("\ndecode rows: one layer forward against its bound, the busiest rank's dispatch "
           "bytes at the link rate + the FFN alone + its combine bytes at the link rate, in "
           "sequence (rows of %.0f B, a row up once, and down to each other rank of its set; "
           "ffn_ms as the layer timed it, the baseline's where the mode gives none)\n",
           row);
    if (mbps > 0)
        printf("link %.0f Mbit/s per direction (%s)\n", mbps,
               o->link_mbps > 0 ? "--link-mbps" : "the testbed's, TESTBED_MBPS");
    else
        printf("link rate unknown (no --link-mbps, not under tools/testbed): no bound\n");
    printf("decode %8s %-5s %-13s %-9s %10s %6s %9s %10s %8s\n", "tok/rank", "algo", "routing",
           "mode", "ms", "rows", "ffn_ms", "bound_ms", "t/bound");
    for (int t = 0; t < o->ntokens; t++) {
        double rows = mb_decode_rows(o, o->tokens[t]);
        for (int ai = 0; ai < o->nalgos; ai++)
            for (int gi = 0; gi < o->nroutings; gi++)
                for (int mi = 0; mi < o->nmodes; mi++) {
                    int a = o->algos[ai], g = o->routings[gi], m = o->modes[mi];
                    double ms = table_ms(tb, a, g, t, m), ffn = decode_ffn(tb, a, g, t, m);
                    double bound = 2 * rows * row * 8 / (mbps * 1e3) + ffn;
                    int hb = mbps > 0 && ffn > 0 && rows >= 0;
                    char route[24], c[5][32];
                    routing_label(g, tb->used[a][g][t], route, sizeof(route));
                    printf("decode %8d %-5s %-13s %-9s %10s %6s %9s %10s %8s\n", o->tokens[t],
                           algo_name(a), route, mb_mode_names[m],
                           cell(c[0], 32, "%.3f", ms, ms > 0),
                           cell(c[1], 32, "%.0f", rows, rows >= 0),
                           cell(c[2], 32, "%.3f", ffn, ffn > 0), cell(c[3], 32, "%.3f", bound, hb),
                           cell(c[4], 32, "%.2f", ms / bound, hb && ms > 0));
                }
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
    table_fold(o, tb, all, n);
    table_header(o);
    for (int t = 0; t < o->ntokens; t++)
        for (int ai = 0; ai < o->nalgos; ai++)
            for (int gi = 0; gi < o->nroutings; gi++)
                ok &= table_row(o, tb, t, o->algos[ai], o->routings[gi]);
    printf("auto_ms: mode auto, the faster mode as the layer measured it (its first forward "
           "measures, a warm-up unless -w 0); algo auto: the layer's choice of algorithm; "
           "pipe/base: speedup of the band pipeline over the same algorithm's baseline; "
           "vs_ring_b: pipelined layer time of this row against the ring baseline with full "
           "routing (vLLM's default path); k-bar: the other ranks a token goes to (mean over "
           "ranks); ideal_ms: max(outbound || inbound collective, FFN) + header exchange from "
           "the baseline's measured phases; pipe/ideal: how far the pipeline is from it.\n");
    print_targets(o, tb);
    print_decode(o, tb);
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
            r.mode < NMODE) {
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
int mb_report(const opts_t *o, FILE *const *in, int nin)
{
    int max = NMODE * NALGO * NROUTING * MAX_T * (nin > 0 ? nin : 1), n = 0, rc = 0;
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
