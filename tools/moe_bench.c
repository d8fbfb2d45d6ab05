/*
 * moe_bench.c - incmoe-moe-bench, the INC-MoE layer benchmark (paper Figures 1 and 7).
 *
 *   incmoe-moe-bench [-N 4] [-t 64,256,1024] [-E 16] [-k 4] [-H 512] [-I 256] [-d float]
 *                    [-b BANDS] [--model olmoe] [--algo inc,ring,a2a,auto]
 *                    [--mode baseline,pipelined,auto] [--routing full,masked,auto]
 *                    [--route uniform|zipf:S] [--seed S] [--extra-slots S]
 *                    [--placement-seed S] [--placement-tokens T] [-n 5] [-w 2] [--link-mbps BW]
 *                    [--depth D] [--no-verify] [--backend cpu|cuda] [--ranks-in-process]
 *   incmoe-moe-bench --switch HOST:PORT --rank R -N N [--job ID] ...  (one rank of a job)
 *
 * For each collective algorithm, routing and token count per rank it runs the
 * MoE layer in baseline mode (AllGather, every expert, ReduceScatter: vLLM's
 * default expert-parallel path; with masked routing dispatch, every expert,
 * combine: the all-to-all baseline on the a2a algorithm) and in pipelined mode
 * (INC-MoE's band pipeline), or in the modes --mode names (auto: the layer
 * measures both on its first forward and keeps the faster; --algo auto: it
 * measures the algorithms too, on communicators it holds beside an in-network
 * one, and the table names the path it ran), checks the outputs (per-token
 * cosine similarity against baseline mode and a relative error against an fp64 evaluation of
 * Equation (1) on sample tokens), and prints the layer time, tokens/s per rank
 * and the speedup over the ring baseline, then the ratios the MoE targets of
 * issue 18 name, then the decode rows: each mode's forward against its bound,
 * the busiest rank's dispatch bytes at the link rate + the FFN alone + its
 * combine bytes at the link rate, in sequence (issue 28; moe_bench_decode.c;
 * the rate from --link-mbps or the testbed).  Embedded (no --rank) it starts incmoe-switchd on
 * loopback and N rank processes itself; with --rank it is one rank of a job whose ranks all run the
 * same command (tools/testbed run), and rank 0 prints the table.
 *
 * Routing (--route, seeded by --seed): uniform draws a token's k distinct
 * experts uniformly; zipf:S draws them without replacement in proportion to
 * expert e's popularity (e+1)^-S.  The experts are placed contiguously (rank r
 * holds experts r*E/N ... (r+1)*E/N - 1, so rank 0 holds the most popular):
 * tools/incmoe-model's --placement contiguous.  --extra-slots S gives each
 * rank S expert slots more for replicas: the placement is chosen once, before
 * the ranks start, from a sample of the same generator on another seed
 * (moe_bench_placement.c), every rank holds the weights of every expert it
 * hosts (an expert's weights are the same wherever it lives, so the fp64
 * reference is unchanged), and the table's header names the placement and the
 * busiest rank's received rows with and without it.
 *
 * Layer time is the median over the timed forwards of the slowest rank.
 *
 * This file starts the ranks (embedded, or one of a job); moe_bench.h lists
 * the files below it.
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
#include "moe_bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"
#include "switchd_find.h"

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
    return mb_run_rank(e->o, rank, e->out[rank]);
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
    t->rc = mb_run_rank(t->e->o, t->rank, t->e->out[t->rank]);
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
    rc |= mb_report(o, e.out, o->nranks);
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
    int rc = mb_run_rank(o, o->rank, mem);
    fclose(mem);
    if (o->rank == 0) {
        FILE *in = fmemopen(buf, len, "r");
        rc |= mb_report(o, &in, in != NULL ? 1 : 0);
        if (in != NULL)
            fclose(in);
    }
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    int p = mb_parse_args(argc, argv, &o);
    if (p == 1 || p == -2)
        mb_usage();
    if (p != 0)
        return p == 1 ? 0 : 2;
    if (mb_check_opts(&o) != 0)
        return 2;
    mb_set_environment(&o);
    if (!o.place_seed_set)
        o.place_seed = o.seed + 1;
    if (mb_placement_choose(&o) != 0)
        return 1;
    int rc = o.rank < 0 ? run_embedded(&o) : run_job_rank(&o);
    mb_placement_free(&o);
    return rc;
}
