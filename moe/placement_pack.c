/*
 * placement_pack.c - a balanced packing of per-expert load onto the ranks'
 * slots (placement_pack.h).  The same two steps as DeepSeek's EPLB
 * (replicate the heaviest per replica, pack heaviest first onto the lightest
 * rank), with one difference: two replicas of one expert never share a rank,
 * as incmoe_moe_placement_t's ranks are distinct.
 */
#include "placement_pack.h"

#include <stdlib.h>

/* A replica's weight, load over replicas, in integers scaled so that the order of two
   weights is exact to 2^-20 of a pair: the same on every machine. */
static int64_t weight(int64_t load, int count)
{
    return (load << 20) / count;
}

/* cnt[E]: each expert's replicas, P = N * per in all (at most N each; P <= E * N). */
static void pack_share(const int64_t *load, int E, int N, int P, int *cnt)
{
    for (int e = 0; e < E; e++)
        cnt[e] = 1;
    for (int i = E; i < P; i++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (cnt[e] == N)
                continue;
            if (best < 0) {
                best = e;
                continue;
            }
            /* load[e] / cnt[e] against the best's, cross-multiplied: exact. */
            int64_t a = load[e] * cnt[best], b = load[best] * cnt[e];
            if (a > b || (a == b && cnt[e] < cnt[best]))
                best = e;
        }
        cnt[best]++;
    }
}

/* order[E]: the experts by weight per replica, heaviest first, the lower of equals. */
static void pack_order(const int64_t *load, const int *cnt, int E, int *order)
{
    for (int i = 0; i < E; i++) {
        int j = i;
        for (; j > 0 && weight(load[order[j - 1]], cnt[order[j - 1]]) < weight(load[i], cnt[i]);
             j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

int placement_pack(const int64_t *load, int E, int N, int per, uint8_t *on)
{
    int *cnt = malloc(sizeof(int) * (size_t)E), *order = malloc(sizeof(int) * (size_t)E);
    int *used = calloc((size_t)N, sizeof(int));
    int64_t *sum = calloc((size_t)N, sizeof(int64_t));
    int ok = cnt != NULL && order != NULL && used != NULL && sum != NULL;
    if (ok) {
        pack_share(load, E, N, N * per, cnt);
        pack_order(load, cnt, E, order);
        /* An expert's replicas weigh alike, so taking them expert by expert, heaviest
           first, is the heaviest-first order of all the replicas. */
        for (int i = 0; i < E; i++) {
            int e = order[i];
            for (int c = 0; c < cnt[e]; c++) {
                int to = -1;
                for (int r = 0; r < N; r++) {
                    if (used[r] < per && !on[(size_t)e * N + r] && (to < 0 || sum[r] < sum[to]))
                        to = r;
                }
                if (to < 0)
                    break;
                on[(size_t)e * N + to] = 1;
                used[to]++;
                sum[to] += weight(load[e], cnt[e]);
            }
        }
    }
    free(cnt);
    free(order);
    free(used);
    free(sum);
    return ok ? 0 : -1;
}
