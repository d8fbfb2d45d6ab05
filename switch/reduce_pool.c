/*
 * reduce_pool.c - the reduction worker threads.  Workers take tasks from a
 * mutex-protected list, compute them without the lock, put them on the
 * done list and write the eventfd the event loop sleeps on.  Only the event
 * loop submits and collects, so a task is never touched by two threads at
 * once.
 */
#include "reduce_pool.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"

#define SUBSYS "switch"

static void *worker_main(void *arg)
{
    reduce_pool_t *pool = arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->todo == NULL && !pool->stop)
            pthread_cond_wait(&pool->cond, &pool->lock);
        if (pool->stop)
            break;
        reduce_task_t *task = pool->todo;
        pool->todo = task->next;
        pthread_mutex_unlock(&pool->lock);
        pool->compute(task);
        pthread_mutex_lock(&pool->lock);
        task->next = pool->done;
        pool->done = task;
        uint64_t one = 1;
        if (write(pool->fd, &one, sizeof(one)) < 0)
            log_warn(SUBSYS, "pool wake: %s", strerror(errno));
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Stop and join the first n workers. */
static void join_workers(reduce_pool_t *pool, int n)
{
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < n; i++)
        pthread_join(pool->threads[i], NULL);
}

int reduce_pool_start(reduce_pool_t *pool, int nworkers, reduce_fn_t compute)
{
    *pool = (reduce_pool_t){.nworkers = nworkers, .fd = -1, .compute = compute};
    if (nworkers <= 0)
        return 0;
    const char *what = "pthread_mutex_init";
    int err = pthread_mutex_init(&pool->lock, NULL);
    if (err != 0)
        goto fail;
    what = "pthread_cond_init";
    err = pthread_cond_init(&pool->cond, NULL);
    if (err != 0)
        goto undo_lock;
    what = "eventfd";
    pool->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (pool->fd < 0) {
        err = errno;
        goto undo_cond;
    }
    what = "calloc";
    pool->threads = calloc((size_t)nworkers, sizeof(pthread_t));
    if (pool->threads == NULL) {
        err = ENOMEM;
        goto undo_fd;
    }
    what = "pthread_create";
    for (int i = 0; i < nworkers; i++) {
        err = pthread_create(&pool->threads[i], NULL, worker_main, pool);
        if (err != 0) {
            join_workers(pool, i);
            goto undo_threads;
        }
    }
    return 0;
undo_threads:
    free(pool->threads);
undo_fd:
    close(pool->fd);
undo_cond:
    pthread_cond_destroy(&pool->cond);
undo_lock:
    pthread_mutex_destroy(&pool->lock);
fail:
    fprintf(stderr, "incmoe-switchd: cannot start %d reduction threads: %s: %s\n", nworkers, what,
            strerror(err));
    *pool = (reduce_pool_t){.fd = -1};
    return -1;
}

int reduce_pool_submit(reduce_pool_t *pool, reduce_task_t *task)
{
    if (pool->nworkers <= 0)
        return 0;
    pthread_mutex_lock(&pool->lock);
    task->next = pool->todo;
    pool->todo = task;
    pthread_cond_signal(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    return 1;
}

reduce_task_t *reduce_pool_take_done(reduce_pool_t *pool)
{
    if (pool->nworkers <= 0)
        return NULL;
    uint64_t v;
    if (read(pool->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_warn(SUBSYS, "pool read: %s", strerror(errno));
    pthread_mutex_lock(&pool->lock);
    reduce_task_t *done = pool->done;
    pool->done = NULL;
    pthread_mutex_unlock(&pool->lock);
    return done;
}

int reduce_pool_fd(const reduce_pool_t *pool)
{
    return pool->fd;
}

void reduce_pool_stop(reduce_pool_t *pool)
{
    if (pool->nworkers <= 0)
        return;
    join_workers(pool, pool->nworkers);
    free(pool->threads);
    close(pool->fd);
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->lock);
    *pool = (reduce_pool_t){.fd = -1};
}
