/*
 * moe_bench_placement.c - incmoe-moe-bench's placement with replicas
 * (--extra-slots S, issue 29): chosen once, before any rank starts, by
 * incmoe_moe_placement_choose from a routing sample of the bench's own
 * generator on another seed than the timed tokens (a placement chosen from
 * yesterday's load serves today's), so every rank runs the same table; which
 * experts a rank hosts; the header lines that describe it; and the busiest
 * rank's received rows per forward that incmoe_moe_placement_rows replays.
 * Without --extra-slots the experts sit contiguously, as before.  Which rank
 * serves each of a rank's (token, expert) pairs is the layer's rule
 * (moe/replica_choice.c, compiled into the bench as tests/moe.mk takes it)
 * as the decode step runs it: over the rank's own tokens from zero load.
 */
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"
#include "replica_choice.h"
#include "replica_placement.h"

/* Every rank's T tokens of the seed: the sample's ids into *ids_p (the caller frees them).
   0, or -1 out of memory. */
static int sample_make(const opts_t *o, uint64_t seed, int T, int *counts,
                       incmoe_moe_routing_sample_t *s, int32_t **ids_p)
{
    opts_t so = *o;
    so.seed = seed;
    size_t tk = (size_t)T * o->k;
    int32_t *ids = malloc(sizeof(int32_t) * (tk * (size_t)o->nranks + 1));
    void *x = malloc(incmoe_dtype_size(o->dtype) * (size_t)T * o->H + 1);
    float *w = malloc(sizeof(float) * (tk + 1));
    int ok = ids != NULL && x != NULL && w != NULL;
    for (int r = 0; ok && r < o->nranks; r++) {
        counts[r] = T;
        mb_make_tokens(&so, r, T, x, ids + tk * (size_t)r, w);
    }
    free(x), free(w);
    if (!ok) {
        free(ids);
        return -1;
    }
    *s = (incmoe_moe_routing_sample_t){
        .num_experts = o->E, .top_k = o->k, .nranks = o->nranks, .counts = counts, .topk_ids = ids};
    *ids_p = ids;
    return 0;
}

/* --extra-slots: the placement into o->place_offsets and o->place_ranks, the same on every
   machine for the same options.  0; 1 after saying why. */
int mb_placement_choose(opts_t *o)
{
    if (o->extra_slots <= 0)
        return 0;
    int counts[MAX_RANKS];
    incmoe_moe_routing_sample_t s;
    int32_t *ids = NULL;
    if (sample_make(o, o->place_seed, o->place_tokens, counts, &s, &ids) != 0) {
        fprintf(stderr, "incmoe-moe-bench: out of memory for the placement's sample\n");
        return 1;
    }
    int rc = inc_choose_replicas("incmoe-moe-bench", &s, o->extra_slots, &o->place_offsets,
                                 &o->place_ranks);
    free(ids);
    return rc != 0;
}

void mb_placement_free(opts_t *o)
{
    free(o->place_offsets), free(o->place_ranks);
    o->place_offsets = o->place_ranks = NULL;
}

/* The experts rank hosts, ascending, into experts[] (room for E; NULL: only counted): how
   many. */
int mb_placement_hosted(const opts_t *o, int rank, int *experts)
{
    int n = 0, per = o->E / o->nranks;
    for (int e = 0; e < o->E; e++) {
        int holds = e / per == rank;
        if (o->place_offsets != NULL) {
            holds = 0;
            for (int i = o->place_offsets[e]; i < o->place_offsets[e + 1]; i++)
                holds |= o->place_ranks[i] == rank;
        }
        if (holds && experts != NULL)
            experts[n] = e;
        n += holds;
    }
    return n;
}

/* The header lines of a placement with replicas: each rank's experts, the replicated ones. */
void mb_placement_print(const opts_t *o)
{
    if (o->place_offsets == NULL)
        return;
    printf("placement: --extra-slots %d, chosen by incmoe_moe_placement_choose from %d "
           "tok/rank of seed %llu; experts per rank:",
           o->extra_slots, o->place_tokens, (unsigned long long)o->place_seed);
    for (int r = 0; r < o->nranks; r++)
        printf(" %d", mb_placement_hosted(o, r, NULL));
    printf("\nreplicas (expert: ranks):");
    inc_print_replicas(o->E, o->place_offsets, o->place_ranks);
}

/* The busiest rank's received rows of the timed tokens at T tokens per rank on the placement
   (with 1; the contiguous one without replicas with 0), as incmoe_moe_placement_rows replays
   the layer's per-token rule; -1 out of memory or on a refused table (said). */
int64_t mb_placement_busiest(const opts_t *o, int T, int with)
{
    int counts[MAX_RANKS], *off = malloc(sizeof(int) * ((size_t)o->E + 1)),
                           *rk = malloc(sizeof(int) * ((size_t)o->E + 1));
    int32_t *ids = NULL;
    incmoe_moe_routing_sample_t s;
    int64_t rows[MAX_RANKS], most = -1;
    if (off == NULL || rk == NULL || sample_make(o, o->seed, T, counts, &s, &ids) != 0)
        goto out;
    for (int e = 0; e <= o->E; e++)
        off[e] = e;
    for (int e = 0; e < o->E; e++)
        rk[e] = e / (o->E / o->nranks);
    incmoe_moe_placement_t p = {off, rk};
    if (with && o->place_offsets != NULL)
        p = (incmoe_moe_placement_t){o->place_offsets, o->place_ranks};
    char why[256];
    if (incmoe_moe_placement_rows(&s, &p, INCMOE_MOE_SPLIT_PER_TOKEN, rows, why, sizeof(why)) !=
        INCMOE_OK) {
        fprintf(stderr, "incmoe-moe-bench: the placement's rows: %s\n", why);
        goto out;
    }
    most = 0;
    for (int r = 0; r < o->nranks; r++)
        most = rows[r] > most ? rows[r] : most;
out:
    free(ids), free(off), free(rk);
    return most;
}

/* out[T][k]: the rank serving each of rank's T tokens' pairs (ids [T][k]): the expert's
   contiguous rank, or with replicas the layer's per-token rule over this rank's tokens in
   order from zero load (its decode step's; the bulk path also corrects for the other ranks'
   forced rows, incmoe_moe.h "Replicas"). */
void mb_serving_ranks(const opts_t *o, int rank, int T, const int32_t *ids, int32_t *out)
{
    const int per = o->E / o->nranks;
    if (o->place_offsets == NULL) {
        for (size_t i = 0; i < (size_t)T * o->k; i++)
            out[i] = ids[i] / per;
        return;
    }
    const incmoe_moe_placement_t p = {o->place_offsets, o->place_ranks};
    int64_t load[MAX_RANKS] = {0};
    for (int t = 0; t < T; t++)
        replica_choose(&p, ids + (size_t)t * o->k, o->k, rank, load, out + (size_t)t * o->k);
}
