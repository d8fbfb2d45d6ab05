/*
 * placement_choose.c - a placement with replicas for a routing sample's load
 * (incmoe_moe.h, "Choosing a placement"): greedy, each step adding the
 * replica that most lowers the ranks' rows under the layer's per-token rule,
 * replayed on the sample (placement_rows.h), then moves of single replicas.
 * A beam of 8 placements per step and candidates beyond the busiest ranks'
 * experts were tried on tools/replica_rows.c's zipf cases and lowered the
 * busiest rank by 1% at most, for 4-8 times the replays, so neither is here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_check.h"
#include "placement_rows.h"

#include "incmoe/incmoe_moe.h"

/* Passes of moves after the greedy fill, at most. */
#define CHOOSER_MAX_PASSES 8

/* The search's state: which expert is on which rank, the free slots, and the rows of the
   placement so far (cur), of the best step found (best) and of the one tried (try). */
#define CHOOSER_ARRAYS 6
typedef struct {
    const incmoe_moe_routing_sample_t *s;
    int E, N;
    uint8_t *on; /* [E][N] */
    int *slots;  /* [N] free extra slots */
    int *offsets, *ranks;
    int64_t *cur, *best, *try, *prev; /* [N] each; prev: cur before a move */
    int64_t *sa, *sb;                 /* [N] each: sorted copies for lower() */
} chooser_t;

static void chooser_free(chooser_t *c)
{
    free(c->on);
    free(c->slots);
    free(c->cur); /* the [N] arrays are one allocation */
}

/* The base placement (E/N contiguous experts per rank) with extra free slots per rank. */
static int chooser_init(chooser_t *c, const incmoe_moe_routing_sample_t *s, int extra, int *offsets,
                        int *ranks)
{
    *c = (chooser_t){.s = s, .E = s->num_experts, .N = s->nranks};
    c->offsets = offsets;
    c->ranks = ranks;
    c->on = calloc((size_t)c->E * (size_t)c->N, 1);
    c->slots = malloc(sizeof(int) * (size_t)c->N);
    c->cur = malloc(sizeof(int64_t) * CHOOSER_ARRAYS * (size_t)c->N);
    if (c->on == NULL || c->slots == NULL || c->cur == NULL) {
        chooser_free(c);
        return -1;
    }
    c->best = c->cur + c->N;
    c->try = c->best + c->N;
    c->prev = c->try + c->N;
    c->sa = c->prev + c->N;
    c->sb = c->sa + c->N;
    int per = c->E / c->N;
    for (int e = 0; e < c->E; e++)
        c->on[(size_t)e * c->N + e / per] = 1;
    for (int r = 0; r < c->N; r++)
        c->slots[r] = extra;
    return 0;
}

/* The placement c->on says, into the caller's offsets and ranks (ranks ascending). */
static incmoe_moe_placement_t chooser_write(const chooser_t *c)
{
    int n = 0;
    for (int e = 0; e < c->E; e++) {
        c->offsets[e] = n;
        for (int r = 0; r < c->N; r++) {
            if (c->on[(size_t)e * c->N + r])
                c->ranks[n++] = r;
        }
    }
    c->offsets[c->E] = n;
    return (incmoe_moe_placement_t){.offsets = c->offsets, .ranks = c->ranks};
}

static int desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Are rows a lower than rows b, compared busiest first? */
static int lower(chooser_t *c, const int64_t *a, const int64_t *b)
{
    memcpy(c->sa, a, sizeof(*a) * (size_t)c->N);
    memcpy(c->sb, b, sizeof(*b) * (size_t)c->N);
    qsort(c->sa, (size_t)c->N, sizeof(int64_t), desc);
    qsort(c->sb, (size_t)c->N, sizeof(int64_t), desc);
    for (int r = 0; r < c->N; r++) {
        if (c->sa[r] != c->sb[r])
            return c->sa[r] < c->sb[r];
    }
    return 0;
}

/* Does a busiest rank (rows max) hold expert e? */
static int on_busiest(const chooser_t *c, int e, int64_t max)
{
    for (int r = 0; r < c->N; r++) {
        if (c->on[(size_t)e * c->N + r] && c->cur[r] == max)
            return 1;
    }
    return 0;
}

/* One greedy step: the replica (expert *e_p on rank *r_p) that most lowers the rows; 0, or
   -1 when none lowers them. */
static int chooser_step(chooser_t *c, int *e_p, int *r_p)
{
    int64_t max = 0;
    for (int r = 0; r < c->N; r++)
        max = c->cur[r] > max ? c->cur[r] : max;
    memcpy(c->best, c->cur, sizeof(int64_t) * (size_t)c->N);
    *e_p = -1;
    for (int e = 0; e < c->E; e++) {
        if (!on_busiest(c, e, max))
            continue;
        for (int r = 0; r < c->N; r++) {
            uint8_t *cell = &c->on[(size_t)e * c->N + r];
            if (c->slots[r] == 0 || *cell)
                continue;
            *cell = 1;
            incmoe_moe_placement_t p = chooser_write(c);
            placement_rows_per_token(c->s, &p, c->try);
            *cell = 0;
            if (lower(c, c->try, c->best)) {
                memcpy(c->best, c->try, sizeof(int64_t) * (size_t)c->N);
                *e_p = e;
                *r_p = r;
            }
        }
    }
    return *e_p < 0 ? -1 : 0;
}

/* The rows of the placement c->on says, into rows. */
static void chooser_rows(chooser_t *c, int64_t *rows)
{
    incmoe_moe_placement_t p = chooser_write(c);
    placement_rows_per_token(c->s, &p, rows);
}

/* Greedy: adds the best replica while one lowers the rows (c->cur follows). */
static void chooser_fill(chooser_t *c)
{
    int e, r;
    while (chooser_step(c, &e, &r) == 0) {
        c->on[(size_t)e * c->N + r] = 1;
        c->slots[r]--;
        memcpy(c->cur, c->best, sizeof(int64_t) * (size_t)c->N);
    }
}

/* One pass of moves: each replica in turn taken out and the best one put back (the greedy
   step's choice, itself possibly); a move is kept where the rows end lower than before it.
   1 when a move was kept. */
static int chooser_moves(chooser_t *c)
{
    int64_t *before = c->prev;
    int moved = 0, per = c->E / c->N;
    for (int e = 0; e < c->E; e++) {
        for (int r = 0; r < c->N; r++) {
            uint8_t *cell = &c->on[(size_t)e * c->N + r];
            if (!*cell || r == e / per)
                continue;
            memcpy(before, c->cur, sizeof(int64_t) * (size_t)c->N);
            *cell = 0;
            c->slots[r]++;
            chooser_rows(c, c->cur);
            int e2, r2;
            if (chooser_step(c, &e2, &r2) == 0 && lower(c, c->best, before)) {
                c->on[(size_t)e2 * c->N + r2] = 1;
                c->slots[r2]--;
                memcpy(c->cur, c->best, sizeof(int64_t) * (size_t)c->N);
                moved = 1;
            } else {
                *cell = 1;
                c->slots[r]--;
                memcpy(c->cur, before, sizeof(int64_t) * (size_t)c->N);
            }
        }
    }
    return moved;
}

incmoe_status_t incmoe_moe_placement_choose(const incmoe_moe_routing_sample_t *sample,
                                            int extra_slots, int *offsets, int *ranks, char *why,
                                            size_t why_len)
{
    incmoe_status_t st = placement_check_sample(sample, why, why_len);
    if (st != INCMOE_OK)
        return st;
    int E = sample->num_experts, N = sample->nranks;
    if (extra_slots < 0 || extra_slots > E - E / N)
        return placement_refuse(why, why_len,
                                "extra_slots %d is not in 0 .. %d (num_experts - num_experts / "
                                "nranks: a rank cannot hold more than every expert)",
                                extra_slots, E - E / N);
    if (offsets == NULL || ranks == NULL)
        return placement_refuse(why, why_len, "offsets or ranks is NULL");
    chooser_t c;
    if (chooser_init(&c, sample, extra_slots, offsets, ranks) != 0) {
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "no memory for the chooser's scratch (%d x %d)", E, N);
        return INCMOE_ERR_NO_MEMORY;
    }
    chooser_rows(&c, c.cur);
    chooser_fill(&c);
    /* Moves, then the greedy again for slots a move freed; each kept move lowers the rows,
       so this ends, and the passes are bounded besides (each replays the sample often). */
    for (int pass = 0; pass < CHOOSER_MAX_PASSES && chooser_moves(&c); pass++)
        chooser_fill(&c);
    chooser_write(&c);
    chooser_free(&c);
    return INCMOE_OK;
}
