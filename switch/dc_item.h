/*
 * dc_item.h - dispatch and combine on the switch (base/wire.h, "Dispatch and
 * combine" and "Switch trees"), what their files share: dc_form.c (POSTs,
 * SMALLs, the plan, chunks in) over dc_dispatch.c (the filtered multicast)
 * and dc_combine.c (the masked reduction), both reached through a dc_kind_t,
 * over dc_item.c (the items' common life, the ports a set meets).
 *
 * A collective's plan is made when the last rank's POST is in (every switch
 * of a tree sees every rank's POST and makes the same plan): the verdict
 * every rank shares (base/dc_plan.c) goes out in PLAN to this switch's ranks,
 * and only then may chunks come.  Everything runs on ports (a rank, a child
 * switch, the parent), each named by its key (job->rep), as the rest of the
 * tree code: on one switch every port is a rank and its key the rank.  Each
 * chunk (root, chunk) is an item (coll_item.c), taken in its root's chunk
 * order from the port covering the root: dispatch items hold the source's
 * chunk and forward it; combine items hold the owner's set chunk, forward it
 * toward the other switch ports and reduce the ports' partials once all are
 * in.  A SMALL is a coll_item of its own, whose pieces the items hold in
 * place of DATA of their own.
 */
#ifndef INCMOE_SWITCH_DC_ITEM_H
#define INCMOE_SWITCH_DC_ITEM_H

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

/* One port's contribution to an item. */
typedef struct {
    char *data;          /* job memory; NULL while missing */
    size_t length;       /* bytes */
    dc_credit_t *credit; /* a piece of a SMALL: its credit */
    int credited;        /* a DATA that took one of its port's credits: CREDIT returns it */
    int in;              /* its bytes are here (a rendezvous one lands later) */
} dc_contrib_t;

typedef struct dc_item {
    coll_item_t ci; /* first */
    struct dc_item *next;
    uint32_t root, chunk;
    int from;              /* the port covering root: its chunk (set chunk) comes from there */
    uint64_t k;            /* source rows of the chunk */
    uint64_t first;        /* its first source row */
    uint64_t row_bytes;    /* the collective's (an item may outlive it while it sends) */
    size_t words;          /* W */
    dc_contrib_t *contrib; /* [nranks] by port key */
    uint32_t *kd;  /* [nranks] by port key: rows of the chunk whose set names a rank the port
                      covers, for every port but from */
    int src_in;    /* from's chunk is in and checked (kd counted) */
    int taken;     /* taken in its root's chunk order: forwarded on (dispatch: its rows; combine:
                      its set chunk, toward the switch ports) */
    int nexpected; /* combine: contributions it needs, the set chunk's included */
    int nin;       /* combine: contributions in and checked */
    char *out;     /* combine: the reduced rows (job memory) */
    size_t out_len;
    int reduced; /* combine: its result went toward the owner (or it had none) */
} dc_item_t;

struct dc_kind;

typedef struct dc_coll {
    job_t *job;
    const struct dc_kind *kind;    /* dispatch's or combine's */
    struct inc_wire_dc_post *post; /* [nranks] */
    uint32_t *count;               /* [nranks * nranks]: count[s][d] (combine: sent) */
    uint32_t *recvd;               /* [nranks * nranks]: combine: recvd[d][s] */
    uint32_t *track;    /* [nranks * nranks]: dispatch: rows of s sent to d so far; combine:
                           the next chunk of owner s that port d may send (d = s: the next set
                           chunk) */
    uint64_t *next;     /* [nranks]: dispatch: the next chunk of root s that may arrive */
    dc_small_t **small; /* [nranks]: each SMALL, held by the collective until the plan */
    size_t mem;         /* job memory of this block */
    int planned;        /* the plan is made (PLAN went to this switch's ranks) */
    int ok;             /* its verdict was OK: chunks may come */
    uint64_t rows_per_chunk, row_bytes;
    size_t words; /* W */
    dc_item_t *items;
    /* The lowest rank that refused its arguments so far (incmoe.h, "A refusal"), plus one (0:
       none), and its reason: the verdict names no other. */
    int refused_by;
    char refused_why[INCMOE_REFUSAL_MAX];
} dc_coll_t;

/* What differs between dispatch and combine (dc_dispatch.c, dc_combine.c). */
typedef struct dc_kind {
    /* The header of a chunk (dispatch) or of a set chunk or partial (combine) from port me:
       in order and shaped as the plan says; 0 if not (the job failed). */
    int (*admit)(membership_t *m, job_t *job, coll_t *c, int me, const struct inc_wire_dc_piece *p,
                 int dtype, int redop);
    /* Port from's bytes are in: check them, and move on (forward, reduce) what may go. */
    void (*in)(coll_t *c, dc_item_t *it, int from);
    /* Forward an item taken in its root's chunk order. */
    void (*take)(coll_t *c, dc_item_t *it);
    /* The root's last chunk was taken: what the plan promised this switch's ranks holds; 0:
       the job failed. */
    int (*source_done)(coll_t *c, int s);
} dc_kind_t;

extern const dc_kind_t dc_dispatch_kind;
extern const dc_kind_t dc_combine_kind;

/* --- dc_item.c --- */

/* Chunks of a rank with rows rows. */
uint64_t dc_nchunks(const dc_coll_t *dc, uint64_t rows);
/* Is port p a switch (a child or the parent)? */
int dc_switch_port(const job_t *job, int p);
/* How a reason names port p: "rank 3", or "the switch port of rank 3"; buf holds it. */
const char *dc_port_name(const job_t *job, int p, char *buf, size_t len);
/* The item's forwards went or it had none (it is taken, and a combine's result went): its
   credited senders get their credits back, it leaves the collective, which may be done (and
   freed) now.  Called again while sends are out, it waits for the last. */
void dc_item_try_finish(dc_item_t *it);
/* A new item of chunk (root, chunk), in the collective's list; it counts in the collective's
   remaining until it finishes.  NULL: out of memory. */
dc_item_t *dc_item_new(job_t *job, coll_t *c, uint32_t root, uint32_t chunk);
/* Port from's contribution to the item is in: the kind's in, the item held across (that may
   finish it). */
void dc_contribution_in(dc_item_t *it, int from);
/* A CREDIT to port r on the stream (its inflight count goes down), if the job is active. */
void dc_send_credit(membership_t *m, job_t *job, int r, int stream, uint64_t epoch);
/* A piece's item is done with it: the SMALL's credit goes back with its last piece. */
void dc_credit_put(membership_t *m, job_t *job, dc_credit_t *cr);
/* The item (root, chunk), or NULL. */
dc_item_t *dc_item_find(dc_coll_t *dc, uint32_t root, uint32_t chunk);
/* Set of a row of a sets block (W words, unaligned) into set[]; 0 if it names a rank >= N. */
int dc_read_set(const char *sets, uint64_t row, size_t words, int nranks, uint64_t *set);
/* The ports but except whose side holds a rank of the set, in ascending key order, into
   ports[] (room for nranks); their number.  On one switch: the set's ranks but except. */
int dc_set_ports(const job_t *job, const uint64_t *set, size_t words, int except, int *ports);
/* Does the set name a rank port p covers?  One p does not cover? */
int dc_set_meets(const job_t *job, const uint64_t *set, size_t words, int p);
int dc_set_beyond(const job_t *job, const uint64_t *set, size_t words, int p);
/* Take root s's items whose chunks are in, in chunk order (the kind's take), and at its last
   chunk the kind's source_done. */
void dc_advance(coll_t *c, int s);

#endif
