/*
 * mpi_dc.c - the independent reference of incmoe-perf --op dc: one MoE step's
 * dispatch and the previous step's combine posted at once as two
 * MPI_Ialltoallv, then MPI_Waitall and the owner's sum of its rows' partials,
 * with incmoe-perf's routing (route.h: the same experts for the same -E, -k,
 * --route, --placement and --seed).
 *
 *   mpirun -np N mpi_dc [--tokens 16] [--hidden 1024] [-E 64] [-k 8] [--route uniform]
 *                       [--placement contiguous] [--seed 1] [-n 10] [-w 2] [--link-mbps BW]
 *
 * Rows are fp32.  The dispatch sends each row to every other rank of its set
 * (packed by destination in the step, as a program using MPI must), the
 * combine sends each received row's partial back, and the owner adds the
 * partials of the others in ascending rank order and its own last.  Rows a
 * rank holds for itself stay local, as in incmoe.  Every step but the first
 * carries both; the first dispatches alone, untimed.
 *
 * Rank 0 prints incmoe-perf --op dc's columns (time in us, algbw, busbw,
 * #wrong, the busiest rank's rows and bytes per step, counted as incmoe-perf
 * counts a2a, and with --link-mbps the bound and time / bound), so the two
 * tables sit side by side.  time is the median over the timed steps of the
 * slowest rank's step (steps run back to back; the mean is printed too, which
 * is what incmoe-perf's time is).  The check fills small integers, exact in
 * fp32, and compares every element of the last step's received rows and
 * reduced rows; the exit status is 1 when one is wrong.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dc_columns.h"
#include "route.h"

typedef struct {
    int tokens, hidden, iters, warmup;
    double link_mbps;
    inc_route_spec_t route;
} opts_t;

/* One rank's step: its routing, counts, buffers and per-step times. */
typedef struct {
    const opts_t *o;
    int rank, n;
    size_t T, H;
    inc_route_t route;
    int *cnt;                      /* [N x N]: rows of s whose set holds d, at s * N + d (d != s) */
    int *sc, *sd, *rc, *rd;        /* the dispatch's send and receive counts and offsets (floats) */
    float *x, *pack, *recv, *part; /* own rows; packed by destination; received; their partials */
    float *back, *out;             /* the partials of own rows, as they come back; the results */
    double *times;                 /* [iters] seconds per timed step */
} dc_t;

static int parse_int(const char *text, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_value(opts_t *o, const char *a, const char *v)
{
    if (!strcmp(a, "--tokens"))
        return parse_int(v, 0, 1 << 20, &o->tokens);
    if (!strcmp(a, "--hidden"))
        return parse_int(v, 1, 1 << 20, &o->hidden);
    if (!strcmp(a, "-E"))
        return parse_int(v, 1, 65536, &o->route.experts);
    if (!strcmp(a, "-k"))
        return parse_int(v, 1, 65536, &o->route.k);
    if (!strcmp(a, "-n"))
        return parse_int(v, 1, 1000000, &o->iters);
    if (!strcmp(a, "-w"))
        return parse_int(v, 0, 1000000, &o->warmup);
    if (!strcmp(a, "--route"))
        return inc_route_parse(v, &o->route);
    if (!strcmp(a, "--placement"))
        return inc_placement_parse(v, &o->route.placement);
    if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        o->route.seed = strtoull(v, &end, 10);
        return end == v || *end != '\0' || errno != 0 || v[0] == '-' ? -1 : 0;
    }
    char *end;
    o->link_mbps = strtod(v, &end);
    return end == v || *end != '\0' || !(o->link_mbps > 0 && o->link_mbps <= 1e9) ? -1 : 0;
}

/* The options; rank 0 says what was wrong. */
static int parse_args(int argc, char **argv, int rank, int n, opts_t *o)
{
    static const char *const names[] = {"--tokens", "--hidden",   "-E",      "-k",
                                        "-n",       "-w",         "--route", "--placement",
                                        "--seed",   "--link-mbps"};
    *o = (opts_t){.tokens = 16, .hidden = 1024, .iters = 10, .warmup = 2};
    o->route = (inc_route_spec_t){.nranks = n, .experts = 64, .k = 8, .seed = 1};
    for (int i = 1; i < argc; i += 2) {
        int known = 0;
        for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++)
            known |= strcmp(argv[i], names[j]) == 0;
        if (!known && rank == 0)
            fprintf(stderr,
                    "mpi_dc: unknown option '%s' (expected --tokens --hidden -E -k "
                    "--route --placement --seed -n -w --link-mbps)\n",
                    argv[i]);
        if (!known)
            return -1;
        if (i + 1 == argc || parse_value(o, argv[i], argv[i + 1]) != 0) {
            if (rank == 0)
                fprintf(stderr, "mpi_dc: bad or missing value for %s: '%s'\n", argv[i],
                        i + 1 < argc ? argv[i + 1] : "");
            return -1;
        }
    }
    if (o->route.experts < n || o->route.k > o->route.experts) {
        if (rank == 0)
            fprintf(stderr, "mpi_dc: need N <= E and 1 <= k <= E (N=%d, E=%d, k=%d)\n", n,
                    o->route.experts, o->route.k);
        return -1;
    }
    return 0;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element j of rank s's row i: an integer in -8..8 that differs from row to row. */
static float row_value(int s, size_t i, size_t j)
{
    return (float)((int)(mix((uint64_t)s << 40 ^ (uint64_t)i << 20 ^ j) % 17) - 8);
}

/* Element j of rank d's partial of rank s's row i: an integer in -8..8; sums of up to a few
   hundred are exact in fp32. */
static float partial_value(int d, int s, size_t i, size_t j)
{
    return (float)((int)(mix(0x5eedull << 48 ^ (uint64_t)d << 36 ^ (uint64_t)s << 24 ^
                             (uint64_t)i << 12 ^ j) %
                         17) -
                   8);
}

static int has(const dc_t *dc, int s, size_t i, int d)
{
    return inc_route_has(inc_route_set(&dc->route, s, i), d);
}

/* The routing, the counts and offsets, and the buffers (partials filled in the received
   order: by source rank, then row). */
static int dc_setup(dc_t *dc)
{
    const int n = dc->n, me = dc->rank;
    size_t H = dc->H, sent = 0, got = 0;
    if (inc_route_make(&dc->o->route, dc->T, &dc->route) != 0)
        return -1;
    dc->cnt = calloc((size_t)n * n, sizeof(int));
    dc->sc = calloc((size_t)n, sizeof(int)), dc->sd = calloc((size_t)n, sizeof(int));
    dc->rc = calloc((size_t)n, sizeof(int)), dc->rd = calloc((size_t)n, sizeof(int));
    if (!dc->cnt || !dc->sc || !dc->sd || !dc->rc || !dc->rd)
        return -1;
    for (int s = 0; s < n; s++)
        for (size_t i = 0; i < dc->T; i++)
            for (int d = 0; d < n; d++)
                dc->cnt[s * n + d] += d != s && has(dc, s, i, d);
    for (int d = 0; d < n; d++) {
        dc->sd[d] = (int)(sent * H), dc->sc[d] = (int)(dc->cnt[me * n + d] * H);
        dc->rd[d] = (int)(got * H), dc->rc[d] = (int)(dc->cnt[d * n + me] * H);
        sent += (size_t)dc->cnt[me * n + d], got += (size_t)dc->cnt[d * n + me];
    }
    dc->x = malloc(dc->T * H * 4 + 4), dc->out = malloc(dc->T * H * 4 + 4);
    dc->pack = malloc(sent * H * 4 + 4), dc->back = malloc(sent * H * 4 + 4);
    dc->recv = malloc(got * H * 4 + 4), dc->part = malloc(got * H * 4 + 4);
    dc->times = malloc(sizeof(double) * (size_t)dc->o->iters);
    if (!dc->x || !dc->out || !dc->pack || !dc->back || !dc->recv || !dc->part || !dc->times)
        return -1;
    for (size_t i = 0; i < dc->T; i++)
        for (size_t j = 0; j < H; j++)
            dc->x[i * H + j] = row_value(me, i, j);
    size_t p = 0;
    for (int s = 0; s < n; s++)
        for (size_t i = 0; i < dc->T; i++)
            if (s != me && has(dc, s, i, me))
                for (size_t j = 0; j < H; j++, p++)
                    dc->part[p] = partial_value(me, s, i, j);
    memset(dc->recv, 0x80, got * H * 4); /* a NaN pattern: never a row value */
    return 0;
}

static void dc_free(dc_t *dc)
{
    free(dc->times), free(dc->part), free(dc->recv), free(dc->back), free(dc->pack);
    free(dc->out), free(dc->x), free(dc->rd), free(dc->rc), free(dc->sd), free(dc->sc);
    free(dc->cnt);
    inc_route_free(&dc->route);
}

/* The rows to send, by destination rank, then row. */
static void pack_rows(dc_t *dc)
{
    size_t p = 0, H = dc->H;
    for (int d = 0; d < dc->n; d++)
        for (size_t i = 0; i < dc->T; i++)
            if (d != dc->rank && has(dc, dc->rank, i, d)) {
                memcpy(dc->pack + p, dc->x + i * H, H * 4);
                p += H;
            }
}

/* The owner's results from the partials that came back: the others' in ascending rank order,
   its own last (a row no rank holds gives 0). */
static void reduce_back(dc_t *dc)
{
    size_t H = dc->H;
    const float *b = dc->back;
    memset(dc->out, 0, dc->T * H * 4);
    for (int d = 0; d < dc->n; d++)
        for (size_t i = 0; i < dc->T; i++)
            if (d != dc->rank && has(dc, dc->rank, i, d))
                for (size_t j = 0; j < H; j++)
                    dc->out[i * H + j] += *b++;
    for (size_t i = 0; i < dc->T; i++)
        if (has(dc, dc->rank, i, dc->rank))
            for (size_t j = 0; j < H; j++)
                dc->out[i * H + j] += partial_value(dc->rank, dc->rank, i, j);
}

/* One step: this step's dispatch and the previous step's combine (none before the first),
   posted at once, then both waited for and the combine's rows summed. */
static void step(dc_t *dc, int with_combine)
{
    MPI_Request req[2];
    pack_rows(dc);
    MPI_Ialltoallv(dc->pack, dc->sc, dc->sd, MPI_FLOAT, dc->recv, dc->rc, dc->rd, MPI_FLOAT,
                   MPI_COMM_WORLD, &req[0]);
    if (with_combine)
        MPI_Ialltoallv(dc->part, dc->rc, dc->rd, MPI_FLOAT, dc->back, dc->sc, dc->sd, MPI_FLOAT,
                       MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(with_combine ? 2 : 1, req, MPI_STATUSES_IGNORE);
    if (with_combine)
        reduce_back(dc);
}

/* Wrong elements of the last step's received rows and results on this rank. */
static long long check(const dc_t *dc)
{
    long long wrong = 0;
    size_t H = dc->H, p = 0;
    for (int s = 0; s < dc->n; s++)
        for (size_t i = 0; i < dc->T; i++)
            if (s != dc->rank && has(dc, s, i, dc->rank))
                for (size_t j = 0; j < H; j++)
                    wrong += dc->recv[p++] != row_value(s, i, j);
    for (size_t i = 0; i < dc->T; i++)
        for (size_t j = 0; j < H; j++) {
            float want = 0;
            for (int d = 0; d < dc->n; d++)
                if (d != dc->rank && has(dc, dc->rank, i, d))
                    want += partial_value(d, dc->rank, i, j);
            if (has(dc, dc->rank, i, dc->rank))
                want += partial_value(dc->rank, dc->rank, i, j);
            wrong += dc->out[i * H + j] != want;
        }
    return wrong;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The first dispatch alone, the warm-up steps, then the timed ones back to back. */
static void run(dc_t *dc)
{
    const opts_t *o = dc->o;
    step(dc, 0);
    for (int it = 0; it < o->warmup; it++)
        step(dc, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int it = 0; it < o->iters; it++) {
        step(dc, 1);
        double now = MPI_Wtime();
        dc->times[it] = now - t;
        t = now;
    }
}

/* Rank r's rows and bytes per step, as incmoe-perf counts a2a: its rows to the others and
   theirs to it, the partials back the same way; [0] rows out, [1] rows in. */
static void traffic(const dc_t *dc, int r, uint64_t rows[2])
{
    rows[0] = rows[1] = 0;
    for (int d = 0; d < dc->n; d++) {
        rows[0] += (uint64_t)dc->cnt[r * dc->n + d] + (uint64_t)dc->cnt[d * dc->n + r];
        rows[1] += (uint64_t)dc->cnt[d * dc->n + r] + (uint64_t)dc->cnt[r * dc->n + d];
    }
}

static void print_header(const dc_t *dc)
{
    const opts_t *o = dc->o;
    char route[64];
    inc_route_text(&o->route, route, sizeof(route));
    printf("# mpi_dc: OpenMPI, a step's dispatch and the previous step's combine as two "
           "MPI_Ialltoallv posted at once, MPI_Waitall, the owner's sum; nranks %d, iters %d, "
           "warmup %d\n",
           dc->n, o->iters, o->warmup);
    printf("# tokens %d, hidden %d, row %zu B, E %d, k %d, route %s, placement %s, seed %llu\n",
           o->tokens, o->hidden, dc->H * 4, o->route.experts, o->route.k, route,
           inc_placement_names[o->route.placement], (unsigned long long)o->route.seed);
    printf("# rows/bytes: per step, of the network only (own rows stay local), as incmoe-perf "
           "counts a2a; busbw = the busiest rank and direction's bytes / time\n");
    printf("# time: the median over the timed steps of the slowest rank's step\n");
    dc_print_columns(o->link_mbps);
}

/* Rank 0's row from the slowest rank's step times (steps[]) and every rank's wrong count. */
static void print_row(const dc_t *dc, double *steps, long long wrong)
{
    const opts_t *o = dc->o;
    uint64_t most[2] = {0, 0}, rows[2];
    double mean = 0;
    for (int r = 0; r < dc->n; r++) {
        traffic(dc, r, rows);
        most[0] = rows[0] > most[0] ? rows[0] : most[0];
        most[1] = rows[1] > most[1] ? rows[1] : most[1];
    }
    for (int it = 0; it < o->iters; it++)
        mean += steps[it] / o->iters;
    qsort(steps, (size_t)o->iters, sizeof(double), cmp_double);
    const double t_us = steps[o->iters / 2] * 1e6, rb = (double)dc->H * 4;
    const double size = (double)dc->T * rb, busiest = (most[0] > most[1] ? most[0] : most[1]) * rb;
    printf(" %11.0f %12zu %8s %6s %11.1f %8.4f %8.4f %8lld %10llu %10llu %12.0f %12.0f", size,
           dc->T * dc->H, "float", "sum", t_us, size / t_us * 1e-3, busiest / t_us * 1e-3, wrong,
           (unsigned long long)most[0], (unsigned long long)most[1], most[0] * rb, most[1] * rb);
    dc_print_bound(o->link_mbps, busiest, t_us);
    printf("\n# mean step %.1f us (incmoe-perf's time is a mean); min %.1f, max %.1f us\n",
           mean * 1e6, steps[0] * 1e6, steps[o->iters - 1] * 1e6);
    printf("# errors: %lld\n", wrong);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n, rc = 2;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    opts_t o;
    dc_t dc = {.o = &o, .rank = rank, .n = n};
    if (parse_args(argc, argv, rank, n, &o) != 0)
        goto out;
    dc.T = (size_t)o.tokens, dc.H = (size_t)o.hidden;
    if (dc_setup(&dc) != 0) {
        fprintf(stderr, "mpi_dc: rank %d: out of memory for %d tokens of %d floats\n", rank,
                o.tokens, o.hidden);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        print_header(&dc);
    run(&dc);
    double *steps = malloc(sizeof(double) * (size_t)o.iters);
    if (steps == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Allreduce(dc.times, steps, o.iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long long mine = check(&dc), wrong = 0;
    MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        print_row(&dc, steps, wrong);
    free(steps);
    rc = wrong != 0;
out:
    dc_free(&dc);
    MPI_Finalize();
    return rc;
}
