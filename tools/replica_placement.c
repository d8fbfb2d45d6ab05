/*
 * replica_placement.c - a placement with replicas as the tools choose and print
 * it (replica_placement.h).
 */
#include "replica_placement.h"

#include <stdio.h>
#include <stdlib.h>

int inc_choose_replicas(const char *prog, const incmoe_moe_routing_sample_t *s, int extra,
                        int **offsets, int **ranks)
{
    const size_t E = (size_t)s->num_experts;
    *offsets = malloc(sizeof(int) * (E + 1));
    *ranks = malloc(sizeof(int) * (E + (size_t)s->nranks * (size_t)extra));
    char why[256] = "";
    incmoe_status_t st = INCMOE_ERR_NO_MEMORY;
    if (*offsets != NULL && *ranks != NULL)
        st = incmoe_moe_placement_choose(s, extra, *offsets, *ranks, why, sizeof(why));
    if (st == INCMOE_OK)
        return 0;
    fprintf(stderr, "%s: choosing the placement failed: %s%s%s\n", prog, incmoe_strerror(st),
            why[0] != '\0' ? ": " : "", why);
    free(*offsets), free(*ranks);
    *offsets = *ranks = NULL;
    return -1;
}

void inc_print_replicas(int E, const int *offsets, const int *ranks)
{
    int any = 0;
    for (int e = 0; e < E; e++) {
        if (offsets[e + 1] - offsets[e] < 2)
            continue;
        printf(" %d:", e);
        for (int i = offsets[e]; i < offsets[e + 1]; i++)
            printf("%s%d", i > offsets[e] ? "," : "", ranks[i]);
        any = 1;
    }
    printf("%s\n", any ? "" : " none");
}
