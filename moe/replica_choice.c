/*
 * replica_choice.c - which replica serves each (token, expert) pair
 * (replica_choice.h).
 */
#include "replica_choice.h"

#include <string.h>

/* The ranks one token visits: self first, then each rank a pair was sent to. */
typedef struct {
    int n;
    int32_t rank[INCMOE_MOE_MAX_TOPK + 1];
} visits_t;

static int visits_has(const visits_t *v, int32_t rank)
{
    for (int i = 0; i < v->n; i++) {
        if (v->rank[i] == rank)
            return 1;
    }
    return 0;
}

/* Sends the pair to rank: a row more for that rank unless the token already visits it. */
static int32_t visits_take(visits_t *v, int64_t *load, int32_t rank)
{
    if (!visits_has(v, rank)) {
        v->rank[v->n++] = rank;
        load[rank]++;
    }
    return rank;
}

/* The replica of expert e for a token visiting v: a visited rank (the lowest), else the
   least-loaded rank (the lowest of equals).  A placement's ranks are ascending, so the first
   visited one met is the lowest and a strict < keeps the lowest of equal loads. */
static int32_t replica_pick(const incmoe_moe_placement_t *p, int e, const visits_t *v,
                            const int64_t *load)
{
    int32_t best = -1;
    for (int i = p->offsets[e]; i < p->offsets[e + 1]; i++) {
        int32_t r = p->ranks[i];
        if (visits_has(v, r))
            return r;
        if (best < 0 || load[r] < load[best])
            best = r;
    }
    return best;
}

void replica_choose(const incmoe_moe_placement_t *p, const int32_t *ids, int k, int self,
                    int64_t *load, int32_t *out)
{
    /* self is visited for free: its rows never leave the rank. */
    visits_t v = {.n = 1, .rank = {self}};
    /* The fixed pairs first, so the choices below see every rank the token must visit. */
    for (int j = 0; j < k; j++) {
        int e = ids[j];
        if (p->offsets[e + 1] - p->offsets[e] == 1)
            out[j] = visits_take(&v, load, p->ranks[p->offsets[e]]);
    }
    for (int j = 0; j < k; j++) {
        int e = ids[j];
        if (p->offsets[e + 1] - p->offsets[e] > 1)
            out[j] = visits_take(&v, load, replica_pick(p, e, &v, load));
    }
}

void replica_choose_all(const incmoe_moe_placement_t *p, int N, const int *counts,
                        const int32_t *ids, int k, int64_t *load, int32_t *out)
{
    int most = 0;
    for (int r = 0; r < N; r++)
        most = counts[r] > most ? counts[r] : most;
    memset(load, 0, sizeof(*load) * (size_t)N);
    for (int t = 0; t < most; t++) {
        size_t first = 0; /* rank r's first token */
        for (int r = 0; r < N; first += (size_t)counts[r], r++) {
            if (t >= counts[r])
                continue;
            size_t row = (first + (size_t)t) * (size_t)k;
            replica_choose(p, ids + row, k, r, load, out + row);
        }
    }
}
