/*
 * route.h - an MoE benchmark's routing: which ranks each token goes to.
 *
 * E experts sit on N ranks (a placement), each token picks k distinct experts
 * (uniformly, or with zipf:S popularity, expert e drawn in proportion to
 * (e+1)^-S without replacement), and its destination set is the ranks that
 * hold them, as incmoe_dispatch takes it (INCMOE_SET_WORDS(N) words a token).
 * The draws of token i of rank s depend on (seed, s, i) only, so every rank
 * computes any rank's tokens alike, and a reference needs no exchange.  The
 * placements and the sampling are tools/incmoe-model's (its --placement
 * names, its successive sampling), so a measured point and its model speak of
 * the same routing.
 */
#ifndef INCMOE_TOOLS_ROUTE_H
#define INCMOE_TOOLS_ROUTE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    INC_PLACE_CONTIGUOUS, /* rank r holds a block of experts, the first E % N ranks one more */
    INC_PLACE_STRIDED,    /* expert e on rank e % N */
    INC_PLACE_COUNT
} inc_placement_t;

extern const char *const inc_placement_names[INC_PLACE_COUNT];

typedef struct {
    int nranks, experts, k;
    double skew; /* zipf S; 0 is uniform */
    int zipf;    /* the route was given as zipf:S (so it is printed so) */
    inc_placement_t placement;
    uint64_t seed;
} inc_route_spec_t;

/* "uniform" or "zipf:S" (0 <= S <= 100) into spec's skew and zipf: 0, or -1. */
int inc_route_parse(const char *text, inc_route_spec_t *spec);
/* The route as inc_route_parse and incmoe-model read it ("uniform", "zipf:1", "zipf:0.25";
   S to 6 decimals), into buf. */
void inc_route_text(const inc_route_spec_t *spec, char *buf, size_t len);
/* A placement's name into *out: 0, or -1. */
int inc_placement_parse(const char *text, inc_placement_t *out);

/* The destination sets of every rank's tokens. */
typedef struct {
    inc_route_spec_t spec;
    size_t tokens;  /* per rank */
    size_t words;   /* INCMOE_SET_WORDS(N) */
    int *owner;     /* [E]: the rank of each expert */
    int32_t *ids;   /* [N * tokens * k]: rank s's token i's experts at (s * tokens + i) * k */
    uint64_t *sets; /* [N * tokens * words]: rank s's token i at (s * tokens + i) * words */
} inc_route_t;

/* Draw every rank's tokens' experts (spec checked: 1 <= k <= E, N <= E).  0, or -1 out of
   memory. */
int inc_route_make(const inc_route_spec_t *spec, size_t tokens, inc_route_t *route);
void inc_route_free(inc_route_t *route);

/* The set of rank s's token i. */
static inline const uint64_t *inc_route_set(const inc_route_t *route, int s, size_t i)
{
    return &route->sets[((size_t)s * route->tokens + i) * route->words];
}

/* Does the set hold rank d? */
static inline int inc_route_has(const uint64_t *set, int d)
{
    return (int)((set[d / 64] >> (d % 64)) & 1u);
}

#endif
