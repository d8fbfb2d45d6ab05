/*
 * pool.c - threads as role workers: the CPU stand-in for the persistent
 * kernel's thread blocks.
 *
 * The threads live as long as the layer and are "launched" once per forward,
 * each with a role and an index, like the blocks of one kernel launch.  The
 * launch itself uses a mutex and a condition variable (the host's side); the
 * roles hand data to each other only through the counters of ctx.h.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cpu/prims.h"

typedef enum { ROLE_IDLE = 0, ROLE_GATHER, ROLE_COMPUTE, ROLE_REDUCE } role_t;

#define POOL_MAX (3 * INCMOE_MOE_MAX_WORKERS)

typedef struct {
    cpu_pool_t *pool;
    int id;
} pool_arg_t;

struct cpu_pool {
    const moe_ctx_t *x;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t done_cv;
    uint64_t gen;
    int stop;
    int nthreads;
    int running;
    role_t role[POOL_MAX];
    int index[POOL_MAX];
    uint64_t born[POOL_MAX]; /* the launch count when the thread was made */
    pthread_t tid[POOL_MAX];
    pool_arg_t arg[POOL_MAX];
};

static void *pool_main(void *p)
{
    pool_arg_t *a = p;
    cpu_pool_t *pool = a->pool;
    pthread_mutex_lock(&pool->mu);
    /* Launches from the one this thread was created for on are its to run. */
    uint64_t seen = pool->born[a->id];
    for (;;) {
        while (pool->gen == seen && !pool->stop)
            pthread_cond_wait(&pool->cv, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->gen;
        role_t r = pool->role[a->id];
        int idx = pool->index[a->id];
        pthread_mutex_unlock(&pool->mu);
        switch (r) {
        case ROLE_GATHER:
            role_gather(pool->x, idx);
            break;
        case ROLE_COMPUTE:
            role_compute(pool->x, idx);
            break;
        case ROLE_REDUCE:
            role_reduce(pool->x, idx);
            break;
        case ROLE_IDLE:
            break;
        }
        pthread_mutex_lock(&pool->mu);
        if (r != ROLE_IDLE && --pool->running == 0)
            pthread_cond_signal(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

incmoe_status_t cpu_pool_create(const moe_ctx_t *x, cpu_pool_t **pool_p)
{
    cpu_pool_t *pool = calloc(1, sizeof(*pool));
    if (pool == NULL)
        return INCMOE_ERR_NO_MEMORY;
    pool->x = x;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    *pool_p = pool;
    return INCMOE_OK;
}

void cpu_pool_destroy(cpu_pool_t *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->nthreads; i++)
        pthread_join(pool->tid[i], NULL);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

incmoe_status_t cpu_pool_run(cpu_pool_t *pool, int pipelined)
{
    const moe_ctx_t *x = pool->x;
    role_t role[POOL_MAX];
    int index[POOL_MAX];
    int n = 0;
    if (pipelined) {
        for (int i = 0; i < x->G; i++, n++)
            role[n] = ROLE_GATHER, index[n] = i;
        for (int i = 0; i < x->R; i++, n++)
            role[n] = ROLE_REDUCE, index[n] = i;
    }
    for (int i = 0; i < x->C; i++, n++)
        role[n] = ROLE_COMPUTE, index[n] = i;

    pthread_mutex_lock(&pool->mu);
    while (pool->nthreads < n) {
        int id = pool->nthreads;
        pool->arg[id] = (pool_arg_t){pool, id};
        pool->role[id] = ROLE_IDLE;
        pool->born[id] = pool->gen;
        if (pthread_create(&pool->tid[id], NULL, pool_main, &pool->arg[id]) != 0) {
            pthread_mutex_unlock(&pool->mu);
            return INCMOE_ERR_NO_MEMORY;
        }
        pool->nthreads++;
    }
    for (int i = 0; i < pool->nthreads; i++) {
        pool->role[i] = i < n ? role[i] : ROLE_IDLE;
        pool->index[i] = i < n ? index[i] : 0;
    }
    pool->running = n;
    pool->gen++;
    pthread_cond_broadcast(&pool->cv);
    while (pool->running > 0)
        pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    return INCMOE_OK;
}
