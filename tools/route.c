/* route.c - an MoE benchmark's routing (see route.h). */
#include "route.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "incmoe/incmoe.h"

const char *const inc_placement_names[INC_PLACE_COUNT] = {"contiguous", "strided"};

int inc_route_parse(const char *text, inc_route_spec_t *spec)
{
    if (strcmp(text, "uniform") == 0) {
        spec->skew = 0;
        spec->zipf = 0;
        return 0;
    }
    if (strncmp(text, "zipf:", 5) != 0 || text[5] == '\0')
        return -1;
    char *end;
    double s = strtod(text + 5, &end);
    if (*end != '\0' || !(s >= 0 && s <= 100))
        return -1;
    spec->skew = s;
    spec->zipf = 1;
    return 0;
}

void inc_route_text(const inc_route_spec_t *spec, char *buf, size_t len)
{
    if (!spec->zipf) {
        snprintf(buf, len, "uniform");
        return;
    }
    /* Plain decimals, trailing zeros dropped (zipf:1, zipf:0.25): what incmoe-model reads. */
    snprintf(buf, len, "zipf:%.6f", spec->skew);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '.')
        buf[n - 1] = '\0';
}

int inc_placement_parse(const char *text, inc_placement_t *out)
{
    for (int p = 0; p < INC_PLACE_COUNT; p++) {
        if (strcmp(text, inc_placement_names[p]) == 0) {
            *out = (inc_placement_t)p;
            return 0;
        }
    }
    return -1;
}

/* splitmix64's output function. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform draw in [0, 1) from the token's own stream. */
static double draw(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return (double)(mix(*state) >> 11) * 0x1.0p-53;
}

/* The first expert whose cumulative weight exceeds x (bisect_right), at most E - 1. */
static int bisect(const double *cum, int experts, double x)
{
    int lo = 0, hi = experts;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cum[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < experts ? lo : experts - 1;
}

/* The token's k experts into chosen[], drawn as incmoe-model's sample_expert_sets: in
   proportion to the weights, redrawing an expert already chosen while that stays cheap
   (4k redraws), then among the rest. */
static void draw_experts(const inc_route_spec_t *sp, const double *w, const double *cum,
                         uint64_t state, int *chosen, unsigned char *taken)
{
    const int E = sp->experts;
    int n = 0, redraws = 0;
    while (n < sp->k) {
        int e;
        if (redraws < 4 * sp->k) {
            e = bisect(cum, E, draw(&state) * cum[E - 1]);
            if (taken[e]) {
                redraws++;
                continue;
            }
        } else {
            double rest = 0;
            for (int x = 0; x < E; x++)
                rest += taken[x] ? 0 : w[x];
            double u = draw(&state) * rest;
            e = -1;
            for (int x = 0; x < E; x++) {
                if (taken[x])
                    continue;
                e = x; /* the last one left when rounding leaves u >= 0 */
                if ((u -= w[x]) < 0)
                    break;
            }
        }
        taken[e] = 1;
        chosen[n++] = e;
    }
    for (int j = 0; j < n; j++)
        taken[chosen[j]] = 0;
}

static void place(const inc_route_spec_t *sp, int *owner)
{
    const int E = sp->experts, N = sp->nranks;
    if (sp->placement == INC_PLACE_STRIDED) {
        for (int e = 0; e < E; e++)
            owner[e] = e % N;
        return;
    }
    int e = 0;
    for (int r = 0; r < N; r++)
        for (int j = 0; j < E / N + (r < E % N); j++)
            owner[e++] = r;
}

int inc_route_make(const inc_route_spec_t *spec, size_t tokens, inc_route_t *route)
{
    const int E = spec->experts, N = spec->nranks;
    *route = (inc_route_t){.spec = *spec, .tokens = tokens, .words = INCMOE_SET_WORDS(N)};
    route->owner = calloc((size_t)E, sizeof(int));
    route->sets = calloc((size_t)N * tokens * route->words + 1, sizeof(uint64_t));
    route->ids = calloc((size_t)N * tokens * (size_t)spec->k + 1, sizeof(int32_t));
    double *w = calloc((size_t)E, sizeof(double)), *cum = calloc((size_t)E, sizeof(double));
    int *chosen = calloc((size_t)spec->k, sizeof(int));
    unsigned char *taken = calloc((size_t)E, 1);
    int rc = -1;
    if (route->owner == NULL || route->sets == NULL || route->ids == NULL || w == NULL ||
        cum == NULL || chosen == NULL || taken == NULL)
        goto out;
    place(spec, route->owner);
    double acc = 0;
    for (int e = 0; e < E; e++) {
        w[e] = pow(e + 1.0, -spec->skew);
        cum[e] = (acc += w[e]);
    }
    for (int s = 0; s < N; s++) {
        for (size_t i = 0; i < tokens; i++) {
            uint64_t state = mix(spec->seed * 0x9e3779b97f4a7c15ull ^ mix((uint64_t)s + 1) ^
                                 mix(((uint64_t)i << 20) ^ 0x5851f42d4c957f2dull));
            draw_experts(spec, w, cum, state, chosen, taken);
            uint64_t *set = &route->sets[((size_t)s * tokens + i) * route->words];
            int32_t *ids = &route->ids[((size_t)s * tokens + i) * (size_t)spec->k];
            for (int j = 0; j < spec->k; j++) {
                int d = route->owner[chosen[j]];
                ids[j] = chosen[j];
                set[d / 64] |= (uint64_t)1 << (d % 64);
            }
        }
    }
    rc = 0;
out:
    free(w);
    free(cum);
    free(chosen);
    free(taken);
    if (rc != 0)
        inc_route_free(route);
    return rc;
}

void inc_route_free(inc_route_t *route)
{
    free(route->owner);
    free(route->sets);
    free(route->ids);
    route->owner = NULL;
    route->sets = NULL;
    route->ids = NULL;
}
