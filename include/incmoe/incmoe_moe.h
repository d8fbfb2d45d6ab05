/*
 * incmoe_moe.h - the INC-MoE layer: a band-pipelined expert-parallel MoE
 * layer over AllGather and ReduceScatter (paper sections 3.3-3.5).
 *
 * One layer object per rank.  Rank r hosts a subset of the E experts (E/N
 * contiguous ones by default) with SwiGLU FFNs
 *     FFN_e(x) = W_down,e (SiLU(W_gate,e x) * W_up,e x)
 * and owns T_r tokens.  A forward pass computes, for each of its tokens,
 *     y_t = sum over e in K(t) of g_t,e FFN_e(x_t)          (Equation (1))
 * where the caller chose the top-k experts K(t) and their weights g_t,e
 * (routing is the caller's; the layer never renormalises the weights).
 *
 * Modes: INCMOE_MOE_BASELINE (AllGather everything, then every local expert,
 * then ReduceScatter: vLLM's default expert-parallel path) and
 * INCMOE_MOE_PIPELINED (bands of tokens flow through gather, compute and
 * reduce workers, so an AllGather and a ReduceScatter are in flight together).
 * The collective algorithm (in-network, ring or a2a) is the communicator's.
 *
 * Routing, per forward (INCMOE_MOE_FWD_ROUTING, else the INCMOE_MOE_ROUTING
 * setting; every rank must ask for the same):
 * - INCMOE_MOE_ROUTING_FULL: every token goes to every rank (AllGather) and
 *   every rank's partial of it comes back (ReduceScatter), as above.
 * - INCMOE_MOE_ROUTING_MASKED: each token goes only to the ranks hosting one
 *   of its experts (incmoe_dispatch, its set from topk_ids and the
 *   placement), as one row of its hidden state, expert ids and weights, so
 *   the receiver needs nothing else; those ranks' partials come back summed
 *   (incmoe_combine: the others' in ascending rank order, the owner's own
 *   last, as the ReduceScatter adds them).  A rank's rows for its own experts
 *   never leave it.  Bands are over each rank's own tokens, as in full
 *   routing; a band's combine is one collective, so a masked forward runs one
 *   reduce worker and no tail assistance.  The outputs equal full routing's:
 *   bitwise in-network (the same band plan), within rounding on the
 *   point-to-point algorithms, whose ReduceScatter adds in ring order.  An
 *   algorithm without dispatch and combine fails a masked forward with
 *   INCMOE_ERR_UNSUPPORTED on every rank (the layer stays usable).
 * - INCMOE_MOE_ROUTING_AUTO: masked when it moves fewer bytes by a margin,
 *   judged alike on every rank from the header exchange (each rank gives
 *   how many (token, other rank) pairs its tokens need): masked when the
 *   bytes per rank and link direction, averaged over the ranks, are at most
 *   90% of full routing's, and the algorithm has dispatch and combine.  In a
 *   layer with a path (incmoe_moe_create_ex, INCMOE_MOE_PARAM_PATH) or a
 *   forward whose mode is INCMOE_MOE_AUTO, auto is measured instead: both
 *   routings run once and the faster is kept (see "Path" below).
 *   incmoe_moe_last_timing_ex says which routing a forward used.
 *
 * Every rank must call create, forward and destroy collectively, with the same
 * shape and the same token counts; disagreements and bad arguments are
 * detected through a small exchange and reported on every rank (the decode
 * step has no exchange: bad arguments ride on its dispatch, see "Decode").
 *
 * Backends, chosen at create (where the weights and buffers are placed):
 * - INCMOE_MOE_BACKEND_CPU: host memory; the roles run on threads the layer
 *   owns; the FFN GEMMs call OpenBLAS from the compute threads, so run
 *   OpenBLAS single-threaded (OPENBLAS_NUM_THREADS=1) and size the worker
 *   split instead.  A forward returns once the outputs are complete.
 * - INCMOE_MOE_BACKEND_CUDA (when the library was built with CUDA; otherwise
 *   create answers INCMOE_ERR_UNSUPPORTED): weights, scratch and progress
 *   counters in device memory of the calling thread's current device; the
 *   gather and reduce buffers in host-mapped pinned memory (device memory
 *   only once UCX and the client both move it; incmoe_moe_backend_str says
 *   which and why).  x, topk_ids and topk_weights are device memory written
 *   on the caller's stream (INCMOE_MOE_FWD_STREAM; absent: the legacy default
 *   stream).  A forward copies the expert ids to the host behind that stream
 *   for the argument checks, exchanges the headers, enqueues one persistent
 *   kernel on the stream and returns once that kernel finished, with its
 *   status: a collective that failed or a wait that timed out inside the
 *   kernel ends the kernel and is returned by this forward (the layer is then
 *   unusable, as for the CPU backend), never a hang; a CUDA error is logged
 *   with CUDA's name for it and returned as INCMOE_ERR_TRANSPORT
 *   (INCMOE_ERR_NO_MEMORY for a failed allocation, INCMOE_ERR_UNSUPPORTED
 *   when there is no device, the kernel was not built for it, or the
 *   configuration's gather + compute + reduce blocks cannot all be resident).
 *   The output view is device-accessible memory (host-mapped: its device
 *   address).  Baseline timings are not split into phases (all zero but
 *   exchange_ms and total_ms).
 *
 * Thread safety: a layer is used by one thread at a time (every call on it is
 * collective and runs in order on every rank); different layers may be used
 * concurrently on different communicators.  While a forward runs, the layer's
 * FIFO proxy owns the communicator's AllGather, ReduceScatter, barrier,
 * dispatch and combine streams: post no collective on that communicator from
 * elsewhere until the forward returned (both backends return once the
 * forward is complete).
 */
#ifndef INCMOE_MOE_H
#define INCMOE_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    INCMOE_MOE_BASELINE = 0,
    INCMOE_MOE_PIPELINED = 1,
    INCMOE_MOE_AUTO = 2,   /* the layer's choice, measured (see "Path" below) */
    INCMOE_MOE_DECODE = 3, /* the decode step where the counts allow it (see "Decode" below) */
} incmoe_moe_mode_t;

typedef enum {
    INCMOE_MOE_BACKEND_CPU = 0,
    INCMOE_MOE_BACKEND_CUDA = 1,
} incmoe_moe_backend_t;

/*
 * Pipeline configuration.  0 (or -1 for tail_bands) means "choose
 * automatically for the token count"; anything else overrides the choice.
 * The INCMOE_MOE_* settings override the automatic choice as well.
 */
typedef struct {
    int nbands;          /* bands per layer, 1 .. INCMOE_MOE_MAX_BANDS */
    int gather_workers;  /* threads in the gather role */
    int compute_workers; /* threads running expert FFNs */
    int reduce_workers;  /* threads in the reduce role */
    int tail_bands;      /* last bands the gather workers help reduce; -1 auto, 0 off */
} incmoe_moe_config_t;

#define INCMOE_MOE_MAX_BANDS   256
#define INCMOE_MOE_MAX_WORKERS 16
#define INCMOE_MOE_MAX_TOPK    64

typedef struct {
    int num_experts;      /* E */
    int top_k;            /* k, 1 .. E */
    int hidden;           /* H */
    int intermediate;     /* I */
    incmoe_dtype_t dtype; /* INCMOE_FLOAT32, INCMOE_FLOAT16 or INCMOE_BFLOAT16 */
    incmoe_comm_t *comm;  /* joined by all N ranks; its algorithm is used */
    int max_tokens;       /* bound on any rank's tokens per forward (sizes the buffers) */
    /* owner[e]: the rank hosting expert e; NULL = contiguous E/N experts per rank
       (E must then be divisible by N).  Every rank must pass the same placement. */
    const int *expert_owner;
    /* The local experts' weights, in ascending expert id, row-major in dtype:
       w_gate and w_up [n_local][I][H], w_down [n_local][H][I].  Copied. */
    const void *w_gate;
    const void *w_up;
    const void *w_down;
    incmoe_moe_config_t config; /* overrides; all zero (tail_bands -1) = automatic */
    int timeout_ms; /* bound on any wait inside a forward (the decode step's collectives:
                       see "Decode"); 0 = 2 * INCMOE_TIMEOUT_MS */
    incmoe_moe_backend_t backend; /* default INCMOE_MOE_BACKEND_CPU */
} incmoe_moe_params_t;

typedef enum {
    INCMOE_MOE_ROUTING_FULL = 0,   /* AllGather and ReduceScatter: every token to every rank */
    INCMOE_MOE_ROUTING_MASKED = 1, /* dispatch and combine: each token to its experts' ranks */
    INCMOE_MOE_ROUTING_AUTO = 2,   /* masked where it moves fewer bytes (see the top);
                                      measured where the forward measures its path (below) */
} incmoe_moe_routing_t;

/* Expert placement with replicas: expert e lives on ranks[offsets[e] .. offsets[e + 1]),
   distinct ranks in ascending order, at least one; the same on every rank. */
typedef struct {
    const int *offsets; /* num_experts + 1 entries, offsets[0] = 0 */
    const int *ranks;   /* offsets[num_experts] entries */
} incmoe_moe_placement_t;

typedef struct incmoe_moe incmoe_moe_t;

/* Fills params with defaults (automatic configuration, contiguous placement,
   CPU backend).  Pure. */
void incmoe_moe_params_init(incmoe_moe_params_t *params);

/*
 * Collective: validates the shape on every rank, places the weights (copied:
 * the caller's arrays may be freed once create returns) and the buffers,
 * registers the buffers and creates the FIFO.  The layer holds params->comm
 * (not owned) until destroy; the communicator must outlive the layer.
 * incmoe_moe_create_ex with no extension bits set.
 */
incmoe_status_t incmoe_moe_create(const incmoe_moe_params_t *params, incmoe_moe_t **layer_p);

/*
 * Extension of the layer's parameters.  incmoe_moe_params_t keeps its fields
 * as they are; every parameter added since lives in incmoe_moe_params_ext_t
 * behind a bit of its field_mask (as incmoe_comm_params_t and UCX's ucp_params_t
 * do): a MINOR version appends one field and one bit, the library reads a field
 * only when its bit is set, so a program built against an older header (a
 * shorter struct) runs unchanged.  A bit this library does not know fails
 * create on every rank with INCMOE_ERR_INVALID_ARG, naming the bits.
 */
#define INCMOE_MOE_PARAM_PATH      (1ull << 0) /* path: which algorithm, mode and routing to run */
#define INCMOE_MOE_PARAM_DECODE    (1ull << 1) /* decode_tokens: the decode step's capacity */
#define INCMOE_MOE_PARAM_PLACEMENT (1ull << 2) /* placement: experts on several ranks */
/* Every bit this version knows. */
#define INCMOE_MOE_PARAM_ALL                                                                       \
    (INCMOE_MOE_PARAM_PATH | INCMOE_MOE_PARAM_DECODE | INCMOE_MOE_PARAM_PLACEMENT)

/* incmoe_moe_path_t.algo: measured among in-network, ring and a2a. */
#define INCMOE_MOE_ALGO_AUTO (-1)
/* incmoe_moe_path_t.algo: the communicator's own algorithm only. */
#define INCMOE_MOE_ALGO_COMM (-2)

/*
 * Path: the algorithm, mode and routing forwards run.  Each is either forced
 * or left to the layer (INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_AUTO,
 * INCMOE_MOE_ROUTING_AUTO): the layer then runs every candidate path once
 * on a forward's own inputs, agrees on every run's time as its slowest rank's
 * (an AllReduce(max) on the layer's communicator, so every rank picks the
 * same), runs those within 1.5x of the fastest twice more, and runs the
 * close path of smallest median.  The choice is kept with
 * the token counts it was measured at (the last 8 choices): a forward runs a
 * kept one while no rank's count moved more than 2x from its counts, and
 * what the forward leaves to the layer is the same; otherwise it measures
 * again (a prefill and a decode step each keep their own).  A forward's
 * mode and routing (INCMOE_MOE_FWD_MODE, INCMOE_MOE_FWD_ROUTING) override
 * the path's for that forward; INCMOE_MOE_AUTO and INCMOE_MOE_ROUTING_AUTO
 * there leave them to the layer.  The forward that measures returns the last
 * candidate's outputs; paths differ only in the rounding of their reduction
 * orders.  incmoe_moe_last_timing_ex says which path a forward ran.
 *
 * Other algorithms than the communicator's run on communicators the layer
 * holds on the same switch: one per algorithm, made from comm_params (the
 * parameters params->comm was created with: switch, key, timeouts, rank) with
 * the job id FNV-1a(job id, "moe-path", algorithm), admitted by the switch
 * like any job, shared by every layer on the same communicator and left when
 * the last of them is destroyed.  Only the CPU backend runs them.
 */
typedef struct {
    int algo;               /* INCMOE_MOE_ALGO_AUTO, INCMOE_MOE_ALGO_COMM or an incmoe_algo_t */
    incmoe_moe_mode_t mode; /* INCMOE_MOE_AUTO, or the mode of forwards that give none */
    incmoe_moe_routing_t routing; /* INCMOE_MOE_ROUTING_AUTO (measured), full or masked */
    /* How params->comm was created; required unless algo is INCMOE_MOE_ALGO_COMM (read
       during create only). */
    const incmoe_comm_params_t *comm_params;
} incmoe_moe_path_t;

/*
 * Decode: the decode step.  A forward whose every rank's count is at most the
 * layer's decode capacity C (decode_tokens) may run as one low-latency
 * dispatch (incmoe.h, "The low-latency form": max_tokens C, by source: each
 * row this rank's hidden state, expert ids and weights, as a masked forward's
 * rows), the local experts on the rows received, and one low-latency combine
 * (the partials summed back to their owners as a masked forward sums them, so
 * the outputs equal masked routing's: bitwise in fp32 in-network).  No header
 * exchange, no bands, no role workers but the compute team: the calling
 * thread posts both collectives and sleeps on them (incmoe_wait), so those two
 * waits are bounded by the communicator's liveness timeout (a dead rank) and
 * progress timeout (a live rank that never posts: incmoe.h, "Timeouts"), not
 * by the layer's timeout_ms, which bounds the compute team's.  Its buffers are
 * the layer's, registered at create.  Which forwards take it:
 *   - mode INCMOE_MOE_DECODE (the forward's, else the path's): every one whose
 *     counts are all at most C; a larger one runs pipelined;
 *   - mode INCMOE_MOE_AUTO: the decode step on each algorithm that may run is
 *     one more candidate of the measured choice (see "Path") whenever the
 *     counts are all at most C and the routing asked is masked or auto (the
 *     decode step is dispatch and combine; routing full keeps a forward on
 *     AllGather and ReduceScatter); a larger forward measures the bulk paths
 *     only.  A kept choice that is the decode step runs without a header
 *     exchange.  Mode INCMOE_MOE_DECODE takes it whatever the routing.
 * Every rank must pass the same counts and mode, as for any forward: the
 * ranks decide alike from them before anything is exchanged.  Arguments one
 * rank refuses fail the forward on every rank (INCMOE_ERR_INVALID_ARG, the
 * dispatch's refusal carrying the reason; the layer stays usable).  A form the
 * communicator refuses alike on every rank (INCMOE_ERR_NO_MEMORY: its messages
 * exceed what the switch grants a rank; INCMOE_ERR_UNSUPPORTED: an algorithm
 * or a switch tree without it) is logged once and that forward and every later
 * one on that algorithm take the bulk path.  Only the CPU backend has the
 * decode step; the CUDA backend runs every forward on the bulk path.
 * incmoe_moe_last_timing_ex reports mode INCMOE_MOE_DECODE, routing masked,
 * dispatch_ms, ffn_ms and combine_ms (exchange_ms 0).
 *
 * decode_tokens: C, 1 .. max_tokens; 0 (and without INCMOE_MOE_PARAM_DECODE)
 * the default, min(max_tokens, INCMOE_MOE_DECODE_TOKENS); -1: no decode step.
 * The same on every rank (create fails with INCMOE_ERR_MISMATCH otherwise).
 */
#define INCMOE_MOE_DECODE_TOKENS 32

/*
 * Replicas: with INCMOE_MOE_PARAM_PLACEMENT (incmoe_moe_placement_t, above) an
 * expert may live on several ranks, each replica holding its weights.  Expert e
 * lives on ranks[offsets[e] .. offsets[e + 1]), distinct ranks in ascending
 * order, at least one (E need not divide by N); the same table on every rank
 * (create compares a hash of it and fails with INCMOE_ERR_MISMATCH otherwise).
 * params->expert_owner must then be NULL, and each rank's w_gate, w_up and
 * w_down hold every expert it hosts (replicas included), in ascending expert
 * id.  Create checks the table on every rank and fails with
 * INCMOE_ERR_INVALID_ARG naming the expert and the offending value.  The
 * arrays are read during create only.  Replicated experts (some expert on two
 * ranks or more) run on the CPU backend only: the CUDA backend's create fails
 * with INCMOE_ERR_UNSUPPORTED.
 *
 * Each (token, expert) pair is served by one replica, chosen per token by one
 * rule (the library's replica_choice): the pairs of experts with one replica
 * first, then each other pair takes a replica on a rank the token already
 * visits (its own rank or one chosen before: no extra row), else the replica
 * on the rank with the fewest rows so far (ties: the lowest rank).  The choice
 * rides in the row: a pair's expert id on the wire is e + E * slot (slot: the
 * replica's index in ranks[offsets[e] ..)), so every receiver of a multicast
 * row knows which pairs it serves; the combine then adds each token's
 * partials from the ranks that served it.  The outputs equal the unreplicated
 * layer's up to the order of those sums (fp32: within the 2e-5 relative bound
 * of tests/test_moe_replicas.cc, cosine >= 0.99999 to the unreplicated
 * layer's outputs).
 *
 * "Rows so far": each rank runs the rule over its own tokens in order, counting
 * the rows they sent so far, so where the ranks' tokens are alike, balancing
 * its own rows balances everyone's.  On the bulk path (masked and full
 * routing) the forward's header exchange also carries each rank's forced rows
 * (N counts: rows its tokens must send to each other rank for experts with one
 * replica; 4 N bytes more per rank, only in a layer with replicas), and a rank
 * whose forced rows differ from the average rank's corrects its count by the
 * difference, spread over its tokens: no rank exchanges its tokens' ids.  The
 * decode step (no exchange) runs the rule without the correction: a rank whose
 * routing differs from the others' balances by its own rows only (where the
 * ranks' tokens are alike that costs nothing).  Routing auto judges the bytes
 * from the decode step's choice (made before the exchange).
 *
 * Memory: a rank's weights are its n_local experts', replicas included;
 * the row buffers are unchanged (a rank still receives at most one row per
 * token and source, whatever the replicas), so the dispatch sizes the switch
 * admits are the unreplicated layer's; the layer adds [max_tokens][k] ids of
 * the chosen replicas and E * (most replicas of one expert) ints of tables.
 */
typedef struct {
    uint64_t field_mask;                     /* INCMOE_MOE_PARAM_* of the fields set below */
    incmoe_moe_path_t path;                  /* INCMOE_MOE_PARAM_PATH */
    int decode_tokens;                       /* INCMOE_MOE_PARAM_DECODE (see "Decode" above) */
    const incmoe_moe_placement_t *placement; /* INCMOE_MOE_PARAM_PLACEMENT (see "Replicas") */
} incmoe_moe_params_ext_t;

/* incmoe_moe_create with the extension's fields (ext NULL: none). */
incmoe_status_t incmoe_moe_create_ex(const incmoe_moe_params_t *params,
                                     const incmoe_moe_params_ext_t *ext, incmoe_moe_t **layer_p);
/* Frees the layer (not collective; no forward may be running).  Outputs of
   the last forward are invalid afterwards. */
incmoe_status_t incmoe_moe_destroy(incmoe_moe_t *layer);

/* Fields of incmoe_moe_forward_params_t a caller set (others: absent). */
#define INCMOE_MOE_FWD_MODE         (1u << 0) /* absent: pipelined */
#define INCMOE_MOE_FWD_X            (1u << 1)
#define INCMOE_MOE_FWD_TOPK_IDS     (1u << 2)
#define INCMOE_MOE_FWD_TOPK_WEIGHTS (1u << 3)
#define INCMOE_MOE_FWD_COUNTS       (1u << 4) /* required */
#define INCMOE_MOE_FWD_STREAM       (1u << 5) /* CUDA backend only */
#define INCMOE_MOE_FWD_ROUTING      (1u << 6) /* absent: the INCMOE_MOE_ROUTING setting (full) */
#define INCMOE_MOE_FWD_REFUSED      (1u << 7) /* refused: see the forward's refusal below */

/*
 * One forward.  x, topk_ids and topk_weights are in the backend's memory
 * (host for the CPU backend, device for CUDA) and are read until the call
 * returns (both backends return complete; CUDA orders its work behind the
 * caller's stream).  counts is host memory, read during the call only.
 */
typedef struct {
    uint32_t field_mask; /* INCMOE_MOE_FWD_* */
    incmoe_moe_mode_t mode;
    const void *x;                /* [counts[rank]][H] hidden states (dtype) */
    const int32_t *topk_ids;      /* [counts[rank]][k] distinct expert ids in [0, E) */
    const float *topk_weights;    /* [counts[rank]][k] routing weights, used as given */
    const int *counts;            /* [N] every rank's token count (must agree across ranks) */
    void *stream;                 /* cudaStream_t (CUDA backend); NULL or absent for the CPU */
    incmoe_moe_routing_t routing; /* the same on every rank */
    /* INCMOE_MOE_FWD_REFUSED: why this rank refuses its arguments (NULL: none given) */
    const char *refused;
} incmoe_moe_forward_params_t;

/*
 * A forward's refusal.  A caller that finds its own arguments wrong above this
 * API (a binding's checks) still takes part in the forward its peers run, so
 * that they are not left waiting: INCMOE_MOE_FWD_REFUSED with its reason, and
 * the counts, mode and routing every rank passes (they choose the path).  The
 * forward fails on every rank with INCMOE_ERR_INVALID_ARG, as for arguments
 * the layer's own checks reject, and the layer stays usable.
 */

/*
 * Collective forward pass.  *out_p receives [counts[rank]][H] outputs
 * (dtype): a view into the layer's reduce buffer (backend memory), valid
 * until the next forward or destroy.  Per-call argument checks and the
 * header exchange run on the host before any role starts; a forward that
 * fails after that (a collective or a wait inside the roles) leaves the layer
 * unusable: every later forward returns INCMOE_ERR_CLOSED, destroy it.
 */
incmoe_status_t incmoe_moe_forward_ex(incmoe_moe_t *layer, const incmoe_moe_forward_params_t *f,
                                      void **out_p);

/* The CPU shorthand: incmoe_moe_forward_ex with mode, x, ids, weights and counts set. */
incmoe_status_t incmoe_moe_forward(incmoe_moe_t *layer, incmoe_moe_mode_t mode, const void *x,
                                   const int32_t *topk_ids, const float *topk_w, const int *counts,
                                   void **out_p);

/* The configuration a pipelined forward with these counts uses (local, no
   communication; safe while no forward runs on the layer). */
incmoe_status_t incmoe_moe_config_for(const incmoe_moe_t *layer, const int *counts,
                                      incmoe_moe_config_t *config_p);
/* Prints a configuration in one line, e.g.
   "nb=4 workers(gather/compute/reduce)=1/2/1 tail=1"; returns snprintf's value.  Pure. */
int incmoe_moe_config_str(const incmoe_moe_config_t *config, char *buf, size_t len);

/* One line naming the layer's backend and where it put things, e.g. "cpu" or
   "cuda device 0 (132 SMs), buffers host-mapped (UCX reports no CUDA memory
   support), FFN tensor cores (WMMA)"; returns snprintf's value. */
int incmoe_moe_backend_str(const incmoe_moe_t *layer, char *buf, size_t len);

/* Wall-clock breakdown of this rank's last forward, in milliseconds: all zero
   after a forward that failed (also one rejected by the argument checks).
   Fields are only ever added at the end (incmoe_moe_last_timing_ex). */
typedef struct {
    double total_ms;         /* the whole call */
    double exchange_ms;      /* the header exchange every forward starts with */
    double allgather_ms;     /* baseline mode, full routing: the AllGather (0 in pipelined mode) */
    double ffn_ms;           /* baseline mode: the expert FFNs */
    double reducescatter_ms; /* baseline mode, full routing: the ReduceScatter */
    /* added with routing (read through incmoe_moe_last_timing_ex): */
    double dispatch_ms;           /* baseline mode, masked routing: the dispatch */
    double combine_ms;            /* baseline mode, masked routing: the combine */
    incmoe_moe_routing_t routing; /* what the forward used: full or masked (auto resolved) */
    /* added with the path (incmoe_moe_path_t): */
    int algo;               /* the incmoe_algo_t the forward ran on; -1: the communicator's */
    incmoe_moe_mode_t mode; /* baseline or pipelined (auto resolved) */
    int measured;           /* paths this forward ran to choose (0: it ran the chosen one) */
    /* added with the measuring's pruning: */
    int measure_runs; /* forwards those paths took: each once, the close ones up to 3 times */
    /* added with the band model following the routing: */
    int nbands; /* bands the forward's path ran (1 in baseline mode) */
} incmoe_moe_timing_t;

/* Copies the last forward's timings as they were before routing: the first five fields
   only, so a program built then gets what it allocated (same thread rules as the layer). */
incmoe_status_t incmoe_moe_last_timing(const incmoe_moe_t *layer, incmoe_moe_timing_t *timing_p);

/* Copies the first timing_size bytes of the last forward's timings (at most this version's
   whole struct); pass sizeof(incmoe_moe_timing_t).  A program built against an older
   version gets the fields it knows. */
incmoe_status_t incmoe_moe_last_timing_ex(const incmoe_moe_t *layer, incmoe_moe_timing_t *timing_p,
                                          size_t timing_size);

/* "baseline", "pipelined", "auto", "decode" or "unknown".  Pure. */
const char *incmoe_moe_mode_name(incmoe_moe_mode_t mode);

/* "full", "masked", "auto" or "unknown".  Pure. */
const char *incmoe_moe_routing_name(incmoe_moe_routing_t routing);

/*
 * Choosing a placement.  Where routing is skewed, the rank holding the popular
 * experts receives the most rows and sets every step's time; a few extra
 * expert slots per rank, holding replicas of the experts that load it, split
 * its rows, and moving experts between ranks spreads them.
 * incmoe_moe_placement_choose picks a whole placement (which expert on which
 * ranks) from a sample of the layer's routing; incmoe_moe_placement_rows says what a placement does
 * with a sample.  Both are pure (no communicator, no layer): run them anywhere,
 * alike on every rank.
 *
 * The load is a routing sample, the expert ids of tokens as a forward takes
 * them, each token on the rank that owns it: it gives the per-expert counts
 * and which experts are picked together, and also which rank each token
 * starts on, which a co-occurrence matrix loses (a token's own rank receives
 * no row from it).
 *
 * Rows: a token sends one row to each rank it visits other than its own,
 * however many of its experts that rank serves.  Which replica serves a
 * (token, expert) pair:
 * - INCMOE_MOE_SPLIT_PER_TOKEN, the layer's per-token rule, replayed as one
 *   pass that sees every rank's tokens: they are taken round-robin over the
 *   ranks (token 0 of every rank in rank order, then token 1, ...).  (The
 *   layer itself, where no rank sees another's ids, runs the rule over each
 *   rank's own tokens with a correction for the others' forced rows: see
 *   "Replicas"; the two land close, not equal.)  A pair whose expert has one replica goes
 *   there; each other pair, in the order of the token's ids, takes a replica
 *   on a rank the token already visits (its own, or one chosen before; the
 *   lowest of several), else the replica on the rank that has received the
 *   fewest rows so far (the lowest of equals).
 * - INCMOE_MOE_SPLIT_STATIC, as EPLB-style systems split statically: on each
 *   rank, its i-th token (0-based, in its own order) that picks expert e goes
 *   to e's replica i mod (e's replicas), in the placement's order.
 */
typedef struct {
    int num_experts;         /* E: a multiple of nranks */
    int top_k;               /* k: 1 .. min(E, INCMOE_MOE_MAX_TOPK) */
    int nranks;              /* N: 1 .. INCMOE_MAX_RANKS */
    const int *counts;       /* [N]: each rank's tokens in the sample, >= 0 */
    const int32_t *topk_ids; /* [sum of counts][k]: distinct ids in [0, E), rank 0's first */
} incmoe_moe_routing_sample_t;

typedef enum {
    INCMOE_MOE_SPLIT_PER_TOKEN = 0, /* the layer's per-token rule */
    INCMOE_MOE_SPLIT_STATIC = 1,    /* each expert's tokens split evenly by token index */
} incmoe_moe_split_t;

/*
 * A placement for the sample's load: every expert on at least one rank, each
 * rank holding at most E/N + extra_slots experts (extra_slots 0 .. E - E/N),
 * experts free to move off their contiguous base ranks (a rebalance moves
 * weights).  Written to offsets[E + 1] and ranks (room for E + N *
 * extra_slots entries; offsets[E] says how many were used), an
 * incmoe_moe_placement_t over them valid as that type says.  Chosen to lower
 * the busiest rank's rows under INCMOE_MOE_SPLIT_PER_TOKEN:
 * - a balanced packing of the per-expert pairs: the slots are shared out one
 *   replica at a time to the expert with the most pairs per replica (each
 *   expert one first, at most N each), and the replicas, heaviest first, go
 *   each to the lightest rank with a free slot and no replica of that expert
 *   (DeepSeek's EPLB greedy, which may put two replicas of one expert on
 *   one rank; here they never share one);
 * - then a local search: in turn for each expert on a busiest rank (the
 *   lowest expert first) and each rank lacking it (the fewest rows first),
 *   drop it where it has another replica, or give that rank a replica (in a
 *   free slot, moved from the busiest rank, replacing an expert with another
 *   replica, or swapped with one the busiest rank lacks), replaying the
 *   sample through the rule and keeping the first change that lowers the
 *   ranks' rows compared busiest first (the maximum, then the next, ...),
 *   until none does or 256 were kept.
 * The replay sees which experts a rank's tokens pick together, so a replica
 * lands where the tokens that need it already go.  The same sample gives the
 * same placement on every machine (integers only).  Each change tried
 * replays the sample once: E=64, k=8, 256 tokens on each of N=8 ranks take
 * about 6 CPU seconds, N=16 about 4.  A slot may stay empty.
 * INCMOE_ERR_INVALID_ARG with the reason in why[0 .. why_len) (why may be
 * NULL) for a bad sample, extra_slots or a NULL array, INCMOE_ERR_NO_MEMORY
 * when its scratch (E * N bytes and a few arrays of E and N) could not be
 * allocated; offsets and ranks are not written then.
 */
incmoe_status_t incmoe_moe_placement_choose(const incmoe_moe_routing_sample_t *sample,
                                            int extra_slots, int *offsets, int *ranks, char *why,
                                            size_t why_len);

/*
 * rows[N]: the rows each rank receives when the sample runs on placement
 * (any valid one) with the split.  The busiest
 * rank's rows are their maximum.  INCMOE_ERR_INVALID_ARG with the reason in
 * why (may be NULL) for a bad sample, placement or split; INCMOE_ERR_NO_MEMORY
 * if the static split's counters (E ints) could not be allocated.
 */
incmoe_status_t incmoe_moe_placement_rows(const incmoe_moe_routing_sample_t *sample,
                                          const incmoe_moe_placement_t *placement,
                                          incmoe_moe_split_t split, int64_t *rows, char *why,
                                          size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
