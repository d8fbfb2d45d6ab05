/*
 * algo.c - the algorithms a communicator can run, by incmoe_algo_t: the one
 * place that names them, so a new one is its own file and one entry here.
 */
#include "algo.h"

static const client_algo_ops_t *const client_algos[] = {
    [INCMOE_ALGO_INC] = &client_innet_ops,
    [INCMOE_ALGO_RING] = &client_ring_ops,
    [INCMOE_ALGO_A2A] = &client_a2a_ops,
};

const client_algo_ops_t *client_algo_find(incmoe_algo_t algo)
{
    if ((unsigned)algo >= sizeof(client_algos) / sizeof(client_algos[0]))
        return NULL;
    return client_algos[algo];
}
