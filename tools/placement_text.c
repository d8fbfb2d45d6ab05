/*
 * placement_text.c - a placement with replicas as the tools print it (placement_text.h).
 */
#include "placement_text.h"

#include <stdio.h>

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
