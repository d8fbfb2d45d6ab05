/*
 * incmoe - the command-line front door.
 *
 *   incmoe demo [-N RANKS] [-s SIZES] [--leaves K] [--switchd PATH]
 *       Starts incmoe-switchd and RANKS local rank processes on loopback, runs
 *       a concurrent AllGather + ReduceScatter and an AllReduce on each size,
 *       checks every byte against a reference and prints a table.  With
 *       --leaves, the switches are a tree: a root and K leaves (--parent),
 *       the ranks spread over the leaves, and the demo prints which switch
 *       serves which ranks.
 *   incmoe config
 *       Lists every INCMOE_* setting with its value and meaning.
 */
#include "incmoe/incmoe.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "switchd_find.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/text.h"

#define MAX_SIZES  32
#define MAX_LEAVES 16

/* Why the setting's value in force is not one it takes, into why; 0 when it is valid (or
   unset, or a text this tool cannot judge). */
static int config_invalid(const inc_config_entry_t *e, const char *v, char *why, size_t len)
{
    long long x;
    if (v == NULL)
        return 0;
    if (e->kind != INC_CONFIG_TEXT)
        return inc_parse_int(v, e->min, e->max, e->kind == INC_CONFIG_SIZE, &x, why, len) != 0;
    if (strcmp(e->name, "INCMOE_LOG_LEVEL") == 0 && inc_log_level_parse(v) < 0) {
        snprintf(why, len, "not a log level (error, warn, info, debug, trace, or 0..4)");
        return 1;
    }
    return 0;
}

/* The table with the values in force; a value a setting does not take is named on stderr
   (the library logs it and goes on with the default), and the exit status is 1. */
static int cmd_config(void)
{
    int bad = 0;
    printf("%-22s %-12s %s\n", "setting", "value", "meaning");
    for (size_t i = 0; i < inc_config_table_size; i++) {
        const inc_config_entry_t *e = &inc_config_table[i];
        const char *v = inc_config_get_str(e->name);
        char range[64] = "", why[160], shown[64];
        if (e->kind != INC_CONFIG_TEXT) {
            strcpy(range, " [");
            inc_config_range(e, range + 2, sizeof(range) - 3);
            strcat(range, "]");
        }
        printf("%-22s %-12s %s%s\n", e->name, v ? v : "(unset)", e->doc, range);
        if (config_invalid(e, v, why, sizeof(why))) {
            fprintf(stderr, "incmoe config: %s=%s: %s; the default is used\n", e->name,
                    inc_text_sanitize(shown, sizeof(shown), v, strlen(v)), why);
            bad = 1;
        }
    }
    return bad;
}

/* Values that sum exactly in fp32 for any rank count used here. */
static float ag_value(int rank, size_t i)
{
    return (float)((rank * 7919 + (int)(i % 4093)) % 2048);
}

static float rs_value(int rank, int block, size_t i)
{
    return (float)((rank * 31 + block * 17 + (int)(i % 1021)) % 512);
}

/* One size's buffers of a demo rank, registered: the AllGather's send and receive buffers, the
   ReduceScatter's, and the AllReduce's, which it reduces in place. */
enum { AG_SEND, AG_RECV, RS_SEND, RS_RECV, AR_BUF, DEMO_NBUF };

typedef struct {
    size_t per_rank; /* elements of one rank's block */
    float *buf[DEMO_NBUF];
    incmoe_mr_t *mr[DEMO_NBUF];
} demo_bufs_t;

/* The inputs of rank `rank`, and the outputs poisoned with zeros. */
static void demo_fill(demo_bufs_t *b, int rank, int nranks)
{
    size_t n = b->per_rank;
    for (size_t i = 0; i < n; i++)
        b->buf[AG_SEND][i] = ag_value(rank, i);
    for (int blk = 0; blk < nranks; blk++)
        for (size_t i = 0; i < n; i++)
            b->buf[RS_SEND][(size_t)blk * n + i] = rs_value(rank, blk, i);
    for (size_t i = 0; i < n * (size_t)nranks; i++)
        b->buf[AR_BUF][i] = rs_value(rank, 0, i);
    memset(b->buf[AG_RECV], 0, n * sizeof(float) * (size_t)nranks);
    memset(b->buf[RS_RECV], 0, n * sizeof(float));
}

/* Allocates, fills and registers the buffers of one size; 1 after saying why on out_fd. */
static int demo_bufs_open(incmoe_comm_t *comm, int rank, int nranks, size_t size, demo_bufs_t *b,
                          int out_fd)
{
    memset(b, 0, sizeof(*b));
    b->per_rank = size / (size_t)nranks / sizeof(float);
    if (b->per_rank == 0)
        b->per_rank = 1;
    size_t block = b->per_rank * sizeof(float), all = block * (size_t)nranks;
    const size_t bytes[DEMO_NBUF] = {block, all, all, block, all};
    int i;
    for (i = 0; i < DEMO_NBUF; i++) {
        if ((b->buf[i] = malloc(bytes[i])) == NULL) {
            dprintf(out_fd, "error rank %d: out of memory for %zu bytes\n", rank, all);
            goto err_free;
        }
    }
    demo_fill(b, rank, nranks);
    for (i = 0; i < DEMO_NBUF; i++) {
        incmoe_status_t st = incmoe_mem_register(comm, b->buf[i], bytes[i], &b->mr[i]);
        if (st != INCMOE_OK) {
            dprintf(out_fd, "error rank %d: registering %zu bytes: %s\n", rank, bytes[i],
                    incmoe_strerror(st));
            goto err_deregister;
        }
    }
    return 0;

err_deregister:
    while (i-- > 0)
        incmoe_mem_deregister(comm, b->mr[i]);
err_free:
    for (i = 0; i < DEMO_NBUF; i++)
        free(b->buf[i]);
    return 1;
}

static void demo_bufs_close(incmoe_comm_t *comm, demo_bufs_t *b)
{
    for (int i = DEMO_NBUF - 1; i >= 0; i--) {
        incmoe_mem_deregister(comm, b->mr[i]);
        free(b->buf[i]);
    }
}

/* Lines the ranks up (so the timing is of the collectives, not of arrival), then an AllGather
   and a ReduceScatter at once, then an AllReduce: their times in t_agrs and t_ar (s). */
static incmoe_status_t demo_collectives(incmoe_comm_t *comm, const demo_bufs_t *b, int nranks,
                                        double *t_agrs, double *t_ar)
{
    size_t block = b->per_rank * sizeof(float);
    incmoe_layout_t layout = {.block_stride = block, .offset = 0, .length = block};
    incmoe_req_t bar, ag, rs, ar;
    incmoe_status_t st = incmoe_barrier(comm, &bar);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &bar);
    double t0 = inc_now_s();
    if (st == INCMOE_OK)
        st = incmoe_allgather(comm, b->mr[AG_SEND], 0, b->mr[AG_RECV], 0, &layout, &ag);
    if (st == INCMOE_OK)
        st = incmoe_reducescatter(comm, b->mr[RS_SEND], 0, b->mr[RS_RECV], 0, &layout,
                                  INCMOE_FLOAT32, INCMOE_SUM, &rs);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &ag);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &rs);
    double t1 = inc_now_s();
    if (st == INCMOE_OK)
        st = incmoe_allreduce(comm, b->mr[AR_BUF], 0, b->mr[AR_BUF], 0,
                              b->per_rank * (size_t)nranks, INCMOE_FLOAT32, INCMOE_SUM, &ar);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &ar);
    *t_agrs = t1 - t0;
    *t_ar = inc_now_s() - t1;
    return st;
}

/* Every element of the three results against the reference: how many are wrong. */
static size_t demo_wrong(const demo_bufs_t *b, int rank, int nranks)
{
    size_t n = b->per_rank, wrong = 0;
    for (int blk = 0; blk < nranks; blk++)
        for (size_t i = 0; i < n; i++)
            wrong += b->buf[AG_RECV][(size_t)blk * n + i] != ag_value(blk, i);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < nranks; r++)
            want += rs_value(r, rank, i);
        wrong += b->buf[RS_RECV][i] != want;
    }
    for (size_t i = 0; i < n * (size_t)nranks; i++) {
        float want = 0;
        for (int r = 0; r < nranks; r++)
            want += rs_value(r, 0, i);
        wrong += b->buf[AR_BUF][i] != want;
    }
    return wrong;
}

/* One size: its "result" line, or an "error" line and 1. */
static int demo_size(incmoe_comm_t *comm, int rank, int nranks, size_t size, int out_fd)
{
    demo_bufs_t b;
    double t_agrs, t_ar;
    if (demo_bufs_open(comm, rank, nranks, size, &b, out_fd) != 0)
        return 1;
    incmoe_status_t st = demo_collectives(comm, &b, nranks, &t_agrs, &t_ar);
    if (st != INCMOE_OK) {
        char why[256];
        incmoe_comm_error(comm, why, sizeof(why));
        dprintf(out_fd, "error rank %d: %s: %s\n", rank, incmoe_strerror(st), why);
    } else {
        dprintf(out_fd, "result %zu %.1f %.1f %zu\n", b.per_rank * sizeof(float) * nranks,
                t_agrs * 1e6, t_ar * 1e6, demo_wrong(&b, rank, nranks));
    }
    demo_bufs_close(comm, &b);
    return st != INCMOE_OK;
}

/* One rank of the demo: writes "size ag_rs_us allreduce_us errors" lines to out_fd. */
static int demo_rank(const char *addr, uint64_t job, int rank, int nranks, const size_t *sizes,
                     int nsizes, int out_fd)
{
    incmoe_comm_params_t params = {
        .switch_addr = addr, .job_id = job, .rank = rank, .nranks = nranks};
    incmoe_comm_t *comm;
    incmoe_status_t st = incmoe_comm_create(&params, &comm);
    if (st != INCMOE_OK) {
        dprintf(out_fd, "error rank %d: cannot join: %s\n", rank, incmoe_strerror(st));
        return 1;
    }
    int failed = 0;
    for (int k = 0; k < nsizes && !failed; k++)
        failed = demo_size(comm, rank, nranks, sizes[k], out_fd);
    st = incmoe_comm_destroy(comm);
    return failed || st != INCMOE_OK;
}

static int parse_sizes(const char *text, size_t *sizes, int *n)
{
    char *copy = strdup(text), *save = NULL;
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        long long v;
        char why[128];
        if (inc_parse_int(tok, 1, 1ll << 40, 1, &v, why, sizeof(why)) != 0 || *n == MAX_SIZES) {
            fprintf(stderr, "incmoe demo: bad value '%s' for -s: %s (e.g. 4K,1M,64M; at most %d)\n",
                    tok, *n == MAX_SIZES ? "too many sizes" : why, MAX_SIZES);
            free(copy);
            return -1;
        }
        sizes[(*n)++] = (size_t)v;
    }
    free(copy);
    return *n > 0 ? 0 : -1;
}

/* What every demo rank needs; out[r] collects rank r's lines. */
typedef struct {
    uint64_t job;
    const size_t *sizes;
    int nsizes;
    FILE *out[64];
    const char *at[64]; /* the switch each rank joins: its leaf, or NULL for the one switch */
} demo_t;

static int demo_rank_main(int rank, int nranks, const char *addr, void *arg)
{
    demo_t *d = arg;
    if (d->at[rank] != NULL)
        addr = d->at[rank];
    return demo_rank(addr, d->job, rank, nranks, d->sizes, d->nsizes, fileno(d->out[rank]));
}

/* The demo's switches: one, or a root and `leaves` leaves that join it (the ranks spread over
   them in blocks, the first N % K leaves one more); d->at says where each rank goes.  0 when
   all came up, else -1 with the started ones stopped. */
static int demo_switches(const char *switchd, int nranks, int leaves, inc_launch_switch_t *sw,
                         demo_t *d)
{
    if (inc_launch_switch_start(NULL, switchd, NULL, 20, &sw[0]) != 0) {
        fprintf(stderr, "incmoe demo: could not start %s\n", switchd);
        return -1;
    }
    if (leaves == 0) {
        printf("incmoe demo: switch at %s, %d ranks, fp32 sum\n", sw[0].addr, nranks);
        return 0;
    }
    printf("incmoe demo: a tree of switches, %d ranks, fp32 sum\n", nranks);
    printf("  root   %-21s serves leaves 0..%d\n", sw[0].addr, leaves - 1);
    const char *parent[] = {"--parent", sw[0].addr, NULL};
    for (int l = 0, first = 0; l < leaves; l++) {
        int count = nranks / leaves + (l < nranks % leaves);
        if (inc_launch_switch_start(NULL, switchd, parent, 20, &sw[1 + l]) != 0) {
            fprintf(stderr, "incmoe demo: could not start leaf %d (%s --parent %s)\n", l, switchd,
                    sw[0].addr);
            while (l >= 0)
                inc_launch_switch_stop(&sw[l--], 5);
            return -1;
        }
        for (int r = first; r < first + count; r++)
            d->at[r] = sw[1 + l].addr;
        printf("  leaf %d %-21s serves ranks %d..%d\n", l, sw[1 + l].addr, first,
               first + count - 1);
        first += count;
    }
    return 0;
}

static void demo_switches_stop(inc_launch_switch_t *sw, int leaves)
{
    for (int l = leaves; l >= 0; l--)
        inc_launch_switch_stop(&sw[l], 5);
}

/* One output file per rank, read after the ranks ended; -1 when one could not be made. */
static int demo_open_outputs(int nranks, demo_t *d)
{
    for (int r = 0; r < nranks; r++)
        if ((d->out[r] = tmpfile()) == NULL) {
            fprintf(stderr, "incmoe demo: tmpfile: %s\n", strerror(errno));
            while (r-- > 0)
                fclose(d->out[r]);
            return -1;
        }
    return 0;
}

/* Prints the table from each rank's lines (the slowest rank's time); 0 when all are right. */
static int demo_report(int nranks, demo_t *d)
{
    double agrs[MAX_SIZES] = {0}, ar[MAX_SIZES] = {0};
    size_t wrong[MAX_SIZES] = {0}, bytes[MAX_SIZES] = {0};
    int seen[MAX_SIZES] = {0}, rc = 0;
    for (int r = 0; r < nranks; r++) {
        FILE *f = d->out[r];
        char line[512];
        int k = 0;
        rewind(f);
        while (fgets(line, sizeof(line), f) != NULL) {
            size_t b, w;
            double t1, t2;
            if (sscanf(line, "result %zu %lf %lf %zu", &b, &t1, &t2, &w) == 4 && k < d->nsizes) {
                bytes[k] = b;
                agrs[k] = t1 > agrs[k] ? t1 : agrs[k];
                ar[k] = t2 > ar[k] ? t2 : ar[k];
                wrong[k] += w;
                seen[k]++;
                k++;
            } else {
                fputs(line, stderr);
                rc = 1;
            }
        }
        fclose(f);
    }
    printf("%12s %16s %14s %10s %8s\n", "size(B)", "agrs_time(us)", "ar_time(us)", "wrong",
           "result");
    for (int k = 0; k < d->nsizes; k++) {
        int ok = seen[k] == nranks && wrong[k] == 0;
        printf("%12zu %16.1f %14.1f %10zu %8s\n", bytes[k], agrs[k], ar[k], wrong[k],
               ok ? "OK" : "FAIL");
        if (!ok)
            rc = 1;
    }
    return rc;
}

static int cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"ranks", required_argument, NULL, 'N'},   {"sizes", required_argument, NULL, 's'},
        {"switchd", required_argument, NULL, 'S'}, {"leaves", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int nranks = 4, nsizes, leaves = 0;
    long long v;
    size_t sizes[MAX_SIZES];
    const char *switchd = NULL;
    parse_sizes("4K,256K,4M,32M", sizes, &nsizes);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "N:s:h", opts, NULL)) != -1) {
        switch (c) {
        case 'N':
            if (inc_parse_arg("incmoe demo", "-N", optarg, 1, 64, 0, &v) != 0)
                return 2;
            nranks = (int)v;
            break;
        case 's':
            if (parse_sizes(optarg, sizes, &nsizes) != 0)
                return 2;
            break;
        case 'S':
            switchd = optarg;
            break;
        case 'L':
            if (inc_parse_arg("incmoe demo", "--leaves", optarg, 1, MAX_LEAVES, 0, &v) != 0)
                return 2;
            leaves = (int)v;
            break;
        case 'h':
            printf("usage: incmoe demo [-N RANKS (4)] [-s SIZES (4K,256K,4M,32M)] [--leaves K]\n"
                   "                   [--switchd PATH]\n"
                   "RANKS is 1..64; SIZE, 1..1T, is the whole gathered buffer, as in the paper's "
                   "S.\n"
                   "--leaves K (1..%d, at most RANKS): a tree of switches, a root and K leaves\n"
                   "that join it with --parent, the ranks spread over the leaves.\n",
                   MAX_LEAVES);
            return 0;
        default:
            return 2;
        }
    }
    if (leaves > nranks) {
        fprintf(stderr, "incmoe demo: --leaves %d is more than the %d ranks\n", leaves, nranks);
        return 2;
    }
    char why[1024];
    if (switchd == NULL && (switchd = inc_switchd_find(why, sizeof(why))) == NULL) {
        fprintf(stderr, "incmoe demo: %s, or pass --switchd PATH\n", why);
        return 1;
    }
    inc_launch_switch_t sw[1 + MAX_LEAVES];
    demo_t d = {
        .job = ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL), .sizes = sizes, .nsizes = nsizes};
    if (demo_switches(switchd, nranks, leaves, sw, &d) != 0)
        return 1;
    if (demo_open_outputs(nranks, &d) != 0) {
        demo_switches_stop(sw, leaves);
        return 1;
    }
    inc_launch_params_t p = {.nranks = nranks,
                             .fn = demo_rank_main,
                             .arg = &d,
                             .switch_addr = sw[0].addr,
                             .prog = "incmoe demo"};
    inc_launch_result_t res;
    /* Watched: the root (the one switch); a leaf's end fails its ranks, which is reported. */
    int rc = inc_launch_ranks(&p, &sw[0], NULL, &res) != 0;
    demo_switches_stop(sw, leaves);
    rc |= demo_report(nranks, &d);
    printf("incmoe demo: %s\n", rc == 0 ? "all results correct" : "FAILED");
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "demo") == 0)
        return cmd_demo(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "config") == 0)
        return cmd_config();
    fprintf(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
            "usage: incmoe demo [-N RANKS] [-s SIZES] [--leaves K] [--switchd PATH]\n"
            "       incmoe config      list the INCMOE_* settings\n");
    return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
