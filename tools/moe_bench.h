/*
 * moe_bench.h - what incmoe-moe-bench's files share: the options, a result
 * line, and each file's functions.  moe_bench.c runs the benchmark (embedded,
 * or one rank of a job) over moe_bench_rank.c (one rank: the layer, its
 * forwards, their checks), moe_bench_table.c (the table rank 0 prints),
 * moe_bench_ref.c (the fp64 reference), moe_bench_data.c (the problem data
 * and the routing), moe_bench_placement.c (the placement with replicas),
 * moe_bench_decode.c (the decode rows' bound) and moe_bench_args.c (the
 * command line).
 */
#ifndef INCMOE_TOOLS_MOE_BENCH_H
#define INCMOE_TOOLS_MOE_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "incmoe/incmoe.h"
#include "incmoe/incmoe_moe.h"

#define MAX_T     32
#define MAX_RANKS 64
/* Results are indexed by incmoe_algo_t (inc, ring, a2a), then MB_ALGO_AUTO: the layer's
   choice among the three (incmoe_moe_path_t's INCMOE_MOE_ALGO_AUTO); */
#define NALGO        4
#define MB_ALGO_AUTO 3
#define NROUTING     3 /* by incmoe_moe_routing_t: full, masked, auto */
/* And by incmoe_moe_mode_t: baseline, pipelined, auto, decode.  A mode the layer gains is a
   name in mb_mode_names and NMODE one more: --mode takes it and the decode rows show it. */
#define NMODE 4

typedef struct {
    int nranks, rank; /* rank -1: embedded */
    int E, k, H, I;
    incmoe_dtype_t dtype;
    int tokens[MAX_T], ntokens;
    int bands, iters, warmup, verify;
    int decode_tokens; /* the layer's decode capacity (INCMOE_MOE_PARAM_DECODE); 0: its own */
    int depth;         /* INCMOE_MOE_DEPTH, 0: the setting's */
    int algos[NALGO], nalgos;
    int routings[NROUTING], nroutings;
    int modes[NMODE], nmodes;
    double zipf;   /* --route zipf:S: S; 0 uniform */
    uint64_t seed; /* --seed: 0 draws the tokens as before routing existed */
    const char *switch_addr;
    uint64_t job;
    double link_mbps;
    const char *model;
    incmoe_moe_backend_t backend;
    int in_process; /* ranks as threads of this process */
    /* --extra-slots: expert slots per rank beyond E/N for replicas, 0: contiguous placement;
       the placement is chosen from place_tokens tokens per rank of seed place_seed
       (moe_bench_placement.c) into place_offsets and place_ranks (NULL: contiguous). */
    int extra_slots, place_tokens, place_seed_set;
    uint64_t place_seed;
    int *place_offsets, *place_ranks;
} opts_t;

/* One measurement: an algorithm, a routing, a token count, a mode. */
typedef struct {
    int algo, routing, ti, mode;
    int used;       /* the routing the forwards ran (auto resolved) */
    int nbands;     /* the bands the last forward ran (its timings) */
    double ms;      /* median layer time; -1: the algorithm has no dispatch and combine */
    double cos_min; /* this mode's output vs baseline's (not the baseline's own rows) */
    double ref_err; /* worst sample-token relative error against fp64 */
    /* Baseline phases (medians): header exchange, AllGather or dispatch, FFN, ReduceScatter
       or combine. */
    double ex_ms, out_ms, ffn_ms, back_ms;
    /* This rank's tokens: other ranks a token goes to (k-bar), share needed elsewhere (u). */
    double kbar, ufrac;
    char cfg[96]; /* pipelined: its configuration; with auto algo or mode: the path run */
} result_t;

/* What mb_reference_token computes in: an expert's matrix and its SwiGLU rows. */
typedef struct {
    void *m;   /* H x I of the datatype */
    double *g; /* [I] gate */
    double *a; /* [I] activation */
} ref_scratch_t;

/* ---- moe_bench_data.c: the problem data and the routing ---- */

/* Element i of an array of the datatype, as a double. */
double mb_get(const void *base, size_t i, incmoe_dtype_t dt);
/* Expert e's gate (which 0), up (1) or down (2) matrix into dst, the same on every rank. */
void mb_fill_weights(const opts_t *o, int e, int which, void *dst);
/* Token inputs and routing of rank r at token count T (deterministic for the seed). */
void mb_make_tokens(const opts_t *o, int r, int T, void *x, int32_t *ids, float *w);
/* This rank's T tokens, served by serve[T][k] (mb_serving_ranks): the other ranks a token
   goes to, on average (k-bar), and the share of tokens some other rank needs (u). */
void mb_routing_stats(const opts_t *o, int rank, int T, const int32_t *serve, double *kbar_p,
                      double *ufrac_p);

/* ---- moe_bench_decode.c: the decode rows' bound ---- */

/* The link rate of the decode bound in Mbit/s: --link-mbps, else the testbed's
   (TESTBED_MBPS), else 0 (unknown); -1 when TESTBED_MBPS is not a rate. */
double mb_link_mbps(const opts_t *o);
/* The busiest rank's rows on its busier link direction in a dispatch of T tokens per rank,
   a row up once and down to each other rank of its set (the combine's the same): -1 out of
   memory. */
double mb_decode_rows(const opts_t *o, int T);

/* ---- moe_bench_placement.c: the placement with replicas (--extra-slots) ---- */

/* Chooses the placement of --extra-slots (nothing without): 0; 1 after saying why. */
int mb_placement_choose(opts_t *o);
void mb_placement_free(opts_t *o);
/* The experts rank hosts, ascending, into experts[] (room for E; NULL: only counted): how
   many. */
int mb_placement_hosted(const opts_t *o, int rank, int *experts);
/* The header lines of a placement with replicas (nothing without). */
void mb_placement_print(const opts_t *o);
/* The busiest rank's received rows of the timed tokens at T tokens per rank on the placement
   (with 1; the contiguous one without replicas with 0), as incmoe_moe_placement_rows replays
   the layer's per-token rule; -1 on a failure (said). */
int64_t mb_placement_busiest(const opts_t *o, int T, int with);
/* out[T][k]: the rank serving each of rank's T tokens' pairs (ids [T][k]): the expert's
   contiguous rank, or with replicas the layer's per-token rule over this rank's tokens from
   zero load (its decode step's). */
void mb_serving_ranks(const opts_t *o, int rank, int T, const int32_t *ids, int32_t *out);

/* ---- moe_bench_ref.c: the fp64 reference ---- */

/* fp64 Equation (1) for token t of the inputs, recomputing the experts' weights into s. */
void mb_reference_token(const opts_t *o, const void *x, const int32_t *ids, const float *w, int t,
                        const ref_scratch_t *s, double *y);

/* ---- moe_bench_rank.c: one rank ---- */

/* Runs every measurement of this rank; writes "result ..." lines to out. */
int mb_run_rank(const opts_t *o, int rank, FILE *out);

/* ---- moe_bench_table.c: the table ---- */

/* The median of n samples (sorts them). */
double mb_median(double *v, int n);
/* The table of the result lines in in[0..nin): 1 when a line was not a result or a row is
   missing or failed its checks. */
int mb_report(const opts_t *o, FILE *const *in, int nin);

/* ---- moe_bench_args.c: the command line ---- */

/* The modes' names, by incmoe_moe_mode_t, as --mode and the tables write them. */
extern const char *const mb_mode_names[NMODE];

/* The usage text, on stderr. */
void mb_usage(void);
/* As inc_arg_getopt: 0 to run, 1 for --help, -1 or -2 on a bad command line (said). */
int mb_parse_args(int argc, char **argv, opts_t *o);
/* What no single option can check: the options against each other and this build. */
int mb_check_opts(const opts_t *o);
/* The settings the layer reads from the environment. */
void mb_set_environment(const opts_t *o);

#endif
