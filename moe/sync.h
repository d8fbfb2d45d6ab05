/*
 * sync.h - the atomics and waits the role loops are written over.
 *
 * Progress counters only increase: a producer publishes with release, a
 * consumer waits until a counter reaches a threshold and then reads with
 * acquire, so it sees every byte written before the publication.  The CPU
 * implementation spins briefly (a role waits on another role of the same
 * rank, usually for microseconds) and then sleeps on a futex, so a blocked
 * worker never steals a core from the processes moving data.  A CUDA backend
 * supplies the same four functions over device atomics.
 */
#ifndef INCMOE_MOE_SYNC_H
#define INCMOE_MOE_SYNC_H

#include <stdatomic.h>
#include <stdint.h>

#include "api/incmoe.h"

typedef _Atomic uint64_t sync_counter_t;

static inline uint64_t sync_load(const sync_counter_t *c)
{
    return atomic_load_explicit((sync_counter_t *)c, memory_order_acquire);
}

/* Raises *c to v (release) and wakes its waiters; never lowers it. */
void sync_publish(sync_counter_t *c, uint64_t v);

/* Adds 1 (release) and wakes waiters; returns the new value. */
uint64_t sync_advance(sync_counter_t *c);

/*
 * Waits until *c >= target.  Gives up with the abort flag's status once
 * *abort becomes non-zero (another worker failed), and with
 * INCMOE_ERR_TIMEOUT after timeout_ms.  Wake-ups on *abort come through
 * sync_abort, which wakes every sleeper it knows of.
 */
incmoe_status_t sync_wait_geq(const sync_counter_t *c, uint64_t target, const _Atomic int *abort,
                              int timeout_ms);

/* Records the first failure in *abort and wakes every sleeping waiter. */
void sync_abort(_Atomic int *abort, incmoe_status_t status);

#endif
