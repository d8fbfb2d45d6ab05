/*
 * engine.h - the switch engine: the in-network collectives of the jobs
 * membership admits (multicast AllGather, rooted-reduction ReduceScatter,
 * AllReduce, barrier) with credit-based flow control.  The server reaches
 * it only through engine_ops; it sends only through switch_tx.  See
 * base/wire.h for the protocol.
 */
#ifndef INCMOE_SWITCH_ENGINE_H
#define INCMOE_SWITCH_ENGINE_H

#include "coll_item.h"
#include "engine_ops.h"
#include "membership.h"
#include "reduce_pool.h"

struct small;

/* The form a collective takes (base/wire.h): set by its first message, the same for all. */
enum { COLL_FORM_NONE = 0, COLL_FORM_NORMAL, COLL_FORM_SMALL };

typedef struct coll {
    struct coll *next;
    int stream;
    uint64_t epoch;
    uint64_t sig;
    int dtype, redop;
    int has_desc;    /* sig/dtype/redop set by the first POST or DATA */
    uint8_t *posted; /* [nranks] */
    uint64_t *bytes; /* [nranks] announced by each rank's POST */
    int nposted;
    /* It may be done once remaining is 0.  Chunked: set when everyone has posted and the
       items complete by then are forwarded (one completing later forwards at once); small:
       when every SMALL_FWD completed; barrier: at the last POST. */
    int armed;
    uint64_t remaining; /* bytes still to forward once armed */
    int done;
    double opened;       /* when the first rank's POST or DATA opened it (progress timeout) */
    struct item *items;  /* the chunked form's (engine.c), each holding a coll_item_t */
    int form;            /* COLL_FORM_* */
    struct small *small; /* the small form's state (small.c), else NULL */
} coll_t;

typedef struct engine {
    const switch_settings_t *set;
    switch_stats_t *stats;
    switch_tx_t tx;
    membership_t members;
    reduce_pool_t pool;
    double progress_checked; /* when the progress timeout was last checked */
} engine_t;

/* Ready the engine and start its set->nthreads - 1 reduction threads; -1 (said on stderr)
   if they cannot start. */
int engine_init(engine_t *eng, const switch_settings_t *set, switch_stats_t *stats, switch_tx_t tx);
/* Stop the reduction threads (after the server has stopped). */
void engine_fini(engine_t *eng);

/* For small.c: the collective (stream, epoch), opened if new (NULL: the job failed); check a
   message's description, and its form, against the collective's (0: the job failed); retire
   the collective if it is done; may rank me send one more message on stream (0: it has used
   every credit, and the job failed). */
coll_t *engine_coll_get(engine_t *eng, job_t *job, conn_t *conn, int stream, uint64_t epoch);
int engine_coll_describe(engine_t *eng, job_t *job, conn_t *conn, coll_t *c,
                         const struct inc_wire_hdr *h);
int engine_coll_form(engine_t *eng, job_t *job, conn_t *conn, coll_t *c, int form);
void engine_coll_check_done(engine_t *eng, job_t *job, coll_t *c);
int engine_credit_left(engine_t *eng, job_t *job, int me, int stream);

/* What the server calls; the engine argument is an engine_t. */
extern const switch_engine_ops_t engine_ops;

#endif
