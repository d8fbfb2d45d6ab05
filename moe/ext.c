/*
 * ext.c - the layer parameters' extension (ext.h).
 */
#include "ext.h"

#include "decode.h"

#include "base/log.h"

#define SUBSYS "moe"

#define BAD(L, fmt, ...)                                                                           \
    do {                                                                                           \
        log_error(SUBSYS, "rank %d: create: " fmt, (L)->rank, ##__VA_ARGS__);                      \
        return INCMOE_ERR_INVALID_ARG;                                                             \
    } while (0)

static incmoe_status_t path_read(incmoe_moe_t *L, const incmoe_moe_path_t *p)
{
    if (p->algo != INCMOE_MOE_ALGO_AUTO && p->algo != INCMOE_MOE_ALGO_COMM &&
        p->algo != INCMOE_ALGO_INC && p->algo != INCMOE_ALGO_RING && p->algo != INCMOE_ALGO_A2A)
        BAD(L,
            "path.algo is %d: expected INCMOE_MOE_ALGO_AUTO (-1), INCMOE_MOE_ALGO_COMM (-2) or "
            "an incmoe_algo_t (0..2)",
            p->algo);
    if (p->mode != INCMOE_MOE_BASELINE && p->mode != INCMOE_MOE_PIPELINED &&
        p->mode != INCMOE_MOE_AUTO && p->mode != INCMOE_MOE_DECODE)
        BAD(L, "path.mode is %d: expected baseline (0), pipelined (1), auto (2) or decode (3)",
            (int)p->mode);
    if (p->routing != INCMOE_MOE_ROUTING_FULL && p->routing != INCMOE_MOE_ROUTING_MASKED &&
        p->routing != INCMOE_MOE_ROUTING_AUTO)
        BAD(L, "path.routing is %d: expected full (0), masked (1) or auto (2)", (int)p->routing);
    const incmoe_comm_params_t *cp = p->comm_params;
    if (p->algo != INCMOE_MOE_ALGO_COMM) {
        if (cp == NULL || cp->switch_addr == NULL)
            BAD(L,
                "path.algo %d needs path.comm_params with the switch address (the parameters "
                "params->comm was created with)",
                p->algo);
        if (cp->rank != L->rank || cp->nranks != L->N)
            BAD(L, "path.comm_params name rank %d of %d, the communicator is rank %d of %d",
                cp->rank, cp->nranks, L->rank, L->N);
        if (L->ops->lane_open == NULL)
            BAD(L, "path.algo %d: the %s backend runs on the layer's communicator only", p->algo,
                L->ops->name);
    }
    L->has_path = 1;
    L->path = *p;
    return INCMOE_OK;
}

incmoe_status_t ext_read(incmoe_moe_t *L, const incmoe_moe_params_ext_t *ext)
{
    L->has_path = 0;
    if (ext == NULL)
        return decode_read(L, 0, 0);
    uint64_t unknown = ext->field_mask & ~(uint64_t)INCMOE_MOE_PARAM_ALL;
    if (unknown != 0)
        BAD(L,
            "extension field_mask 0x%llx has bits 0x%llx that this library (%d.%d.%d) does "
            "not know (it knows 0x%llx)",
            (unsigned long long)ext->field_mask, (unsigned long long)unknown, INCMOE_VERSION_MAJOR,
            INCMOE_VERSION_MINOR, INCMOE_VERSION_PATCH, (unsigned long long)INCMOE_MOE_PARAM_ALL);
    if (ext->field_mask & INCMOE_MOE_PARAM_PATH) {
        incmoe_status_t st = path_read(L, &ext->path);
        if (st != INCMOE_OK)
            return st;
    }
    return decode_read(L, (ext->field_mask & INCMOE_MOE_PARAM_DECODE) != 0, ext->decode_tokens);
}
