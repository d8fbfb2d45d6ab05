/*
 * moe_bench_decode.c - what incmoe-moe-bench's decode rows compare a layer
 * forward with (issue 28): the decode bound, the time one forward needs if it
 * moves its rows at the link rate and runs its FFN with nothing overlapped:
 *
 *   bound = the busiest rank's dispatch bytes / link rate + the FFN alone
 *           + the busiest rank's combine bytes / link rate
 *
 * A rank's dispatch bytes are the larger direction of its link in the
 * least-moving form (a row up once whatever its set, as the in-network forms
 * send it; down, every other rank's row whose set holds it), rows only; its
 * combine bytes are the same rows the other way (partials up, one reduced row
 * down per own row).  The routing is recomputed for every rank from the
 * problem data (moe_bench_data.c), each pair on the rank that serves it
 * (mb_serving_ranks: contiguous, or the replica the decode step's rule picks).
 */
#include <stdlib.h>

#include "moe_bench.h"

/* The link rate of the bound: --link-mbps, else the testbed's (TESTBED_MBPS, which
   tools/testbed run sets), else 0: none known; -1 when TESTBED_MBPS is not a rate. */
double mb_link_mbps(const opts_t *o)
{
    if (o->link_mbps > 0)
        return o->link_mbps;
    const char *tb = getenv("TESTBED_MBPS");
    if (tb == NULL)
        return 0;
    char *end;
    double v = strtod(tb, &end);
    return end != tb && *end == '\0' && v > 0 && v <= 1e9 ? v : -1;
}

/* Rows of rank s's T tokens (serve: each pair's rank) sent up once (some other rank serves
   one of its pairs), and one more row for each other rank they reach added to down[]. */
static uint64_t count_rank(const opts_t *o, int s, int T, const int32_t *serve, uint64_t *down)
{
    uint64_t up = 0;
    for (int t = 0; t < T; t++) {
        char seen[MAX_RANKS] = {0};
        int others = 0;
        for (int a = 0; a < o->k; a++) {
            int d = serve[(size_t)t * o->k + a];
            if (d != s && !seen[d])
                seen[d] = 1, others++, down[d]++;
        }
        up += others > 0;
    }
    return up;
}

/* The busiest rank's rows on its busier link direction in a dispatch of T tokens per rank
   (the same count serves the combine): -1 when out of memory. */
double mb_decode_rows(const opts_t *o, int T)
{
    size_t es = incmoe_dtype_size(o->dtype), ks = (size_t)T * o->k;
    void *x = malloc((size_t)T * o->H * es + 1);
    int32_t *ids = malloc(sizeof(int32_t) * ks + 1), *serve = malloc(sizeof(int32_t) * ks + 1);
    float *w = malloc(sizeof(float) * ks + 1);
    uint64_t up[MAX_RANKS] = {0}, down[MAX_RANKS] = {0}, most = 0;
    double rc = -1;
    if (x == NULL || ids == NULL || serve == NULL || w == NULL)
        goto out;
    for (int s = 0; s < o->nranks; s++) {
        mb_make_tokens(o, s, T, x, ids, w);
        mb_serving_ranks(o, s, T, ids, serve);
        up[s] = count_rank(o, s, T, serve, down);
    }
    for (int r = 0; r < o->nranks; r++) {
        most = up[r] > most ? up[r] : most;
        most = down[r] > most ? down[r] : most;
    }
    rc = (double)most;
out:
    free(w), free(serve), free(ids), free(x);
    return rc;
}
