/*
 * ctx.h - what the role loops run over: a plain-old-data context (pointers,
 * sizes, the plan of one forward, the FIFO's device handle) and the progress
 * counters.  No host-only types, so a kernel can take it by value; every
 * pointer is valid wherever the backend runs the loops (host memory for the
 * CPU backend; device or host-mapped memory for a GPU backend).
 */
#ifndef INCMOE_MOE_CTX_H
#define INCMOE_MOE_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe_fifo.h"
#include "incmoe/incmoe_moe.h"

/*
 * The progress counters of paper section 3.3.  Plain integers that only
 * grow across forwards (a threshold is a forward's base plus the band),
 * read and written only through the backend's atomic helpers.  Failures set
 * `abort` (an incmoe_status_t, first one wins) and record where; the host
 * reports them after the loops returned.
 */
typedef struct {
    uint64_t gather_copied[INCMOE_MOE_MAX_WORKERS];
    uint64_t ag_ready;
    uint64_t compute_done[INCMOE_MOE_MAX_WORKERS];
    uint64_t rs_ready; /* band's partials all written (and, where it syncs, every rank there) */
    uint64_t rs_turn;
    int32_t abort;
    uint32_t bell;      /* rung by every publication and by abort (host waits sleep on it) */
    int32_t fail_what;  /* moe_fail_t of the first failure */
    uint64_t fail_band; /* its band */
} moe_counters_t;

/* What failed first (the host names it in the error it logs). */
typedef enum {
    MOE_FAIL_GATHER_COPY = 0,
    MOE_FAIL_AG_POST,
    MOE_FAIL_AG,
    MOE_FAIL_WAIT_AG,
    MOE_FAIL_WAIT_FFN,
    MOE_FAIL_BARRIER,
    MOE_FAIL_WAIT_RS_READY,
    MOE_FAIL_WAIT_RS_TURN,
    MOE_FAIL_RS_POST,
    MOE_FAIL_RS,
} moe_fail_t;

/* Most collectives one poster keeps posted and not yet waited for (INCMOE_MOE_DEPTH). */
#define MOE_MAX_DEPTH 8

typedef struct {
    /* shape */
    int N, rank, H, k;
    int32_t dtype; /* incmoe_dtype_t */
    size_t esize;
    size_t grow; /* bytes of a gather row: H elements, k ids, k weights */
    size_t zrow; /* bytes of a reduce row: H elements */

    /* the plan of this forward, fixed before any role starts */
    int pipelined;
    int masked;        /* routing: dispatch and combine rather than AllGather and ReduceScatter */
    int G, C, R, tail; /* gather / compute / reduce workers, tail bands */
    size_t tmax;       /* rows per block */
    size_t nb;         /* bands (1 in baseline mode) */
    int depth;         /* 1..MOE_MAX_DEPTH collectives in flight per poster */
    size_t sync_every; /* a band barrier before bands k * sync_every; 0 = none */
    const size_t *counts;  /* [N] tokens per rank */
    const size_t *valid_g; /* [N] bytes of data per gather block (read by the proxy) */
    const size_t *valid_z; /* [N] bytes of data per reduce block (read by the proxy) */
    const void *x;         /* this rank's inputs */
    const int32_t *ids;
    const float *w;
    uint64_t band_base; /* bands finished by earlier forwards */
    uint64_t rs_base;   /* ReduceScatter parts posted by earlier forwards */
    uint64_t dc_base;   /* dispatches pushed on the FIFO by earlier forwards (their tickets) */

    /* buffers */
    uint8_t *xg;          /* gather buffer: N blocks of tmax rows (this forward's layout) */
    uint8_t *z;           /* reduce buffer, same shape with zrow rows */
    float *own;           /* [tmax][H] this rank's own partial (pipelined mode) */
    uint64_t xg_mr, z_mr; /* (incmoe_mr_t *) of xg and z */

    /* Masked routing.  Band j's rows received land at rows [N * start_j, ...) of xg in
       received order, their partials at the same rows of z (plan.h: recv_row). */
    int E;
    size_t words;          /* INCMOE_SET_WORDS(N) */
    const int32_t *owner;  /* [E] the rank hosting each expert */
    uint8_t *xs;           /* [tmax][grow] this rank's rows to dispatch */
    uint64_t *sets;        /* [tmax][words] their destination sets */
    uint8_t *zo;           /* [tmax][zrow] the combined outputs, this rank's tokens */
    uint64_t xs_mr, zo_mr; /* (incmoe_mr_t *) of xs and zo */
    /* [nb] band j's FIFO dispatch block: its sets (host address) in, R out.  dcb is where
       the roles read it; dcb_host the host's address of the same array, for the trigger. */
    incmoe_fifo_dispatch_t *dcb;
    uint64_t dcb_host;
    uint64_t sets_host; /* the host's address of sets (what the dispatch blocks name) */
    /* [N * tmax][2] the source (rank, row) of each received row, at its row of xg; src_host
       is the host's address of the same table. */
    const uint32_t *src;
    uint64_t src_host;
    /* The decode step (decode.h): one band whose rows were received in the low-latency
       form by source, source s's from row s * region_rows of xg (their partials at the
       same rows of z); region_first[s] is the received index of region s's first row.
       region_rows 0: a bulk forward, received rows contiguous as above. */
    size_t region_rows;
    const uint32_t *region_first;

    moe_counters_t *cnt;
    incmoe_fifo_device_t fifo;
    void *host_fifo; /* the incmoe_fifo_t, for host backends' pushes */
    void *be;        /* the backend's own state (weights, scratch) */
    int timeout_ms;  /* bound on any wait */
} moe_ctx_t;

#endif
