/*
 * engine.h - the switch engine: the in-network collectives of the jobs
 * membership admits (multicast AllGather, rooted-reduction ReduceScatter,
 * AllReduce, barrier, dispatch and combine) with credit-based flow control.
 * engine.c routes each message to its form (coll_form.h).  The server
 * reaches it only through engine_ops; it sends only through switch_tx.  See
 * base/wire.h for the protocol.
 */
#ifndef INCMOE_SWITCH_ENGINE_H
#define INCMOE_SWITCH_ENGINE_H

#include "coll_table.h"
#include "engine_ops.h"
#include "membership.h"
#include "reduce_pool.h"

typedef struct engine {
    const switch_settings_t *set;
    switch_stats_t *stats;
    switch_tx_t tx;
    trips_tx_arg_t counted; /* tx, counting what goes to the ranks (trips.c): what jobs send by */
    membership_t members;
    reduce_pool_t pool;
    coll_env_t env;          /* what the forms get: &members, &pool */
    double progress_checked; /* when the progress timeout was last checked */
} engine_t;

/* Ready the engine and start its set->nthreads - 1 reduction threads; -1 (said on stderr)
   if they cannot start. */
int engine_init(engine_t *eng, const switch_settings_t *set, switch_stats_t *stats, switch_tx_t tx);
/* Stop the reduction threads (after the server has stopped). */
void engine_fini(engine_t *eng);

/* What the server calls; the engine argument is an engine_t. */
extern const switch_engine_ops_t engine_ops;

#endif
