/*
 * placement_check.c - the checks of a routing sample and a placement
 * (placement_check.h).
 */
#include "placement_check.h"

#include "base/vformat.h"

incmoe_status_t placement_refuse(char *why, size_t why_len, const char *fmt, ...)
{
    if (why != NULL && why_len > 0)
        INC_VFORMAT(why, why_len, fmt);
    return INCMOE_ERR_INVALID_ARG;
}

size_t placement_sample_tokens(const incmoe_moe_routing_sample_t *s)
{
    size_t T = 0;
    for (int r = 0; r < s->nranks; r++)
        T += (size_t)s->counts[r];
    return T;
}

/* Token t's ids: each in [0, E), none twice. */
static incmoe_status_t check_token(const incmoe_moe_routing_sample_t *s, size_t t, char *why,
                                   size_t why_len)
{
    const int32_t *id = s->topk_ids + t * (size_t)s->top_k;
    for (int j = 0; j < s->top_k; j++) {
        if (id[j] < 0 || id[j] >= s->num_experts)
            return placement_refuse(why, why_len,
                                    "sample token %zu: expert id %d (slot %d) is not in [0, %d)", t,
                                    (int)id[j], j, s->num_experts);
        for (int i = 0; i < j; i++) {
            if (id[i] == id[j])
                return placement_refuse(why, why_len,
                                        "sample token %zu: expert %d picked twice (slots %d, %d)",
                                        t, (int)id[j], i, j);
        }
    }
    return INCMOE_OK;
}

/* The numbers of the sample: N, E, k. */
static incmoe_status_t check_shape(const incmoe_moe_routing_sample_t *s, char *why, size_t why_len)
{
    if (s->nranks < 1 || s->nranks > INCMOE_MAX_RANKS)
        return placement_refuse(why, why_len, "nranks %d is not in 1 .. %d", s->nranks,
                                INCMOE_MAX_RANKS);
    if (s->num_experts < s->nranks || s->num_experts % s->nranks != 0)
        return placement_refuse(why, why_len,
                                "num_experts %d is not a positive multiple of nranks %d (the base "
                                "placement is E/N contiguous experts per rank)",
                                s->num_experts, s->nranks);
    if (s->top_k < 1 || s->top_k > s->num_experts || s->top_k > INCMOE_MOE_MAX_TOPK)
        return placement_refuse(why, why_len, "top_k %d is not in 1 .. min(num_experts %d, %d)",
                                s->top_k, s->num_experts, INCMOE_MOE_MAX_TOPK);
    if (s->counts == NULL)
        return placement_refuse(why, why_len, "counts is NULL");
    return INCMOE_OK;
}

incmoe_status_t placement_check_sample(const incmoe_moe_routing_sample_t *s, char *why,
                                       size_t why_len)
{
    if (s == NULL)
        return placement_refuse(why, why_len, "the sample is NULL");
    incmoe_status_t st = check_shape(s, why, why_len);
    if (st != INCMOE_OK)
        return st;
    for (int r = 0; r < s->nranks; r++) {
        if (s->counts[r] < 0)
            return placement_refuse(why, why_len, "counts[%d] is %d, below 0", r, s->counts[r]);
    }
    size_t T = placement_sample_tokens(s);
    if (T > 0 && s->topk_ids == NULL)
        return placement_refuse(why, why_len, "topk_ids is NULL with %zu tokens", T);
    for (size_t t = 0; t < T; t++) {
        if ((st = check_token(s, t, why, why_len)) != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}

incmoe_status_t placement_check_table(const incmoe_moe_placement_t *p, int E, int N, char *why,
                                      size_t why_len)
{
    if (p == NULL || p->offsets == NULL || p->ranks == NULL)
        return placement_refuse(why, why_len, "the placement, its offsets or its ranks is NULL");
    if (p->offsets[0] != 0)
        return placement_refuse(why, why_len, "offsets[0] is %d, expected 0", p->offsets[0]);
    for (int e = 0; e < E; e++) {
        int lo = p->offsets[e], hi = p->offsets[e + 1];
        if (hi <= lo)
            return placement_refuse(why, why_len,
                                    "expert %d has no replica (offsets[%d] = %d, offsets[%d] = %d)",
                                    e, e, lo, e + 1, hi);
        /* At most N replicas: more cannot be distinct ranks, and this bounds the reads. */
        if (hi - lo > N)
            return placement_refuse(
                why, why_len, "expert %d has %d replicas, more than the %d ranks", e, hi - lo, N);
        for (int i = lo; i < hi; i++) {
            if (p->ranks[i] < 0 || p->ranks[i] >= N)
                return placement_refuse(
                    why, why_len, "expert %d: replica %d is rank %d (ranks[%d]), expected 0..%d", e,
                    i - lo, p->ranks[i], i, N - 1);
            if (i > lo && p->ranks[i] <= p->ranks[i - 1])
                return placement_refuse(
                    why, why_len,
                    "expert %d: ranks %d then %d (ranks[%d]) are not distinct and ascending", e,
                    p->ranks[i - 1], p->ranks[i], i);
        }
    }
    return INCMOE_OK;
}

incmoe_status_t placement_check(const incmoe_moe_routing_sample_t *s,
                                const incmoe_moe_placement_t *p, char *why, size_t why_len)
{
    return placement_check_table(p, s->num_experts, s->nranks, why, why_len);
}
