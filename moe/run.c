/*
 * run.c - one forward on one path (run.h).
 */
#include "run.h"

#include <stdint.h>
#include <string.h>

#include "decode.h"
#include "lanes.h"
#include "plan.h"

#include "base/clock.h"
#include "base/log.h"

#define SUBSYS "moe"

void run_config(const incmoe_moe_t *L, incmoe_moe_mode_t mode, const routing_load_t *masked,
                size_t tmax, incmoe_moe_config_t *cfg_p)
{
    incmoe_moe_config_t cfg;
    autotune_choose(L, tmax, masked, &cfg);
    if (mode == INCMOE_MOE_BASELINE)
        cfg.nbands = 1, cfg.gather_workers = 1, cfg.reduce_workers = 1, cfg.tail_bands = 0;
    if (masked)
        cfg.reduce_workers = 1, cfg.tail_bands = 0;
    *cfg_p = cfg;
}

static const char *fail_name(int32_t what, int masked)
{
    static const char *const masked_names[] = {
        [MOE_FAIL_GATHER_COPY] = "gather copy",
        [MOE_FAIL_AG_POST] = "dispatch post",
        [MOE_FAIL_AG] = "dispatch",
        [MOE_FAIL_WAIT_AG] = "wait for the dispatch",
        [MOE_FAIL_WAIT_FFN] = "wait for expert FFNs",
        [MOE_FAIL_BARRIER] = "band barrier",
        [MOE_FAIL_WAIT_RS_READY] = "wait for the band's partials",
        [MOE_FAIL_WAIT_RS_TURN] = "wait for the combine's turn",
        [MOE_FAIL_RS_POST] = "combine post",
        [MOE_FAIL_RS] = "combine",
    };
    static const char *const names[] = {
        [MOE_FAIL_GATHER_COPY] = "gather copy",
        [MOE_FAIL_AG_POST] = "AllGather post",
        [MOE_FAIL_AG] = "AllGather",
        [MOE_FAIL_WAIT_AG] = "wait for AllGather",
        [MOE_FAIL_WAIT_FFN] = "wait for expert FFNs",
        [MOE_FAIL_BARRIER] = "band barrier",
        [MOE_FAIL_WAIT_RS_READY] = "wait for the band's partials",
        [MOE_FAIL_WAIT_RS_TURN] = "wait for ReduceScatter turn",
        [MOE_FAIL_RS_POST] = "ReduceScatter post",
        [MOE_FAIL_RS] = "ReduceScatter",
    };
    _Static_assert(sizeof(names) == sizeof(masked_names), "a name for every failure");
    if (what < 0 || (size_t)what >= sizeof(names) / sizeof(names[0]))
        return "role";
    return masked ? masked_names[what] : names[what];
}

/* The first failure inside the role loops, reported once the loops returned. */
static incmoe_status_t loops_status(const incmoe_moe_t *L)
{
    const moe_counters_t *k = L->ctx.cnt;
    incmoe_status_t st = (incmoe_status_t)incmoe_atomic_load_acquire32(&k->abort);
    if (st != INCMOE_OK) {
        const moe_lane_t *l = &L->lanes[L->cur_lane];
        char why[256] = "";
        incmoe_comm_error(l->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: %s of band %llu failed on %s: %s (%s)", L->rank,
                  fail_name(k->fail_what, L->ctx.masked), (unsigned long long)k->fail_band,
                  lanes_algo_name(l->algo), incmoe_strerror(st), why);
    }
    return st;
}

incmoe_status_t run_path(incmoe_moe_t *L, const moe_path_t *p, const moe_inputs_t *in, int *again_p)
{
    *again_p = 0;
    if (p->mode == INCMOE_MOE_DECODE)
        return decode_run(L, p->lane, in, NULL, again_p);
    int masked = p->routing == INCMOE_MOE_ROUTING_MASKED;
    incmoe_moe_config_t cfg;
    run_config(L, p->mode, masked ? &in->load : NULL, in->tmax, &cfg);
    lanes_use(L, p->lane);
    plan_forward(L, p->mode, masked, &cfg, in->tmax, in->counts, in->x, in->ids, in->w);
    double t0 = inc_now_s();
    incmoe_status_t st = L->ops->forward(L, in->f);
    if (st == INCMOE_OK)
        st = loops_status(L);
    /* A masked band's cost depends on the whole job's load (the plan waits for every rank's
       POST), which no probe at create sees: the forward itself shows it. */
    if (st == INCMOE_OK && masked && p->mode == INCMOE_MOE_PIPELINED)
        autotune_observe(L, in->tmax, &in->load, cfg.nbands, inc_now_s() - t0);
    plan_retire(L);
    if (st != INCMOE_OK)
        L->failed = 1;
    return st;
}

void *run_output(incmoe_moe_t *L)
{
    return L->ctx.masked ? (void *)L->ctx.zo : (void *)z_row(&L->ctx, (size_t)L->rank, 0);
}
