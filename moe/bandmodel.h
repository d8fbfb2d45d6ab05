/*
 * bandmodel.h - how many bands a pipelined forward splits into.
 *
 * A three-stage pipeline of nb bands takes about
 *     (nb + 2) * stage(nb) / nb + nb * overhead
 * where stage(nb) is the slowest of gather, FFN and reduce over the whole
 * forward and overhead is a band's fixed cost of the collectives; the count
 * is the nb that minimises it.  The FFN stage grows with nb: every band runs
 * every local expert over its few rows, and each such GEMM reads all of the
 * expert's weights whatever its rows (a pass over the rank's expert weights
 * a band: at OLMoE's shape with I=2048, 96 MiB in bf16 a rank of 16 experts,
 * as long as ~200 rows' FLOPs; BENCHMARKS.md, "Bands where experts are
 * heavy"), so heavy experts run fewer bands.  Without that pass the minimum
 * is at nb = sqrt(2 * stage / overhead).  Both follow the routing: full routing
 * moves every other rank's rows and pays a small AllGather's and
 * ReduceScatter's latency a band; masked routing moves only the (token, other
 * rank) pairs, and each band's dispatch first waits for the plan, which needs
 * every rank's POST (the combine reuses it): an all-rank synchronisation more.
 * A pure function of inputs every rank holds alike (the costs agreed at create,
 * the counts and pairs of the forward's header exchange), so every rank
 * chooses the same count.
 */
#ifndef INCMOE_MOE_BANDMODEL_H
#define INCMOE_MOE_BANDMODEL_H

#include <stddef.h>

#include "routing.h"

typedef struct {
    routing_load_t load; /* the forward's tokens (and with masked, pairs), over all ranks */
    size_t tmax;         /* the largest rank's token count: rows per block */
    int masked;          /* masked routing (load.pairs and load.routed are set) */
    int k;               /* experts a token goes to */
    double row_flops;    /* one routed row's FFN flops */
    double band_s;       /* a small AllGather's and ReduceScatter's fixed cost */
    double sync_s;       /* a small all-rank collective's (masked bands pay it once more) */
    double seen_s;       /* masked: a band's cost as a forward showed it (0: none) */
    double byte_s;       /* one byte's time on the busier link direction */
    double flop_s;       /* one FFN flop's time */
    double pass_rows;    /* a band's pass over the local experts' weights, in routed rows'
                            worth of FFN time (0: free) */
} bandmodel_in_t;

/* The slowest stage's seconds over the whole forward of nb bands. */
double bandmodel_stage_s(const bandmodel_in_t *in, int nb);

/* The model's seconds for the forward in nb bands: (nb + 2) / nb * stage(nb) + nb * overhead. */
double bandmodel_time_s(const bandmodel_in_t *in, int nb);

/* A band's fixed cost in seconds: full routing's band_s; masked routing's seen_s where a
   forward showed one, else band_s + sync_s. */
double bandmodel_overhead_s(const bandmodel_in_t *in);

/* The band cost a pipelined forward of nb bands that took `seconds` shows: what the model
   leaves of its time over the stages, (seconds - (nb + 2) / nb * stage(nb)) / nb; 0 where
   nothing is left.  Whatever the model's stage misses (a slower FFN than its rate, a
   contended CPU) counts as band cost, so the next count errs toward fewer bands. */
double bandmodel_seen_s(const bandmodel_in_t *in, int nb, double seconds);

/* The band count: the nb of least bandmodel_time_s (the fewer of equal ones), within
   1 .. min(64, tmax / 8 rounded up) (bands of fewer than 8 rows only add fixed costs);
   8 where neither a band nor its pass costs. */
int bandmodel_count(const bandmodel_in_t *in);

#endif
