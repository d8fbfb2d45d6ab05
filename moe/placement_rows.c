/*
 * placement_rows.c - the rows each rank receives under the per-token rule or a
 * static split (placement_rows.h).
 */
#include "placement_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_check.h"
#include "replica_choice.h"

void placement_rows_per_token(const incmoe_moe_routing_sample_t *s, const incmoe_moe_placement_t *p,
                              int64_t *rows)
{
    replica_choose_all(p, s->nranks, s->counts, s->topk_ids, s->top_k, rows, NULL);
}

/* Adds token's visits (the serving ranks srv[0..k), its own rank self) to rows. */
static void count_visits(const int32_t *srv, int k, int self, int64_t *rows)
{
    for (int j = 0; j < k; j++) {
        int seen = srv[j] == self;
        for (int i = 0; i < j && !seen; i++)
            seen = srv[i] == srv[j];
        if (!seen)
            rows[srv[j]]++;
    }
}

int placement_rows_static(const incmoe_moe_routing_sample_t *s, const incmoe_moe_placement_t *p,
                          int64_t *rows)
{
    int *picks = malloc(sizeof(*picks) * (size_t)s->num_experts);
    if (picks == NULL)
        return -1;
    int32_t srv[INCMOE_MOE_MAX_TOPK];
    int k = s->top_k;
    const int32_t *id = s->topk_ids;
    memset(rows, 0, sizeof(*rows) * (size_t)s->nranks);
    for (int r = 0; r < s->nranks; r++) {
        /* Each rank splits its own tokens: no rank needs another's routing. */
        memset(picks, 0, sizeof(*picks) * (size_t)s->num_experts);
        for (int t = 0; t < s->counts[r]; t++, id += k) {
            for (int j = 0; j < k; j++) {
                int e = id[j], c = p->offsets[e + 1] - p->offsets[e];
                srv[j] = p->ranks[p->offsets[e] + picks[e]++ % c];
            }
            count_visits(srv, k, r, rows);
        }
    }
    free(picks);
    return 0;
}

incmoe_status_t incmoe_moe_placement_rows(const incmoe_moe_routing_sample_t *sample,
                                          const incmoe_moe_placement_t *placement,
                                          incmoe_moe_split_t split, int64_t *rows, char *why,
                                          size_t why_len)
{
    incmoe_status_t st = placement_check_sample(sample, why, why_len);
    if (st == INCMOE_OK)
        st = placement_check(sample, placement, why, why_len);
    if (st != INCMOE_OK)
        return st;
    if (rows == NULL)
        return placement_refuse(why, why_len, "rows is NULL");
    if (split != INCMOE_MOE_SPLIT_PER_TOKEN && split != INCMOE_MOE_SPLIT_STATIC)
        return placement_refuse(why, why_len, "split %d is not per-token (0) or static (1)",
                                (int)split);
    if (split == INCMOE_MOE_SPLIT_PER_TOKEN) {
        placement_rows_per_token(sample, placement, rows);
        return INCMOE_OK;
    }
    if (placement_rows_static(sample, placement, rows) != 0) {
        if (why != NULL && why_len > 0)
            snprintf(why, why_len, "no memory for the static split's %d counters",
                     sample->num_experts);
        return INCMOE_ERR_NO_MEMORY;
    }
    return INCMOE_OK;
}
