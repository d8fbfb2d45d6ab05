/*
 * placement_check.h - the checks of "Choosing a placement" (incmoe_moe.h): a
 * routing sample and a placement with replicas, each refused with the reason
 * written out (what was wrong and where), so that a caller's mistake reads as
 * one, not as a crash or a silent out-of-range read.
 */
#ifndef INCMOE_MOE_PLACEMENT_CHECK_H
#define INCMOE_MOE_PLACEMENT_CHECK_H

#include <stddef.h>

#include "incmoe/incmoe_moe.h"

/* The sample's shape, counts and expert ids: INCMOE_OK, or INCMOE_ERR_INVALID_ARG with the
   reason in why[0 .. why_len) (why may be NULL). */
incmoe_status_t placement_check_sample(const incmoe_moe_routing_sample_t *s, char *why,
                                       size_t why_len);

/* p as a placement of E experts over N ranks: offsets[0] = 0, every expert on 1 .. N ranks, its
   ranks in [0, N), ascending and distinct.  INCMOE_OK, or INCMOE_ERR_INVALID_ARG with the reason
   (naming the expert and the offending entry).  The layer's create and the sample's checks
   share it. */
incmoe_status_t placement_check_table(const incmoe_moe_placement_t *p, int E, int N, char *why,
                                      size_t why_len);

/* p as a placement of s->num_experts experts over s->nranks ranks (the sample checked): every
   expert on at least one rank, its ranks in [0, N), ascending and distinct.  INCMOE_OK, or
   INCMOE_ERR_INVALID_ARG with the reason. */
incmoe_status_t placement_check(const incmoe_moe_routing_sample_t *s,
                                const incmoe_moe_placement_t *p, char *why, size_t why_len);

/* INCMOE_ERR_INVALID_ARG, with the reason printed into why[0 .. why_len) (why may be NULL). */
incmoe_status_t placement_refuse(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Tokens in the sample: the sum of its counts (the sample checked). */
size_t placement_sample_tokens(const incmoe_moe_routing_sample_t *s);

#endif
