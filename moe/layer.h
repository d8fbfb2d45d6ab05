/*
 * layer.h - the layer object (internal; the public API is api/incmoe_moe.h):
 * what every backend shares, plus the backend's own state behind `be`.
 */
#ifndef INCMOE_MOE_LAYER_H
#define INCMOE_MOE_LAYER_H

#include <stdint.h>

#include "backend.h"
#include "ctx.h"
#include "routing.h"

#include "incmoe/incmoe_moe.h"

/* Bytes of one rank's block in the header exchange. */
#define MOE_HDR_BYTES 128

/* Communicators a layer may run on: its own, and one of each other algorithm. */
#define MOE_MAX_LANES 3

/* One communicator the layer's paths run on, with the backend's registrations and FIFO on
   it (lanes.c). */
typedef struct {
    incmoe_comm_t *comm;
    int algo; /* incmoe_algo_t; -1: the layer's own, whose algorithm it was not told */
    void *be; /* the backend's state on comm; NULL: the backend's own (create's) */
    struct moe_sibling *sib; /* the shared communicator held; NULL: the layer's own */
    int dc_support;    /* comm's algorithm has dispatch and combine: 1, 0 not, -1 not asked yet */
    uint64_t dc_total; /* dispatches pushed on this lane's FIFO so far (their tickets) */
    int ll_refused;    /* the communicator refused the decode step's form (decode.h) */
} moe_lane_t;

/* Measured choices a layer keeps: a prefill's and a decode step's counts (more than 2x
   apart) each keep theirs, so alternating between them measures each once. */
#define MOE_MAX_CHOICES 8

/* A path a forward runs: a lane, a mode and a routing (none of them auto). */
typedef struct {
    int lane;
    incmoe_moe_mode_t mode;
    incmoe_moe_routing_t routing;
} moe_path_t;

/* The measured choices (choose.c), each for what a forward left to the layer and the counts
   it was measured at; the oldest is replaced first.  Shared by the layers of one
   communicator with the same shape and lanes (choices.c): a model's MoE blocks choose
   once. */
typedef struct moe_choices {
    struct {
        int valid;
        uint32_t asked; /* choose.c's key of what was left to the layer */
        moe_path_t path;
        size_t counts[INCMOE_MAX_RANKS];
    } c[MOE_MAX_CHOICES];
    unsigned next; /* the entry the next measurement replaces */
    /* The registry's (choices.c): whose they are and how many layers hold them. */
    incmoe_comm_t *comm;
    uint64_t shape;
    int refs;
    struct moe_choices *next_group;
} moe_choices_t;

struct incmoe_moe {
    int E, k, H, I, N, rank;
    incmoe_dtype_t dtype;
    size_t esize;
    incmoe_comm_t *comm;
    size_t max_tokens;
    int timeout_ms;
    incmoe_moe_config_t override;
    uint64_t placement_hash;

    int n_local;
    int *local_ids; /* [n_local] global ids, ascending (replicas included) */
    /* [E * slots] the rank serving each wire id e + E * slot (replica_plan.h), -1 for a slot
       expert e does not have; without replicas slots is 1 and owner[e] hosts e. */
    int32_t *owner;

    /* Replicas (replicas.c): the placement (offsets NULL: one rank per expert, as owner
       says), the most replicas of one expert, and whether any expert has two or more. */
    incmoe_moe_placement_t placement;
    int slots;
    int replicated;
    /* With replicas: the forward's ids with their replicas ([max_tokens][k] wire ids), this
       rank's forced rows for the header ([N], padded), every rank's summed, and the choice's
       load and its correction ([N] each, replica_plan.h). */
    int32_t *chosen;
    uint32_t *hdr_forced;
    uint64_t *forced_sum;
    int64_t *load, *corr;
    size_t hdr_bytes; /* a rank's block in the current header exchange (replicas.h) */
    size_t grow;      /* bytes of a gather row: H elements, k ids, k weights (16-byte multiple) */
    size_t zrow;      /* bytes of a reduce row: H elements */

    uint8_t *hdr; /* N header blocks */
    incmoe_mr_t *hdr_mr;

    const moe_backend_ops_t *ops;
    void *be;

    /* The plan of the current forward (ctx points at the arrays). */
    moe_ctx_t ctx;
    incmoe_moe_config_t cfg; /* resolved: every field set */
    size_t counts[INCMOE_MAX_RANKS];
    size_t valid_g[INCMOE_MAX_RANKS];
    size_t valid_z[INCMOE_MAX_RANKS];

    /* The configuration model's inputs, agreed by every rank at create (calibrate.c):
       seconds of a band's fixed cost, of an all-rank synchronisation, of one byte on the
       link, of one FFN flop, and a band's pass over the local experts' weights in routed
       rows' worth of FFN time (bandmodel.h; 0: free); and agreed at each forward's header
       exchange, a masked band's cost as the slowest rank's last pipelined masked forward
       showed it (0: none yet). */
    struct {
        double band_s, sync_s, byte_s, flop_s, pass_rows;
        double masked_band_s;
    } model;
    /* This rank's own masked band cost from its last pipelined masked forward
       (autotune_observe), offered at the next header exchange. */
    double band_seen_s;

    int failed;                 /* a forward failed mid-pipeline: the layer is unusable */
    incmoe_moe_timing_t timing; /* of the last successful forward */
    uint64_t band_total;        /* bands finished so far, all forwards */
    uint64_t rs_total;          /* ReduceScatter parts posted so far */

    moe_lane_t lanes[MOE_MAX_LANES]; /* [0]: the layer's own communicator */
    int nlanes;
    int cur_lane; /* the lane L->ctx's registrations and FIFO name */

    /* The extension's path (ext.c); has_path 0: today's defaults (the communicator's
       algorithm, the forward's mode and routing). */
    int has_path;
    incmoe_moe_path_t path;

    moe_choices_t *choices; /* shared (choices.c); NULL until create opened the lanes */

    /* The decode step (decode.c): its capacity, tokens per rank (0: none), and [N] the
       received index of each source region's first row in the current step. */
    size_t decode_tokens;
    uint32_t *decode_first;
};

/* --- autotune.c --- */
/* The configuration for tmax rows per block: full routing's bands, or with masked (the
   forward's load, every rank's pairs from its header exchange) masked routing's. */
void autotune_choose(const incmoe_moe_t *L, size_t tmax, const routing_load_t *masked,
                     incmoe_moe_config_t *cfg_p);

/* After a pipelined masked forward of nb bands over tmax rows per block with the load
   masked that took this rank `seconds`: keeps in L->band_seen_s the band cost the model
   puts on it (unchanged where the model leaves none). */
void autotune_observe(incmoe_moe_t *L, size_t tmax, const routing_load_t *masked, int nb,
                      double seconds);

/* --- choices.c --- */
/* Points L->choices at the choices of the layers on L->comm with L's shape and lanes,
   made empty for the first of them. */
incmoe_status_t choices_hold(incmoe_moe_t *L);
/* Lets go of L->choices (freed with its last layer). */
void choices_put(incmoe_moe_t *L);

/* --- calibrate.c --- */
/* Whether this rank asks for the model's costs to be measured (every rank's wish is in the
   create exchange; they measure if any asks). */
int calib_wanted(const incmoe_moe_t *L);
/* Measures (if measure_costs) and agrees L->model with every rank: collective. */
incmoe_status_t calib_agree(incmoe_moe_t *L, int measure_costs);
/* Takes an FFN rate every rank agreed on (seconds per flop, as the model counts flops) in
   place of the one timed at create or INCMOE_MOE_GFLOPS's default; a set INCMOE_MOE_GFLOPS
   stays.  The weights' pass, in rows' worth of that rate, stays as timed. */
void calib_ffn_measured(incmoe_moe_t *L, double flop_s);

/* --- plan.c --- */
/* The rank hosting expert e (placement NULL: contiguous E/N per rank). */
int plan_owner(const int *placement, int E, int N, int e);
/* Fills L->owner, L->local_ids / n_local and L->placement_hash from L->placement's replicas
   (replicas_read), else from expert_owner (NULL: contiguous). */
incmoe_status_t plan_place_experts(incmoe_moe_t *L, const int *placement);
/* Fills the plan fields of L->ctx for one forward of the given counts (and with masked
   routing its dispatch blocks). */
void plan_forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, int masked,
                  const incmoe_moe_config_t *cfg, size_t tmax, const int *counts, const void *x,
                  const int32_t *ids, const float *w);
/* Advances the never-reset bases past the forward just run. */
void plan_retire(incmoe_moe_t *L);

/* --- exchange.c --- */
#define HDR_CREATE  1
#define HDR_FORWARD 2

/* One rank's block of the header exchange. */
typedef struct {
    uint32_t magic; /* set by exchange */
    int32_t status; /* this rank's own checks: 0 or an incmoe_status_t */
    uint32_t phase;
    uint32_t nranks;
    uint64_t seq;  /* forwards before this one */
    uint64_t hash; /* create: placement; forward: token counts */
    int32_t E, k, H, I, dtype, max_tokens;
    int32_t mode, nb, gather, reduce, tail;
    int32_t calib;   /* create: this rank asks for the model's costs to be measured */
    int32_t routing; /* forward: the routing asked for (the same on every rank); create: path's */
    int32_t algo;    /* create: the path's algorithm (INCMOE_MOE_ALGO_*: no path) */
    uint64_t pairs;  /* forward: this rank's (token, other rank) pairs (routing.h) */
    uint64_t routed; /* forward: this rank's tokens some other rank needs */
    double band_seen_s; /* forward: this rank's L->band_seen_s */
    int32_t decode;     /* create: the decode capacity (L->decode_tokens) */
} moe_hdr_t;

/* AllGathers every rank's header (bounded by L->timeout_ms) and judges them
   all the same way on every rank: INCMOE_OK, or the same error everywhere. */
incmoe_status_t exchange(incmoe_moe_t *L, moe_hdr_t *mine, const char *what);

#endif
