/* eplb.c - DeepSeek's EPLB greedy (eplb.h). */
#include "eplb.h"

#include <stdlib.h>

void eplb_expert_load(const incmoe_moe_routing_sample_t *s, int64_t *load)
{
    size_t T = 0;
    for (int r = 0; r < s->nranks; r++)
        T += (size_t)s->counts[r];
    for (int e = 0; e < s->num_experts; e++)
        load[e] = 0;
    for (size_t i = 0; i < T * (size_t)s->top_k; i++)
        load[s->topk_ids[i]]++;
}

/* Step 1: phy[P] the expert of each replica, cnt[E] each expert's replicas. */
static void replicate(const int64_t *load, int E, int P, int *phy, int64_t *cnt)
{
    for (int e = 0; e < E; e++) {
        phy[e] = e;
        cnt[e] = 1;
    }
    for (int i = E; i < P; i++) {
        int best = 0;
        for (int e = 1; e < E; e++) {
            /* load[e] / cnt[e] > load[best] / cnt[best], in integers */
            if (load[e] * cnt[best] > load[best] * cnt[e])
                best = e;
        }
        phy[i] = best;
        cnt[best]++;
    }
}

/* Step 2: rank_of[P] for the replicas of weight w[P], per slots each on N ranks.  0, or -1
   out of memory. */
static int pack(const double *w, int P, int N, int per, int *rank_of)
{
    int *order = malloc(sizeof(int) * (size_t)P), *items = calloc((size_t)N, sizeof(int));
    double *weight = calloc((size_t)N, sizeof(double));
    if (order == NULL || items == NULL || weight == NULL) {
        free(order);
        free(items);
        free(weight);
        return -1;
    }
    for (int i = 0; i < P; i++)
        order[i] = i;
    /* Insertion sort, heaviest first, stable: P is a few hundred. */
    for (int i = 1; i < P; i++) {
        int x = order[i], j = i;
        for (; j > 0 && w[order[j - 1]] < w[x]; j--)
            order[j] = order[j - 1];
        order[j] = x;
    }
    for (int i = 0; i < P; i++) {
        int to = -1;
        for (int r = 0; r < N; r++) {
            if (items[r] < per && (to < 0 || weight[r] < weight[to]))
                to = r;
        }
        rank_of[order[i]] = to;
        items[to]++;
        weight[to] += w[order[i]];
    }
    free(order);
    free(items);
    free(weight);
    return 0;
}

int eplb_place(const int64_t *load, int E, int N, int extra, int *offsets, int *ranks)
{
    int per = E / N + extra, P = N * per;
    int *phy = malloc(sizeof(int) * (size_t)P), *rank_of = malloc(sizeof(int) * (size_t)P);
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)E);
    double *w = malloc(sizeof(double) * (size_t)P);
    unsigned char *on = calloc((size_t)E * (size_t)N, 1);
    int ok = phy != NULL && rank_of != NULL && cnt != NULL && w != NULL && on != NULL;
    if (ok) {
        replicate(load, E, P, phy, cnt);
        for (int i = 0; i < P; i++)
            w[i] = (double)load[phy[i]] / (double)cnt[phy[i]];
        ok = pack(w, P, N, per, rank_of) == 0;
    }
    if (ok) {
        for (int i = 0; i < P; i++)
            on[(size_t)phy[i] * N + rank_of[i]] = 1;
        int n = 0;
        for (int e = 0; e < E; e++) {
            offsets[e] = n;
            for (int r = 0; r < N; r++) {
                if (on[(size_t)e * N + r])
                    ranks[n++] = r;
            }
        }
        offsets[E] = n;
    }
    free(phy);
    free(rank_of);
    free(cnt);
    free(w);
    free(on);
    return ok ? 0 : -1;
}
