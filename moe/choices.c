/*
 * choices.c - the measured path choices, shared by the layers of one
 * communicator that have the same shape and lanes.
 *
 * A Hugging Face model sharded by incmoe.hf has one layer per MoE block, all
 * of one shape on one communicator, called in block order.  Each measuring
 * on its own made every first forward measure the paths once per block, and
 * the blocks of one model could settle on different paths where several lie
 * within the measurements' spread (BENCHMARKS.md, "The layer's path"); shared,
 * the first block measures and the others run its choice.  Every rank agrees:
 * a communicator's layers run their forwards one at a time and in the same
 * order on every rank (their collectives must), so every rank's first block
 * has chosen before any rank's second looks.  For the same reason the entries
 * need no lock; the registry itself does (layers of other communicators may
 * be created and destroyed on other threads).
 */
#include <pthread.h>
#include <stdlib.h>

#include "layer.h"

#include "base/hash.h"

static pthread_mutex_t choices_lock = PTHREAD_MUTEX_INITIALIZER;
static moe_choices_t *choices_groups;

/* What must match for two layers' choices to be the same: the shape, the experts'
   placement, the backend and the algorithm of each lane (a path names its lane by
   index). */
static uint64_t choices_shape(const incmoe_moe_t *L)
{
    int32_t dims[] = {L->N, L->E, L->k, L->H, L->I, (int32_t)L->dtype, L->nlanes};
    uint64_t h = inc_fnv1a(INC_FNV1A_INIT, dims, sizeof(dims));
    h = inc_fnv1a_u64(h, L->placement_hash);
    h = inc_fnv1a_u64(h, (uint64_t)L->max_tokens);
    h = inc_fnv1a(h, &L->ops, sizeof(L->ops));
    for (int i = 0; i < L->nlanes; i++)
        h = inc_fnv1a_u64(h, (uint64_t)(int64_t)L->lanes[i].algo);
    return h;
}

incmoe_status_t choices_hold(incmoe_moe_t *L)
{
    uint64_t shape = choices_shape(L);
    pthread_mutex_lock(&choices_lock);
    moe_choices_t *g = choices_groups;
    while (g != NULL && (g->comm != L->comm || g->shape != shape))
        g = g->next_group;
    if (g == NULL && (g = calloc(1, sizeof(*g))) != NULL) {
        g->comm = L->comm;
        g->shape = shape;
        g->next_group = choices_groups;
        choices_groups = g;
    }
    if (g != NULL)
        g->refs++;
    pthread_mutex_unlock(&choices_lock);
    L->choices = g;
    return g != NULL ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
}

void choices_put(incmoe_moe_t *L)
{
    moe_choices_t *g = L->choices;
    if (g == NULL)
        return;
    L->choices = NULL;
    pthread_mutex_lock(&choices_lock);
    if (--g->refs == 0) {
        moe_choices_t **p = &choices_groups;
        while (*p != g)
            p = &(*p)->next_group;
        *p = g->next_group;
        free(g);
    }
    pthread_mutex_unlock(&choices_lock);
}
