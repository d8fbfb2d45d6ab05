/*
 * placement_check.c - the checks of a routing sample and a placement
 * (placement_check.h).
 */
#include "placement_check.h"

#include <stdarg.h>
#include <stdio.h>

incmoe_status_t placement_refuse(char *why, size_t why_len, const char *fmt, ...)
{
    if (why != NULL && why_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
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

incmoe_status_t placement_check(const incmoe_moe_routing_sample_t *s,
                                const incmoe_moe_placement_t *p, char *why, size_t why_len)
{
    if (p == NULL || p->offsets == NULL || p->ranks == NULL)
        return placement_refuse(why, why_len, "the placement or its offsets or ranks is NULL");
    if (p->offsets[0] != 0)
        return placement_refuse(why, why_len, "placement offsets[0] is %d, not 0", p->offsets[0]);
    for (int e = 0; e < s->num_experts; e++) {
        int lo = p->offsets[e], hi = p->offsets[e + 1];
        /* At most N replicas: more cannot be distinct ranks, and this bounds the reads. */
        if (hi <= lo || hi - lo > s->nranks)
            return placement_refuse(why, why_len,
                                    "placement: expert %d has %d replicas, not 1 .. %d", e, hi - lo,
                                    s->nranks);
        for (int i = lo; i < hi; i++) {
            int r = p->ranks[i];
            if (r < 0 || r >= s->nranks)
                return placement_refuse(why, why_len,
                                        "placement: expert %d on rank %d, not in [0, %d)", e, r,
                                        s->nranks);
            if (i > lo && r <= p->ranks[i - 1])
                return placement_refuse(
                    why, why_len,
                    "placement: expert %d's ranks are not ascending and distinct (%d "
                    "after %d)",
                    e, r, p->ranks[i - 1]);
        }
    }
    return INCMOE_OK;
}
