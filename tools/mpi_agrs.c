/*
 * mpi_agrs.c - the independent ring reference: an MPI_Iallgather and an
 * MPI_Ireduce_scatter_block of S bytes each, posted concurrently, timed until
 * both complete; eqbw = 2S / time (paper section 5.2), as incmoe-perf --op agrs.
 *
 *   mpirun -np N mpi_agrs [-b 8M] [-e 256M] [-f 2] [-n 5] [-w 1] [-c 1] [--link-mbps BW]
 *                         [--mode concurrent|sequential]
 *
 * concurrent (default): MPI_Iallgather + MPI_Ireduce_scatter_block, then
 * MPI_Waitall (OpenMPI's libnbc algorithms).  sequential: blocking
 * MPI_Allgather, then MPI_Reduce_scatter (OpenMPI's tuned algorithms, which
 * include rings: coll_tuned_allgather_algorithm 4 and
 * coll_tuned_reduce_scatter_algorithm 3).  A ring gains nothing from running
 * concurrently (both use both link directions), so both have the bound
 * N/(N-1)*BW.
 *
 * S is the size of the gathered buffer (the AllGather's output, the
 * ReduceScatter's input): every rank contributes and receives S/N bytes.
 * Data are fp32 with a sum; the check fills small integers so the exact result
 * is known, and compares every element.  Rank 0 prints the table.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

typedef struct {
    size_t min_bytes, max_bytes;
    int factor, iters, warmup, check, sequential;
    double link_mbps;
} opts_t;

static int parse_size(const char *text, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || errno != 0 || text[0] == '-')
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        v <<= 10;
        end++;
        break;
    case 'M':
    case 'm':
        v <<= 20;
        end++;
        break;
    case 'G':
    case 'g':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_int(const char *text, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.min_bytes = 8u << 20,
                  .max_bytes = 256u << 20,
                  .factor = 2,
                  .iters = 5,
                  .warmup = 1,
                  .check = 1,
                  .link_mbps = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = v == NULL;
        if (strcmp(a, "-b") == 0 && v)
            bad = parse_size(v, &o->min_bytes);
        else if (strcmp(a, "-e") == 0 && v)
            bad = parse_size(v, &o->max_bytes);
        else if (strcmp(a, "-f") == 0 && v)
            bad = parse_int(v, 2, 1024, &o->factor);
        else if (strcmp(a, "-n") == 0 && v)
            bad = parse_int(v, 1, 1000000, &o->iters);
        else if (strcmp(a, "-w") == 0 && v)
            bad = parse_int(v, 0, 1000000, &o->warmup);
        else if (strcmp(a, "-c") == 0 && v)
            bad = parse_int(v, 0, 1, &o->check);
        else if (strcmp(a, "--mode") == 0 && v) {
            bad = strcmp(v, "concurrent") != 0 && strcmp(v, "sequential") != 0;
            o->sequential = strcmp(v, "sequential") == 0;
        } else if (strcmp(a, "--link-mbps") == 0 && v) {
            char *end;
            o->link_mbps = strtod(v, &end);
            bad = end == v || *end != '\0' || o->link_mbps <= 0;
        } else {
            fprintf(
                stderr,
                "mpi_agrs: unknown option '%s' (expected -b -e -f -n -w -c --link-mbps --mode)\n",
                a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "mpi_agrs: bad or missing value for %s: '%s'\n", a, v ? v : "");
            return -1;
        }
        i++;
    }
    if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "mpi_agrs: need 0 < -b <= -e (got %zu, %zu)\n", o->min_bytes, o->max_bytes);
        return -1;
    }
    return 0;
}

/* Rank r's element i of the N-block input: small integers, so the sum over up
   to a few hundred ranks is exact in fp32. */
static float pattern(int rank, size_t i)
{
    return (float)((int)((i * 7 + (size_t)rank * 13) % 9) - 4);
}

/* One AG + RS pair, S = count * 4 bytes; returns the number of wrong elements
   on this rank of the last pair when check is set. */
static long long run_size(const opts_t *o, int rank, int n, size_t count, float *ag_send,
                          float *ag_recv, float *rs_send, float *rs_recv, double *time_us)
{
    size_t blk = count / n;
    if (o->check) {
        for (size_t i = 0; i < blk; i++)
            ag_send[i] = pattern(rank, (size_t)rank * blk + i);
        for (size_t i = 0; i < count; i++) {
            rs_send[i] = pattern(rank, i);
            ag_recv[i] = -1000.0f;
        }
        for (size_t i = 0; i < blk; i++)
            rs_recv[i] = -1000.0f;
    }
    MPI_Request req[2];
    double t0 = 0;
    int counts[n];
    for (int r = 0; r < n; r++)
        counts[r] = (int)blk;
    for (int it = 0; it < o->warmup + o->iters; it++) {
        if (it == o->warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (o->sequential) {
            MPI_Allgather(ag_send, (int)blk, MPI_FLOAT, ag_recv, (int)blk, MPI_FLOAT,
                          MPI_COMM_WORLD);
            MPI_Reduce_scatter(rs_send, rs_recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            continue;
        }
        MPI_Iallgather(ag_send, (int)blk, MPI_FLOAT, ag_recv, (int)blk, MPI_FLOAT, MPI_COMM_WORLD,
                       &req[0]);
        MPI_Ireduce_scatter_block(rs_send, rs_recv, (int)blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    double t = (MPI_Wtime() - t0) / o->iters * 1e6;
    MPI_Allreduce(&t, time_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long long wrong = 0;
    if (o->check) {
        for (size_t i = 0; i < count; i++)
            wrong += ag_recv[i] != pattern((int)(i / blk), i);
        for (size_t i = 0; i < blk; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += pattern(r, (size_t)rank * blk + i);
            wrong += rs_recv[i] != want;
        }
    }
    long long total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    opts_t o;
    if (parse_args(argc, argv, &o) != 0) {
        MPI_Finalize();
        return 2;
    }
    size_t unit = (size_t)n * sizeof(float);
    size_t max_count = o.max_bytes / unit * n;
    if (max_count == 0 || max_count / n > (size_t)INT32_MAX) {
        if (rank == 0)
            fprintf(stderr, "mpi_agrs: -e %zu gives no whole element per rank or too many\n",
                    o.max_bytes);
        MPI_Finalize();
        return 2;
    }
    float *ag_send = malloc(max_count / n * sizeof(float));
    float *ag_recv = malloc(max_count * sizeof(float));
    float *rs_send = malloc(max_count * sizeof(float));
    float *rs_recv = malloc(max_count / n * sizeof(float));
    if (!ag_send || !ag_recv || !rs_send || !rs_recv) {
        fprintf(stderr, "mpi_agrs: rank %d: cannot allocate %zu bytes of buffers\n", rank,
                (2 * max_count + 2 * max_count / n) * sizeof(float));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Touch every page outside the timed loop. */
    memset(ag_send, 0, max_count / n * sizeof(float));
    memset(rs_recv, 0, max_count / n * sizeof(float));
    memset(ag_recv, 0, max_count * sizeof(float));
    memset(rs_send, 0, max_count * sizeof(float));

    double bound = o.link_mbps > 0 ? o.link_mbps * n / (n - 1) : 0;
    if (rank == 0) {
        printf("# mpi_agrs: %s, nranks %d, iters %d, warmup %d, check %d\n",
               o.sequential ? "MPI_Allgather then MPI_Reduce_scatter (blocking, sequential)"
                            : "MPI_Iallgather + MPI_Ireduce_scatter_block concurrently",
               n, o.iters, o.warmup, o.check);
        if (bound > 0)
            printf("# link %.0f Mbit/s per direction; ring bound N/(N-1)*BW = %.1f Mbit/s\n",
                   o.link_mbps, bound);
        printf("#%11s %12s %8s %6s %10s %8s %8s %8s %11s %7s\n", "size", "count", "type", "redop",
               "time(us)", "algbw", "busbw", "#wrong", "eqbw(Mb/s)", "%bound");
        printf("#%11s %12s %8s %6s %10s %8s %8s %8s %11s %7s\n", "(B)", "(elements)", "", "", "",
               "(GB/s)", "(GB/s)", "", "", "");
    }
    long long wrong_all = 0;
    for (size_t s = o.min_bytes; s <= o.max_bytes; s *= o.factor) {
        size_t count = s / unit * n;
        if (count == 0)
            continue;
        double t;
        long long wrong = run_size(&o, rank, n, count, ag_send, ag_recv, rs_send, rs_recv, &t);
        wrong_all += wrong;
        if (rank == 0) {
            double bytes = (double)count * sizeof(float);
            double algbw = 2 * bytes / t / 1e3; /* GB/s */
            double eq = 2 * bytes * 8 / t;      /* Mbit/s */
            printf(" %11zu %12zu %8s %6s %10.1f %8.4f %8.4f %8lld %11.1f", (size_t)bytes, count,
                   "float", "sum", t, algbw, algbw * (n - 1) / n, o.check ? wrong : -1LL, eq);
            if (bound > 0)
                printf(" %7.1f", 100 * eq / bound);
            printf("\n");
            fflush(stdout);
        }
        if (s > o.max_bytes / o.factor)
            break;
    }
    if (rank == 0)
        printf("# errors: %lld\n", wrong_all);
    free(ag_send);
    free(ag_recv);
    free(rs_send);
    free(rs_recv);
    MPI_Finalize();
    return wrong_all != 0;
}
