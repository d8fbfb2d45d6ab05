/*
 * replicas.c - the layer's expert replicas (replicas.h).
 */
#include "replicas.h"

#include <stdlib.h>
#include <string.h>

#include "placement_check.h"
#include "replica_plan.h"

#include "base/log.h"

#define SUBSYS "moe"

#define BAD(L, fmt, ...)                                                                           \
    do {                                                                                           \
        log_error(SUBSYS, "rank %d: create: placement: " fmt, (L)->rank, ##__VA_ARGS__);           \
        return INCMOE_ERR_INVALID_ARG;                                                             \
    } while (0)

static incmoe_status_t check_placement(const incmoe_moe_t *L, const incmoe_moe_params_t *params,
                                       const incmoe_moe_placement_t *p)
{
    if (params->expert_owner != NULL)
        BAD(L, "both expert_owner and the extension's placement are set: give one");
    char why[256];
    if (placement_check_table(p, params->num_experts, L->N, why, sizeof(why)) != INCMOE_OK)
        BAD(L, "%s", why);
    return INCMOE_OK;
}

incmoe_status_t replicas_read(incmoe_moe_t *L, const incmoe_moe_params_t *params,
                              const incmoe_moe_params_ext_t *ext)
{
    L->slots = 1;
    if (ext == NULL || !(ext->field_mask & INCMOE_MOE_PARAM_PLACEMENT))
        return INCMOE_OK;
    const incmoe_moe_placement_t *p = ext->placement;
    incmoe_status_t st = check_placement(L, params, p);
    if (st != INCMOE_OK)
        return st;
    const int E = params->num_experts, n = p->offsets[E];
    int *offsets = malloc(((size_t)E + 1) * sizeof(int)), *ranks = malloc((size_t)n * sizeof(int));
    L->hdr_forced = calloc(replicas_hdr_bytes(L->N, 1) - MOE_HDR_BYTES, 1);
    L->forced_sum = calloc((size_t)L->N, sizeof(uint64_t));
    L->load = calloc((size_t)L->N, sizeof(int64_t));
    L->corr = calloc((size_t)L->N, sizeof(int64_t));
    L->placement = (incmoe_moe_placement_t){offsets, ranks};
    if (!offsets || !ranks || !L->hdr_forced || !L->forced_sum || !L->load || !L->corr)
        return INCMOE_ERR_NO_MEMORY;
    memcpy(offsets, p->offsets, ((size_t)E + 1) * sizeof(int));
    memcpy(ranks, p->ranks, (size_t)n * sizeof(int));
    for (int e = 0; e < E; e++) {
        int c = offsets[e + 1] - offsets[e];
        L->slots = c > L->slots ? c : L->slots;
    }
    L->replicated = L->slots > 1;
    if (L->replicated && params->backend != INCMOE_MOE_BACKEND_CPU) {
        log_error(SUBSYS, "rank %d: create: replicated experts run on the CPU backend only",
                  L->rank);
        return INCMOE_ERR_UNSUPPORTED;
    }
    L->chosen =
        malloc((L->max_tokens > 0 ? L->max_tokens : 1) * (size_t)params->top_k * sizeof(int32_t));
    return L->chosen ? INCMOE_OK : INCMOE_ERR_NO_MEMORY;
}

size_t replicas_hdr_bytes(int N, int replicated)
{
    return MOE_HDR_BYTES + (replicated ? ((size_t)N * sizeof(uint32_t) + 15) & ~(size_t)15 : 0);
}

void replicas_local(incmoe_moe_t *L, const int32_t *ids, size_t T)
{
    if (!L->replicated)
        return;
    replica_forced(&L->placement, L->N, L->rank, ids, L->k, T, L->hdr_forced);
    memset(L->load, 0, (size_t)L->N * sizeof(int64_t));
    replica_assign(&L->placement, L->E, L->N, L->rank, ids, L->k, T, NULL, L->load, L->chosen);
}

void replicas_bulk(incmoe_moe_t *L, const int32_t *ids, size_t T)
{
    if (!L->replicated)
        return;
    memset(L->forced_sum, 0, (size_t)L->N * sizeof(uint64_t));
    for (int s = 0; s < L->N; s++) {
        const uint8_t *f = L->hdr + (size_t)s * L->hdr_bytes + MOE_HDR_BYTES;
        for (int r = 0; r < L->N; r++) {
            uint32_t v;
            memcpy(&v, f + (size_t)r * sizeof(v), sizeof(v));
            L->forced_sum[r] += v;
        }
    }
    replica_correction(L->N, L->forced_sum, L->hdr_forced, L->corr);
    memset(L->load, 0, (size_t)L->N * sizeof(int64_t));
    replica_assign(&L->placement, L->E, L->N, L->rank, ids, L->k, T, L->corr, L->load, L->chosen);
}

void replicas_free(incmoe_moe_t *L)
{
    free((void *)L->placement.offsets);
    free((void *)L->placement.ranks);
    free(L->hdr_forced);
    free(L->forced_sum);
    free(L->load);
    free(L->corr);
    free(L->chosen);
    memset(&L->placement, 0, sizeof(L->placement));
}
