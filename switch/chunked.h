/*
 * chunked.h - the chunked form of a collective (coll_form.h): POST, DATA
 * chunk by chunk, FWD; the barrier too.  Its reductions may run on the
 * --threads workers (reduce_pool.h), which hand them back to the router.
 */
#ifndef INCMOE_SWITCH_CHUNKED_H
#define INCMOE_SWITCH_CHUNKED_H

#include "coll_form.h"

extern const coll_form_t chunked_form;

/* The reduction of a task (reduce_pool's compute, on a worker thread). */
void chunked_compute(reduce_task_t *task);
/* A task the workers finished, back on the event loop: its result goes out. */
void chunked_reduced(reduce_task_t *task);

#endif
