/*
 * dc_shared.h - what dispatch and combine share, whichever algorithm moves
 * their rows (dc_shared.c): the kept dispatches, the plan applied, the local
 * rows, the outcomes.
 */
#ifndef INCMOE_DC_SHARED_H
#define INCMOE_DC_SHARED_H

#include "client.h"

#include "base/dc_plan.h"

/*
 * What the library keeps of a dispatch (dc_shared.c), from its post until a combine
 * naming it completes or incmoe_dispatch_release.  The posting thread fills
 * the first part; the proxy the plan's part, before the dispatch completes;
 * after that only the fields under comm->lock change.
 */
typedef struct client_dc {
    struct client_dc *next; /* comm->dcs, under comm->lock */
    uint64_t epoch;         /* the dispatch's (0 until it is queued) */
    int kept;               /* in comm->dcs */
    int complete;           /* the dispatch retired, with status (under comm->lock) */
    incmoe_status_t status;
    int combining; /* a combine naming it is in flight (under comm->lock) */
    size_t nrows, row_bytes, words;
    uint64_t *sets;   /* [nrows * words], this rank's copy */
    uint32_t *sent;   /* [nranks]: its rows whose set holds d (the count row) */
    uint32_t *recvd;  /* [nranks]: rows from each source (the plan) */
    uint64_t *base;   /* [nranks + 1]: first received row of each source; base[nranks] = R */
    uint32_t *own_at; /* [nrows]: where a row whose set holds this rank was received, else
                         UINT32_MAX */
    size_t nrecv;     /* R */
    uint32_t *source; /* [2 R]: (rank, row) of each received row, as they land; the low-latency
                         form: [2 nregions region_rows], by slot (region j's from j region_rows) */

    /* The low-latency form (incmoe.h, "The low-latency form"; ll_shared.c); ll 0: the bulk
       form.  base[s] = s * max_tokens: the slots of source s's rows in a by-source view, which
       the combine's partials take (by expert, after the fold). */
    int ll;
    int by_expert;
    size_t max_tokens;
    size_t nregions;     /* by source N, by expert L (this rank's experts) */
    size_t region_rows;  /* rows of one region: by source max_tokens, by expert N max_tokens */
    uint32_t *counts;    /* [nregions] rows of each region */
    uint64_t layout_sig; /* by expert: inc_ll_layout_sig of the table; else 0 */
    int topk;
    int num_experts;
    int32_t *experts; /* [nrows * topk] this rank's rows' expert ids (by expert) */
    int32_t *local;   /* [num_experts] this rank's local index of an expert, or -1 */
    /* By expert: the region rows of the k-th row received from s (slot s * max_tokens + k), in
       ascending local expert: slots[slot_first[slot] .. slot_first[slot + 1]). */
    uint32_t *slot_first; /* [nranks * max_tokens + 1] */
    uint32_t *slots;      /* [R] */
} client_dc_t;

/* Does row's set hold rank r? */
static inline int client_dc_in_set(const client_dc_t *dc, size_t row, int r)
{
    return (int)((dc->sets[row * dc->words + (size_t)r / 64] >> ((unsigned)r % 64)) & 1u);
}

/* Does row's set hold a rank other than me (the row crosses the network)? */
static inline int client_dc_goes_out(const client_dc_t *dc, size_t row, int me)
{
    for (size_t w = 0; w < dc->words; w++) {
        uint64_t bits = dc->sets[row * dc->words + w];
        if (w == (size_t)me / 64)
            bits &= ~((uint64_t)1 << ((unsigned)me % 64));
        if (bits != 0)
            return 1;
    }
    return 0;
}

/* How a dispatch or combine that failed alone reads later (incmoe_test, incmoe_req_error). */
typedef struct client_outcome {
    uint64_t epoch;
    incmoe_status_t status;
    char *why; /* owned */
} client_outcome_t;

/* A dispatch's record for nrows rows of this rank, its sets zeroed; NULL out of memory. */
client_dc_t *client_dc_new(int nranks, size_t nrows, size_t row_bytes);
/* The record takes the low-latency form by source: max_tokens rows per region, N regions;
   0 out of memory. */
int client_dc_set_low_latency(client_dc_t *dc, int nranks, size_t max_tokens);
/* The sets copied into the record, each naming only ranks < nranks; 0 with the reason in why
   (the record's sets then unspecified). */
int client_dc_take_sets(client_dc_t *dc, int nranks, const uint64_t *sets, char *why,
                        size_t why_len);
/* From the record's sets: its rows for each destination (sent) and where its own rows land in
   its own source block (own_at). */
void client_dc_count_sets(const incmoe_comm_t *comm, client_dc_t *dc);
/* Free a record that is not kept. */
void client_dc_free(client_dc_t *dc);
/* Under comm->lock, the dispatch's epoch fixed: keep its record; 0 (nothing changed) when
   INCMOE_STREAM_WINDOW dispatches are kept already. */
int client_dc_keep_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Under comm->lock: the kept dispatch of that epoch, or NULL. */
client_dc_t *client_dc_find_locked(incmoe_comm_t *comm, uint64_t epoch);
/* Under comm->lock: stop keeping a record and free it. */
void client_dc_unkeep_locked(incmoe_comm_t *comm, client_dc_t *dc);
/* Under comm->lock: a dispatch or combine retires: its failure is kept for incmoe_test, the
   dispatch's record completes, and a combine's releases it on success. */
void client_dc_retire_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Under comm->lock: a dispatch or combine goes without retiring (rejected, or closing). */
void client_dc_drop_locked(coll_op_t *op);
/* Under comm->lock: how a completed dispatch or combine ended; *why_p its reason ("" if it
   succeeded). */
incmoe_status_t client_dc_outcome_locked(incmoe_comm_t *comm, const incmoe_req_t *req,
                                         const char **why_p);
/* Closing: free every kept record and kept failure. */
void client_dc_close_all(incmoe_comm_t *comm);

/* Proxy thread.  A dispatch's plan: recvd[s] rows from each source and the shared verdict.
   OK: the own rows are in place and the rest is expected (recv_expected, in rows); a failed
   verdict completes the dispatch with it, nothing written.  A plan that contradicts this
   rank's own count or capacity fails the communicator (returned). */
incmoe_status_t client_dc_plan_dispatch(incmoe_comm_t *comm, coll_op_t *op, const uint32_t *recvd,
                                        const inc_dc_verdict_t *v);
/* Proxy thread.  A combine's plan: OK: every row of this rank that no other rank contributes
   to is written (its own partial, or zeros) and the others are expected (recv_expected, in
   rows); a failed verdict completes the combine with it. */
void client_dc_plan_combine(incmoe_comm_t *comm, coll_op_t *op, const inc_dc_verdict_t *v);
/* Proxy thread, a single rank: the plan of the dispatch or combine, made here. */
void client_dc_plan_alone(incmoe_comm_t *comm, coll_op_t *op);
/* Where n rows of source src, from its pos-th row for this rank on, land; NULL (nothing
   changed) if they fall outside what the plan announced. */
char *client_dc_recv_rows(coll_op_t *op, int src, uint64_t pos, uint64_t n);
/* The source table of those rows: rows[k] is the source row of the (pos + k)-th. */
void client_dc_set_sources(coll_op_t *op, int src, uint64_t pos, uint64_t n, const uint32_t *rows);
/* This rank's own partial of its row (its set holds this rank), else NULL. */
const char *client_dc_own_partial(const incmoe_comm_t *comm, const coll_op_t *op, size_t row);
/* Combine: row's result from others, the reduction of the other contributors' partials in
   ascending rank order: recv = own partial op others (own last), or others alone. */
void client_dc_combine_row(const incmoe_comm_t *comm, coll_op_t *op, size_t row,
                           const void *others);

#endif
