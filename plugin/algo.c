/*
 * algo.c - the algorithms a communicator can run, by incmoe_algo_t: the one
 * place that names them, so a new one is its own file and one entry here.
 */
#include "algo.h"

static const struct {
    const char *name;
    const client_algo_ops_t *ops; /* NULL: listed, not available yet (create refuses it) */
} client_algos[] = {
    [INCMOE_ALGO_INC] = {"inc", &client_innet_ops},
    [INCMOE_ALGO_RING] = {"ring", &client_ring_ops},
    [INCMOE_ALGO_A2A] = {"a2a", &client_a2a_ops},
};

const client_algo_ops_t *client_algo_find(incmoe_algo_t algo, const char **name_p)
{
    *name_p = NULL;
    if ((unsigned)algo >= sizeof(client_algos) / sizeof(client_algos[0]))
        return NULL;
    *name_p = client_algos[algo].name;
    return client_algos[algo].ops;
}
