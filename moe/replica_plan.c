/*
 * replica_plan.c - one rank's choice of replicas in one forward (replica_plan.h).
 */
#include "replica_plan.h"

#include <string.h>

#include "replica_choice.h"

void replica_forced(const incmoe_moe_placement_t *p, int N, int self, const int32_t *ids, int k,
                    size_t T, uint32_t *forced)
{
    memset(forced, 0, (size_t)N * sizeof(*forced));
    for (size_t t = 0; t < T; t++) {
        const int32_t *id = ids + t * (size_t)k;
        for (int a = 0; a < k; a++) {
            int e = id[a];
            if (p->offsets[e + 1] - p->offsets[e] != 1)
                continue;
            int r = p->ranks[p->offsets[e]], seen = r == self;
            for (int b = 0; b < a && !seen; b++) {
                int f = id[b];
                seen = p->offsets[f + 1] - p->offsets[f] == 1 && p->ranks[p->offsets[f]] == r;
            }
            forced[r] += !seen; /* one row per rank, however many of its experts */
        }
    }
}

void replica_correction(int N, const uint64_t *sum, const uint32_t *own, int64_t *corr)
{
    for (int r = 0; r < N; r++)
        corr[r] = (int64_t)((sum[r] + (uint64_t)N / 2) / (uint64_t)N) - (int64_t)own[r];
}

/* Before token t of T: load gains corr's share of tokens [t, t + 1) (floor(corr t / T) in
   all after t tokens), so the correction grows with the rows it corrects. */
static void correct(int N, const int64_t *corr, size_t t, size_t T, int64_t *load)
{
    for (int r = 0; r < N; r++) {
        int64_t c = corr[r], lo = c * (int64_t)t, hi = c * (int64_t)(t + 1), n = (int64_t)T;
        load[r] +=
            (hi >= 0 ? hi / n : -((-hi + n - 1) / n)) - (lo >= 0 ? lo / n : -((-lo + n - 1) / n));
    }
}

void replica_assign(const incmoe_moe_placement_t *p, int E, int N, int self, const int32_t *ids,
                    int k, size_t T, const int64_t *corr, int64_t *load, int32_t *out)
{
    int32_t rank[INCMOE_MOE_MAX_TOPK];
    for (size_t t = 0; t < T; t++) {
        const int32_t *id = ids + t * (size_t)k;
        if (corr != NULL)
            correct(N, corr, t, T, load);
        replica_choose(p, id, k, self, load, rank);
        for (int a = 0; a < k; a++) {
            int slot = 0;
            while (p->ranks[p->offsets[id[a]] + slot] != rank[a])
                slot++;
            out[t * (size_t)k + (size_t)a] = id[a] + E * slot;
        }
    }
}
