/*
 * perf_replicas.c - incmoe-perf's routed collectives on a placement with
 * replicas (--extra-slots S, issue 29).  The placement is chosen once, from
 * the options, by incmoe_moe_placement_choose on a sample of the tool's own
 * routing (route.h) on another seed than the measured tokens (--placement-seed,
 * default --seed + 1), so every rank, and a rank of a job on another machine,
 * gets the same table.  Each token's destination set is then the ranks the MoE
 * layer's per-token rule chooses for its (token, expert) pairs: the rule is
 * the library's moe/replica_choice.c, compiled into this tool (tools/perf.mk)
 * rather than exported, as the tests take it; each rank runs it over its own
 * tokens in order from zero load (the layer's decode-step rule; the bulk
 * path's correction for the other ranks' forced rows is left out).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"
#include "replica_choice.h"
#include "replica_placement.h"

#include "incmoe/incmoe_moe.h"

/* Tokens per rank of the sample the placement is chosen from. */
#define PLACEMENT_TOKENS 256

/* What no single option can say about --extra-slots and --placement-seed; -1 (said). */
static int check_slots(const opts_t *o)
{
    const int E = o->route.experts, N = o->nranks;
    if (o->extra_slots == 0) {
        if (o->place_seed_set) {
            fprintf(stderr, "incmoe-perf: --placement-seed seeds --extra-slots's sample\n");
            return -1;
        }
        return 0;
    }
    if (E % N != 0) {
        fprintf(stderr, "incmoe-perf: --extra-slots needs -E (%d) a multiple of -N (%d)\n", E, N);
        return -1;
    }
    if (o->extra_slots > E - E / N) {
        fprintf(stderr,
                "incmoe-perf: --extra-slots %d is more than E - E/N = %d (a rank holds at most "
                "all E experts)\n",
                o->extra_slots, E - E / N);
        return -1;
    }
    if (o->route.k > INCMOE_MOE_MAX_TOPK) {
        fprintf(stderr, "incmoe-perf: --extra-slots takes -k up to %d, the layer's (got %d)\n",
                INCMOE_MOE_MAX_TOPK, o->route.k);
        return -1;
    }
    if (o->route.placement != INC_PLACE_CONTIGUOUS) {
        fprintf(stderr, "incmoe-perf: --extra-slots chooses the placement; drop --placement\n");
        return -1;
    }
    return 0;
}

/* The sample's view of a route's ids. */
static void sample_of(const inc_route_t *r, int *counts, incmoe_moe_routing_sample_t *s)
{
    for (int i = 0; i < r->spec.nranks; i++)
        counts[i] = (int)r->tokens;
    *s = (incmoe_moe_routing_sample_t){.num_experts = r->spec.experts,
                                       .top_k = r->spec.k,
                                       .nranks = r->spec.nranks,
                                       .counts = counts,
                                       .topk_ids = r->ids};
}

void dc_placement_free(opts_t *o)
{
    free(o->place_offsets), free(o->place_ranks);
    o->place_offsets = o->place_ranks = NULL;
}

int dc_placement_choose(opts_t *o)
{
    if (check_slots(o) != 0)
        return -1;
    if (o->extra_slots == 0)
        return 0;
    inc_route_spec_t spec = o->route;
    spec.seed = o->place_seed_set ? o->place_seed : o->route.seed + 1;
    o->place_seed = spec.seed;
    inc_route_t sample;
    int counts[INCMOE_MAX_RANKS];
    incmoe_moe_routing_sample_t s;
    if (inc_route_make(&spec, PLACEMENT_TOKENS, &sample) != 0) {
        fprintf(stderr, "incmoe-perf: out of memory for the placement's sample\n");
        return -1;
    }
    sample_of(&sample, counts, &s);
    int rc =
        inc_choose_replicas("incmoe-perf", &s, o->extra_slots, &o->place_offsets, &o->place_ranks);
    inc_route_free(&sample);
    return rc;
}

void dc_placement_print(const opts_t *o)
{
    if (o->place_offsets == NULL)
        return;
    const int E = o->route.experts;
    printf("# replicas: --extra-slots %d, placement chosen by incmoe_moe_placement_choose from "
           "%d tokens/rank of seed %llu; sets by the layer's per-token rule; experts per rank:",
           o->extra_slots, PLACEMENT_TOKENS, (unsigned long long)o->place_seed);
    for (int r = 0; r < o->nranks; r++) {
        int n = 0;
        for (int i = 0; i < o->place_offsets[E]; i++)
            n += o->place_ranks[i] == r;
        printf(" %d", n);
    }
    printf("\n# replicated (expert: ranks):");
    inc_print_replicas(E, o->place_offsets, o->place_ranks);
}

void dc_route_replicate(const opts_t *o, inc_route_t *route)
{
    if (o->place_offsets == NULL)
        return;
    const incmoe_moe_placement_t p = {o->place_offsets, o->place_ranks};
    const int k = route->spec.k;
    int32_t served[INCMOE_MOE_MAX_TOPK];
    for (int s = 0; s < route->spec.nranks; s++) {
        int64_t load[INCMOE_MAX_RANKS] = {0};
        for (size_t i = 0; i < route->tokens; i++) {
            const int32_t *ids = &route->ids[((size_t)s * route->tokens + i) * (size_t)k];
            uint64_t *set = &route->sets[((size_t)s * route->tokens + i) * route->words];
            replica_choose(&p, ids, k, s, load, served);
            memset(set, 0, route->words * sizeof(uint64_t));
            for (int j = 0; j < k; j++)
                set[served[j] / 64] |= (uint64_t)1 << (served[j] % 64);
        }
    }
}
