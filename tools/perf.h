/*
 * perf.h - what incmoe-perf's files share: the options, one rank's state and
 * the helpers both kinds of collectives use.  perf.c has the command line, the
 * full collectives (AllGather, ReduceScatter, AllReduce and the pair) and the
 * embedded runs; perf_dc.c the routed ones (dispatch, combine, dc).
 */
#ifndef INCMOE_TOOLS_PERF_H
#define INCMOE_TOOLS_PERF_H

#include <stddef.h>
#include <stdint.h>

#include "route.h"

#include "incmoe/incmoe.h"

typedef enum {
    OP_ALLGATHER,
    OP_REDUCESCATTER,
    OP_ALLREDUCE,
    OP_AGRS,
    OP_DISPATCH, /* the routed ones, from here on (perf_dc.c) */
    OP_COMBINE,
    OP_DC, /* the dispatch of step i in flight with the combine of step i-1 */
    OP_COUNT
} op_t;

extern const char *const op_names[OP_COUNT];

/* Is op one of the routed collectives (perf_dc.c)? */
static inline int op_routed(op_t op)
{
    return op >= OP_DISPATCH;
}

typedef struct {
    size_t min_bytes, max_bytes; /* 0 until given or defaulted */
    int factor, iters, warmup, check;
    incmoe_dtype_t dtype;
    incmoe_redop_t redop;
    incmoe_algo_t algo;
    op_t op;
    double link_mbps;
    int nranks, rank; /* rank -1: embedded */
    const char *switch_addr;
    uint64_t job_id;
    int timeout_s;
    int inject_error;
    /* The routed collectives: tokens per rank, elements per row (0 until given or
       defaulted) and the routing; route.nranks is nranks. */
    int tokens, hidden;
    inc_route_spec_t route;
    int routing_given; /* -E, -k, --route, --placement or --seed */
    int low_latency;   /* --low-latency: the routed ops' low-latency form, max_tokens = --tokens */
    /* --extra-slots: expert slots per rank beyond E/N for replicas (0: none), the placement
       chosen from a sample of seed place_seed (perf_replicas.c) into place_offsets and
       place_ranks (NULL: the --placement one). */
    int extra_slots, place_seed_set;
    uint64_t place_seed;
    int *place_offsets, *place_ranks;
} opts_t;

typedef struct {
    opts_t *o;
    incmoe_comm_t *comm;
    int rank, n;
    size_t es;
    /* AG: small_a -> big_a.  RS: big_b -> small_b.  AR: big_b -> big_a. */
    void *big_a, *big_b, *small_a, *small_b;
    incmoe_mr_t *mr_big_a, *mr_big_b, *mr_small_a, *mr_small_b;
    uint64_t *ctl; /* 2 x nranks uint64: reduction of timings and error counts */
    incmoe_mr_t *mr_ctl;
} rank_t;

/* A failed call, reported with the communicator's reason; -1. */
int fail(rank_t *rk, const char *what, incmoe_status_t st);

#define CHECK(rk, what, call)                                                                      \
    do {                                                                                           \
        incmoe_status_t st_ = (call);                                                              \
        if (st_ != INCMOE_OK)                                                                      \
            return fail(rk, what, st_);                                                            \
    } while (0)

/* bytes (rounded up to a page, at least one) allocated, zeroed and registered; 0, or -1. */
int alloc_reg(rank_t *rk, size_t bytes, void **buf_p, incmoe_mr_t **mr_p);
/* AllReduce of one uint64 per rank (MAX for times, SUM for error counts) into *out. */
int ctl_allreduce(rank_t *rk, uint64_t v, incmoe_redop_t op, uint64_t *out);
int barrier(rank_t *rk);

/* Element j of rank r's input under seed: small integers whose reduction over the ranks is
   exact in every type (see perf.c). */
int64_t pattern(const opts_t *o, int r, size_t j, unsigned seed);
/* a op b on the integers. */
int64_t combine(incmoe_redop_t op, int64_t a, int64_t b);
/* Element i of base as v in type t; does element i hold exactly v's encoding? */
void store(incmoe_dtype_t t, void *base, size_t i, int64_t v);
int matches(incmoe_dtype_t t, const void *base, size_t i, int64_t v);
int dtype_signed(incmoe_dtype_t t);

/* --- perf_dc.c --- */

/* The header lines of a routed collective after the common first line. */
void dc_print_header(const opts_t *o);
/* One rank's run of a routed collective: its buffers, the measurement, the check and rank
   0's row.  0 when every result was right, 1 when one was not, -1 when a call failed. */
int dc_run(rank_t *rk);

/* --- perf_replicas.c: the routed collectives on a placement with replicas --- */

/* --extra-slots checked against the routing and its placement chosen into o (nothing
   without): 0, or -1 (said). */
int dc_placement_choose(opts_t *o);
void dc_placement_free(opts_t *o);
/* The header lines of a placement with replicas (nothing without). */
void dc_placement_print(const opts_t *o);
/* The route's destination sets redrawn as the layer's per-token rule chooses the replicas
   of each token's experts (nothing without a placement). */
void dc_route_replicate(const opts_t *o, inc_route_t *route);

#endif
