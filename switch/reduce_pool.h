/*
 * reduce_pool.h - the --threads reduction workers: tasks go in from the
 * event loop, are computed on a worker thread, and come back to the event
 * loop, which an eventfd wakes.  With no workers nothing is submitted and
 * the caller reduces inline.
 */
#ifndef INCMOE_SWITCH_REDUCE_POOL_H
#define INCMOE_SWITCH_REDUCE_POOL_H

#include <pthread.h>

/* Embedded in what is to be reduced. */
typedef struct reduce_task {
    struct reduce_task *next;
} reduce_task_t;

/* Runs on a worker thread; touches only the task's own buffers. */
typedef void (*reduce_fn_t)(reduce_task_t *task);

typedef struct {
    int nworkers;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    reduce_task_t *todo, *done;
    int stop;
    int fd; /* eventfd: tasks finished; -1 without workers */
    reduce_fn_t compute;
} reduce_pool_t;

/* Start nworkers threads (0: none).  On failure says why on stderr and returns -1 with
   nothing left running. */
int reduce_pool_start(reduce_pool_t *pool, int nworkers, reduce_fn_t compute);
/* Hand a task to the workers: 1, or 0 when there are none (reduce inline then). */
int reduce_pool_submit(reduce_pool_t *pool, reduce_task_t *task);
/* The tasks finished since the last call, as a list; clears the wake fd. */
reduce_task_t *reduce_pool_take_done(reduce_pool_t *pool);
/* Readable when reduce_pool_take_done has something, or -1. */
int reduce_pool_fd(const reduce_pool_t *pool);
/* Stop and join the workers; tasks still queued are not computed. */
void reduce_pool_stop(reduce_pool_t *pool);

#endif
