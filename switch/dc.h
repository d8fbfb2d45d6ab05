/*
 * dc.h - dispatch and combine on the switch (base/wire.h, "Dispatch and
 * combine"): the third form a collective can take, shared by dc.c (POSTs,
 * SMALLs, the plan, DATA in, the items' common life), dc_dispatch.c (the
 * filtered multicast) and dc_combine.c (the masked reduction).
 *
 * A collective's plan is made when the last rank posts: the verdict every
 * rank shares (base/dc_plan.c) goes out in PLAN, and only then may DATA come.
 * Each chunk (root, chunk) is an item (coll_item.c): dispatch items hold the
 * source's chunk and are forwarded in chunk order per source; combine items
 * hold the owner's set chunk and the contributors' partials and are reduced
 * once all are in.  A SMALL is a coll_item of its own, whose pieces the items
 * hold in place of DATA of their own.
 */
#ifndef INCMOE_SWITCH_DC_H
#define INCMOE_SWITCH_DC_H

#include "coll_item.h"
#include "coll_table.h"
#include "base/dc_plan.h"

/* A SMALL: its payload, held by its collective until the plan (and by its rendezvous
   receive), when its pieces are copied into their items. */
typedef struct dc_small {
    coll_item_t ci; /* first */
    int from;
    char *buf; /* job memory */
    size_t len;
    uint64_t total; /* its header's */
    int in;         /* its payload is here (a rendezvous one lands later) */
} dc_small_t;

/* A SMALL's one credit, given back once the last item holding one of its pieces is done
   (no job reference: it never outlives the job's collectives). */
typedef struct dc_credit {
    int pieces; /* items still holding a piece */
    int from, stream;
    uint64_t epoch;
} dc_credit_t;

/* One rank's contribution to an item. */
typedef struct {
    char *data;          /* job memory; NULL while missing */
    size_t length;       /* bytes */
    dc_credit_t *credit; /* a piece of a SMALL: its credit; NULL: a DATA's own credit */
    int in;              /* its bytes are here (a rendezvous one lands later) */
} dc_contrib_t;

typedef struct dc_item {
    coll_item_t ci; /* first */
    struct dc_item *next;
    uint32_t root, chunk;
    uint64_t k;            /* source rows of the chunk */
    uint64_t first;        /* its first source row */
    uint64_t row_bytes;    /* the collective's (an item may outlive it while it sends) */
    size_t words;          /* W */
    dc_contrib_t *contrib; /* [nranks] */
    /* combine */
    int have_sets; /* the owner's set chunk is in and checked */
    uint32_t *kd;  /* [nranks] rows of the chunk whose set holds d (d != root) */
    int nexpected; /* contributions it needs, the set chunk's included */
    int nin;       /* contributions in and checked */
    char *out;     /* the reduced rows (job memory) */
    size_t out_len;
    int started; /* its forward began (dispatch: taken in order; combine: reduced) */
} dc_item_t;

typedef struct dc_coll {
    job_t *job;
    struct inc_wire_dc_post *post; /* [nranks] */
    uint32_t *count;               /* [nranks * nranks]: count[s][d] (combine: sent) */
    uint32_t *recvd;               /* [nranks * nranks]: combine: recvd[d][s] */
    uint32_t *track;    /* [nranks * nranks]: dispatch: rows of s sent to d so far; combine:
                           the next chunk of owner s that d may send */
    uint64_t *next;     /* [nranks]: dispatch: the next chunk of s to arrive */
    uint64_t *taken;    /* [nranks]: dispatch: the next chunk of s to forward */
    dc_small_t **small; /* [nranks]: each SMALL, held by the collective until the plan */
    size_t mem;         /* job memory of this block */
    int planned;        /* PLAN went out */
    int ok;             /* its verdict was OK: DATA may come */
    uint64_t rows_per_chunk, row_bytes;
    size_t words; /* W */
    dc_item_t *items;
} dc_coll_t;

/* The form (coll_table.h) of a dispatch or combine. */
extern const coll_form_t dc_form;

/* engine.c hands every message of the dispatch and combine streams here. */
ucs_status_t dc_on_message(membership_t *m, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                           void *data, size_t length, const ucp_am_recv_param_t *param);

/* --- dc.c, for the two kinds --- */

/* Chunks of a rank with rows rows. */
uint64_t dc_nchunks(const dc_coll_t *dc, uint64_t rows);
/* The item's work is over (its sends completed, or it had none): its DATA senders get their
   credits back, it leaves the collective, which may be done (and freed) now. */
void dc_item_finish(dc_item_t *it);
/* The item (root, chunk), or NULL. */
dc_item_t *dc_item_find(dc_coll_t *dc, uint32_t root, uint32_t chunk);
/* Set of a row of a sets block (W words, unaligned) into set[]; 0 if it names a rank >= N. */
int dc_read_set(const char *sets, uint64_t row, size_t words, int nranks, uint64_t *set);

/* --- dc_dispatch.c --- */

/* DATA header of a dispatch chunk from rank me: in order and shaped as its POST says; 0 if
   not (the job failed). */
int dc_dispatch_admit(membership_t *m, job_t *job, coll_t *c, int me,
                      const struct inc_wire_dc_piece *p);
/* The chunk's bytes are in: check them and forward what may go, in chunk order. */
void dc_dispatch_in(coll_t *c, dc_item_t *it);

/* --- dc_combine.c --- */

/* DATA header of a combine set chunk or partial chunk from rank me; 0 if not (failed). */
int dc_combine_admit(membership_t *m, job_t *job, coll_t *c, int me,
                     const struct inc_wire_dc_piece *p, int dtype, int redop);
/* Rank from's bytes are in: check them, and reduce and forward once all are. */
void dc_combine_in(coll_t *c, dc_item_t *it, int from);

#endif
