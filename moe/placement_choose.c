/*
 * placement_choose.c - a placement with replicas for a routing sample's load
 * (incmoe_moe.h, "Choosing a placement"): a balanced packing of the
 * per-expert load (placement_pack.h), then a local search that moves, swaps,
 * adds and drops replicas of the busiest rank's experts while that lowers
 * the ranks' rows under the layer's per-token rule, replayed on the sample
 * (placement_rows.h).  The replay is what sees which experts a rank's tokens
 * pick together: a replica that lands where those tokens already go costs no
 * row, which the packing's per-expert load cannot tell.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_check.h"
#include "placement_pack.h"
#include "placement_rows.h"

#include "incmoe/incmoe_moe.h"

/* Kept moves, at most: each replays the sample up to a few hundred times. */
#define CHOOSER_MAX_MOVES 256

/* The search's state: which expert is on which rank, the replicas of each expert and on
   each rank, and the rows of the placement so far (cur) and of the one tried (try). */
#define CHOOSER_ARRAYS 4
typedef struct {
    const incmoe_moe_routing_sample_t *s;
    int E, N, per; /* per: slots a rank, E/N + extra_slots */
    uint8_t *on;   /* [E][N] */
    int *cnt;      /* [E] replicas of each expert */
    int *used;     /* [N] replicas on each rank */
    int *order;    /* [N] the ranks by rows, fewest first */
    int *offsets, *ranks;
    int64_t *cur, *try; /* [N] each */
    int64_t *sa, *sb;   /* [N] each: sorted copies for lower() */
} chooser_t;

/* One change to the placement: the cells (expert e on rank r) taken out, then put in. */
typedef struct {
    int nout, nin;
    struct {
        int e, r;
    } out[2], in[2];
} chooser_move_t;

static void chooser_free(chooser_t *c)
{
    free(c->on);
    free(c->cnt);
    free(c->used);
    free(c->order);
    free(c->cur); /* the [N] arrays are one allocation */
}

static int chooser_alloc(chooser_t *c, const incmoe_moe_routing_sample_t *s, int extra,
                         int *offsets, int *ranks)
{
    *c = (chooser_t){
        .s = s, .E = s->num_experts, .N = s->nranks, .offsets = offsets, .ranks = ranks};
    c->per = c->E / c->N + extra;
    c->on = calloc((size_t)c->E * (size_t)c->N, 1);
    c->cnt = calloc((size_t)c->E, sizeof(int));
    c->used = calloc((size_t)c->N, sizeof(int));
    c->order = calloc((size_t)c->N, sizeof(int));
    c->cur = malloc(sizeof(int64_t) * CHOOSER_ARRAYS * (size_t)c->N);
    if (c->on == NULL || c->cnt == NULL || c->used == NULL || c->order == NULL || c->cur == NULL) {
        chooser_free(c);
        return -1;
    }
    c->try = c->cur + c->N;
    c->sa = c->try + c->N;
    c->sb = c->sa + c->N;
    return 0;
}

/* The packing of the sample's per-expert load, with the counts that follow it.  0, or -1
   out of memory. */
static int chooser_start(chooser_t *c)
{
    int64_t *load = calloc((size_t)c->E, sizeof(int64_t));
    if (load == NULL)
        return -1;
    size_t pairs = placement_sample_tokens(c->s) * (size_t)c->s->top_k;
    for (size_t i = 0; i < pairs; i++)
        load[c->s->topk_ids[i]]++;
    int rc = placement_pack(load, c->E, c->N, c->per, c->on);
    free(load);
    for (int e = 0; e < c->E; e++) {
        for (int r = 0; r < c->N; r++) {
            c->cnt[e] += c->on[(size_t)e * c->N + r];
            c->used[r] += c->on[(size_t)e * c->N + r];
        }
    }
    return rc;
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

static void chooser_set(chooser_t *c, int e, int r, int v)
{
    c->on[(size_t)e * c->N + r] = (uint8_t)v;
    c->cnt[e] += v ? 1 : -1;
    c->used[r] += v ? 1 : -1;
}

/* Makes the change m (the caller has checked it leaves a valid placement within the slots)
   and keeps it if it lowers the rows: 1, c->cur following; else undoes it: 0. */
static int chooser_attempt(chooser_t *c, const chooser_move_t *m)
{
    for (int i = 0; i < m->nout; i++)
        chooser_set(c, m->out[i].e, m->out[i].r, 0);
    for (int i = 0; i < m->nin; i++)
        chooser_set(c, m->in[i].e, m->in[i].r, 1);
    incmoe_moe_placement_t p = chooser_write(c);
    placement_rows_per_token(c->s, &p, c->try);
    if (lower(c, c->try, c->cur)) {
        memcpy(c->cur, c->try, sizeof(int64_t) * (size_t)c->N);
        return 1;
    }
    for (int i = 0; i < m->nin; i++)
        chooser_set(c, m->in[i].e, m->in[i].r, 0);
    for (int i = 0; i < m->nout; i++)
        chooser_set(c, m->out[i].e, m->out[i].r, 1);
    return 0;
}

/* The changes that give expert e (on rank b) a replica on rank r2, which lacks one, in
   order: added in a free slot, moved from b, replacing an expert with another replica, or
   swapped with an expert b lacks.  1 when one was kept. */
static int chooser_toward(chooser_t *c, int e, int b, int r2)
{
    chooser_move_t add = {0, 1, .in = {{e, r2}}}, move = {1, 1, {{e, b}}, {{e, r2}}};
    if (c->used[r2] < c->per && (chooser_attempt(c, &add) || chooser_attempt(c, &move)))
        return 1;
    for (int e2 = 0; e2 < c->E; e2++) {
        if (!c->on[(size_t)e2 * c->N + r2])
            continue;
        chooser_move_t replace = {1, 1, {{e2, r2}}, {{e, r2}}};
        chooser_move_t swap = {2, 2, {{e, b}, {e2, r2}}, {{e, r2}, {e2, b}}};
        if (c->cnt[e2] > 1 && chooser_attempt(c, &replace))
            return 1;
        if (!c->on[(size_t)e2 * c->N + b] && chooser_attempt(c, &swap))
            return 1;
    }
    return 0;
}

/* One kept change to a replica on a busiest rank, the first found (experts, then ranks, in
   ascending order): 1, or 0 when none lowers the rows. */
static int chooser_improve(chooser_t *c)
{
    int64_t max = 0;
    for (int r = 0; r < c->N; r++)
        max = c->cur[r] > max ? c->cur[r] : max;
    /* The least loaded ranks first: where a replica most likely lowers the rows. */
    for (int i = 0; i < c->N; i++) {
        int j = i;
        for (; j > 0 && c->cur[c->order[j - 1]] > c->cur[i]; j--)
            c->order[j] = c->order[j - 1];
        c->order[j] = i;
    }
    for (int b = 0; b < c->N; b++) {
        if (c->cur[b] != max)
            continue;
        for (int e = 0; e < c->E; e++) {
            if (!c->on[(size_t)e * c->N + b])
                continue;
            chooser_move_t drop = {1, 0, {{e, b}}};
            if (c->cnt[e] > 1 && chooser_attempt(c, &drop))
                return 1;
            for (int i = 0; i < c->N; i++) {
                int r2 = c->order[i];
                if (!c->on[(size_t)e * c->N + r2] && chooser_toward(c, e, b, r2))
                    return 1;
            }
        }
    }
    return 0;
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
    int ok = chooser_alloc(&c, sample, extra_slots, offsets, ranks) == 0;
    if (ok && chooser_start(&c) != 0) {
        chooser_free(&c);
        ok = 0;
    }
    if (!ok) {
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "no memory for the chooser's scratch (%d x %d)", E, N);
        return INCMOE_ERR_NO_MEMORY;
    }
    incmoe_moe_placement_t p = chooser_write(&c);
    placement_rows_per_token(sample, &p, c.cur);
    /* Each kept change lowers the rows, so this ends; the bound keeps its time known. */
    for (int moves = 0; moves < CHOOSER_MAX_MOVES && chooser_improve(&c); moves++)
        ;
    chooser_write(&c);
    chooser_free(&c);
    return INCMOE_OK;
}
