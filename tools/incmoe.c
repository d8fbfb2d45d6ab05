/*
 * incmoe - the command-line front door.
 *
 *   incmoe demo [-N RANKS] [-s SIZES] [--switchd PATH]
 *       Starts incmoe-switchd and RANKS local rank processes on loopback, runs
 *       a concurrent AllGather + ReduceScatter and an AllReduce on each size,
 *       checks every byte against a reference and prints a table.
 *   incmoe config
 *       Lists every INCMOE_* setting with its value and meaning.
 */
#include "incmoe/incmoe.h"
#include "base/config.h"
#include "launch.h"
#include "switchd_find.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/clock.h"

#define MAX_SIZES 32

static int cmd_config(void)
{
    printf("%-22s %-12s %s\n", "setting", "value", "meaning");
    for (size_t i = 0; i < inc_config_table_size; i++) {
        const char *v = inc_config_get_str(inc_config_table[i].name);
        char range[64] = "";
        if (inc_config_table[i].kind != INC_CONFIG_TEXT) {
            strcpy(range, " [");
            inc_config_range(&inc_config_table[i], range + 2, sizeof(range) - 3);
            strcat(range, "]");
        }
        printf("%-22s %-12s %s%s\n", inc_config_table[i].name, v ? v : "(unset)",
               inc_config_table[i].doc, range);
    }
    return 0;
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
    for (int k = 0; k < nsizes && !failed; k++) {
        size_t per_rank = sizes[k] / (size_t)nranks / sizeof(float); /* elements per block */
        if (per_rank == 0)
            per_rank = 1;
        size_t block = per_rank * sizeof(float);
        size_t all = block * (size_t)nranks;
        float *ag_send = malloc(block), *ag_recv = malloc(all);
        float *rs_send = malloc(all), *rs_recv = malloc(block);
        float *ar_buf = malloc(all);
        if (!ag_send || !ag_recv || !rs_send || !rs_recv || !ar_buf) {
            dprintf(out_fd, "error rank %d: out of memory for %zu bytes\n", rank, all);
            return 1;
        }
        for (size_t i = 0; i < per_rank; i++)
            ag_send[i] = ag_value(rank, i);
        for (int b = 0; b < nranks; b++)
            for (size_t i = 0; i < per_rank; i++)
                rs_send[(size_t)b * per_rank + i] = rs_value(rank, b, i);
        for (size_t i = 0; i < per_rank * (size_t)nranks; i++)
            ar_buf[i] = rs_value(rank, 0, i);
        memset(ag_recv, 0, all);
        memset(rs_recv, 0, block);

        incmoe_mr_t *m_ags, *m_agr, *m_rss, *m_rsr, *m_ar;
        incmoe_mem_register(comm, ag_send, block, &m_ags);
        incmoe_mem_register(comm, ag_recv, all, &m_agr);
        incmoe_mem_register(comm, rs_send, all, &m_rss);
        incmoe_mem_register(comm, rs_recv, block, &m_rsr);
        incmoe_mem_register(comm, ar_buf, all, &m_ar);
        incmoe_layout_t layout = {.block_stride = block, .offset = 0, .length = block};

        /* Line everyone up so the timing is of the collectives, not of arrival. */
        incmoe_req_t bar, ag, rs, ar;
        st = incmoe_barrier(comm, &bar);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &bar);
        double t0 = inc_now_s();
        if (st == INCMOE_OK)
            st = incmoe_allgather(comm, m_ags, 0, m_agr, 0, &layout, &ag);
        if (st == INCMOE_OK)
            st = incmoe_reducescatter(comm, m_rss, 0, m_rsr, 0, &layout, INCMOE_FLOAT32, INCMOE_SUM,
                                      &rs);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &ag);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &rs);
        double t1 = inc_now_s();
        if (st == INCMOE_OK)
            st = incmoe_allreduce(comm, m_ar, 0, m_ar, 0, per_rank * (size_t)nranks, INCMOE_FLOAT32,
                                  INCMOE_SUM, &ar);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &ar);
        double t2 = inc_now_s();
        if (st != INCMOE_OK) {
            char why[256];
            incmoe_comm_error(comm, why, sizeof(why));
            dprintf(out_fd, "error rank %d: %s: %s\n", rank, incmoe_strerror(st), why);
            failed = 1;
            break;
        }
        /* Every byte against the reference. */
        size_t wrong = 0;
        for (int b = 0; b < nranks; b++)
            for (size_t i = 0; i < per_rank; i++)
                wrong += ag_recv[(size_t)b * per_rank + i] != ag_value(b, i);
        for (size_t i = 0; i < per_rank; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += rs_value(r, rank, i);
            wrong += rs_recv[i] != want;
        }
        for (size_t i = 0; i < per_rank * (size_t)nranks; i++) {
            float want = 0;
            for (int r = 0; r < nranks; r++)
                want += rs_value(r, 0, i);
            wrong += ar_buf[i] != want;
        }
        dprintf(out_fd, "result %zu %.1f %.1f %zu\n", all, (t1 - t0) * 1e6, (t2 - t1) * 1e6, wrong);
        incmoe_mem_deregister(comm, m_ags);
        incmoe_mem_deregister(comm, m_agr);
        incmoe_mem_deregister(comm, m_rss);
        incmoe_mem_deregister(comm, m_rsr);
        incmoe_mem_deregister(comm, m_ar);
        free(ag_send);
        free(ag_recv);
        free(rs_send);
        free(rs_recv);
        free(ar_buf);
    }
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
} demo_t;

static int demo_rank_main(int rank, int nranks, const char *addr, void *arg)
{
    demo_t *d = arg;
    return demo_rank(addr, d->job, rank, nranks, d->sizes, d->nsizes, fileno(d->out[rank]));
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
        {"ranks", required_argument, NULL, 'N'},
        {"sizes", required_argument, NULL, 's'},
        {"switchd", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int nranks = 4, nsizes;
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
        case 'h':
            printf(
                "usage: incmoe demo [-N RANKS (4)] [-s SIZES (4K,256K,4M,32M)] [--switchd PATH]\n"
                "RANKS is 1..64; SIZE, 1..1T, is the whole gathered buffer, as in the paper's "
                "S.\n");
            return 0;
        default:
            return 2;
        }
    }
    char why[1024];
    if (switchd == NULL && (switchd = inc_switchd_find(why, sizeof(why))) == NULL) {
        fprintf(stderr, "incmoe demo: %s, or pass --switchd PATH\n", why);
        return 1;
    }
    inc_launch_switch_t sw;
    if (inc_launch_switch_start(NULL, switchd, NULL, 20, &sw) != 0) {
        fprintf(stderr, "incmoe demo: could not start %s\n", switchd);
        return 1;
    }
    printf("incmoe demo: switch at %s, %d ranks, fp32 sum\n", sw.addr, nranks);
    demo_t d = {
        .job = ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL), .sizes = sizes, .nsizes = nsizes};
    if (demo_open_outputs(nranks, &d) != 0) {
        inc_launch_switch_stop(&sw, 5);
        return 1;
    }
    inc_launch_params_t p = {.nranks = nranks,
                             .fn = demo_rank_main,
                             .arg = &d,
                             .switch_addr = sw.addr,
                             .prog = "incmoe demo"};
    inc_launch_result_t res;
    int rc = inc_launch_ranks(&p, &sw, NULL, &res) != 0;
    inc_launch_switch_stop(&sw, 5);
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
            "usage: incmoe demo [-N RANKS] [-s SIZES] [--switchd PATH]\n"
            "       incmoe config      list the INCMOE_* settings\n");
    return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
