/*
 * decode.c - the decode step (decode.h).
 *
 * A decode forward is a few tokens per rank, where a bulk forward's fixed
 * costs dominate: the header exchange, a dispatch plan every rank waits for,
 * role workers launched and met at counters.  The low-latency form sizes each
 * source's receive region up front (max_tokens = the decode capacity), so the
 * dispatch is one message up per rank; what the header exchange does for a
 * bulk forward rides on the two collectives instead:
 *   - one rank's refused arguments: its dispatch carries the refusal, which
 *     fails the dispatch on every rank before any row moves;
 *   - fencing: a rank's receive regions and output rows are written only for
 *     a collective it posted itself (rows of a source that is ahead wait in
 *     the client until then), and this call returns only once its combine
 *     completed, so the zero-copy output of one forward stays intact until the
 *     caller's next call on this rank, as after a header exchange.
 * The rows are the masked forward's (hidden state, expert ids, weights), so
 * the receiver needs nothing else, and the experts run through the same FFN
 * over the received rows (plan.h: region_rows), one band, the compute team
 * only; a team of one runs on the calling thread.
 */
#include "decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"
#include "plan.h"

#include "base/clock.h"
#include "base/log.h"

#define SUBSYS "moe"

incmoe_status_t decode_read(incmoe_moe_t *L, int has, int decode_tokens)
{
    size_t dflt =
        L->max_tokens < INCMOE_MOE_DECODE_TOKENS ? L->max_tokens : INCMOE_MOE_DECODE_TOKENS;
    if (!has || decode_tokens == 0) {
        L->decode_tokens = dflt;
        return INCMOE_OK;
    }
    if (decode_tokens == -1) {
        L->decode_tokens = 0;
        return INCMOE_OK;
    }
    if (decode_tokens < 1 || (size_t)decode_tokens > L->max_tokens) {
        log_error(SUBSYS,
                  "rank %d: create: decode_tokens is %d: expected -1 (no decode step), 0 (the "
                  "default) or 1 .. max_tokens = %zu",
                  L->rank, decode_tokens, L->max_tokens);
        return INCMOE_ERR_INVALID_ARG;
    }
    L->decode_tokens = (size_t)decode_tokens;
    return INCMOE_OK;
}

incmoe_status_t decode_setup(incmoe_moe_t *L)
{
    L->decode_first = calloc((size_t)L->N, sizeof(uint32_t));
    if (L->decode_first == NULL)
        return INCMOE_ERR_NO_MEMORY;
    L->ctx.region_first = L->decode_first;
    return INCMOE_OK;
}

void decode_free(incmoe_moe_t *L)
{
    free(L->decode_first);
    L->decode_first = NULL;
}

int decode_fits(const incmoe_moe_t *L, int i, const int *counts)
{
    if (counts == NULL || L->decode_tokens == 0 || L->ops == NULL ||
        L->ops->decode_experts == NULL || L->lanes[i].ll_refused)
        return 0;
    for (int s = 0; s < L->N; s++)
        if (counts[s] < 0 || (size_t)counts[s] > L->decode_tokens)
            return 0;
    return 1;
}

/* The plan in L->ctx: a masked baseline forward of one band of decode_tokens rows per block,
   received by source region. */
static void decode_plan(incmoe_moe_t *L, const moe_inputs_t *in)
{
    incmoe_moe_config_t cfg;
    autotune_choose(L, L->decode_tokens, NULL, &cfg); /* its compute team */
    cfg.nbands = cfg.gather_workers = cfg.reduce_workers = 1;
    cfg.tail_bands = 0;
    plan_forward(L, INCMOE_MOE_BASELINE, 1, &cfg, L->decode_tokens, in->counts, in->x, in->ids,
                 in->w);
    L->ctx.region_rows = L->decode_tokens;
}

/* A collective of the step that failed: the reason logged, and what the failure means for the
   layer (decode.h). */
static incmoe_status_t decode_failed(incmoe_moe_t *L, int i, const incmoe_req_t *req,
                                     const char *what, incmoe_status_t st, int *again_p)
{
    moe_lane_t *l = &L->lanes[i];
    char why[256] = "";
    if (req != NULL)
        incmoe_req_error(l->comm, req, why, sizeof(why));
    else if (incmoe_comm_error(l->comm, why, sizeof(why)) == INCMOE_OK)
        snprintf(why, sizeof(why), "refused at posting"); /* nothing failed but this call */
    if (st == INCMOE_ERR_NO_MEMORY || st == INCMOE_ERR_UNSUPPORTED) {
        log_warn(SUBSYS,
                 "rank %d: forward: %s refused the decode step's %s (%s: %s); this and later "
                 "forwards on it take the bulk path",
                 L->rank, lanes_algo_name(l->algo), what, incmoe_strerror(st), why);
        l->ll_refused = 1;
        *again_p = 1;
        return st;
    }
    log_error(SUBSYS, "rank %d: forward: the decode step's %s on %s failed: %s (%s)", L->rank, what,
              lanes_algo_name(l->algo), incmoe_strerror(st), why);
    /* A refusal fails the collective alike on every rank and leaves nothing in flight. */
    if (st != INCMOE_ERR_INVALID_ARG)
        L->failed = 1;
    return st;
}

/* The received rows' regions and sources, once the dispatch completed: region_first and the
   source table into the plan, R into its dispatch block. */
static incmoe_status_t decode_received(incmoe_moe_t *L, incmoe_comm_t *comm,
                                       const incmoe_req_t *req)
{
    moe_ctx_t *x = &L->ctx;
    size_t nregions = 0, R = 0;
    incmoe_status_t st =
        incmoe_dispatch_counts(comm, req, L->decode_first, (size_t)L->N, &nregions);
    if (st == INCMOE_OK && nregions != (size_t)L->N) {
        log_error(SUBSYS, "rank %d: forward: the decode step's dispatch has %zu regions, not %d",
                  L->rank, nregions, L->N);
        return INCMOE_ERR_PROTOCOL;
    }
    for (int s = 0; st == INCMOE_OK && s < L->N; s++) {
        uint32_t n = L->decode_first[s];
        L->decode_first[s] = (uint32_t)R;
        R += n;
    }
    size_t nrecv = 0;
    if (st == INCMOE_OK)
        st = incmoe_dispatch_result(comm, req, &nrecv, (uint32_t *)(uintptr_t)x->src_host,
                                    (size_t)L->N * L->decode_tokens);
    if (st == INCMOE_OK && nrecv != R) {
        log_error(SUBSYS,
                  "rank %d: forward: the decode step's dispatch received %zu rows, its "
                  "regions hold %zu",
                  L->rank, nrecv, R);
        return INCMOE_ERR_PROTOCOL;
    }
    x->dcb[0].nrecv = R;
    return st;
}

incmoe_status_t decode_run(incmoe_moe_t *L, int i, const moe_inputs_t *in, const char *why,
                           int *again_p)
{
    incmoe_comm_t *comm = L->lanes[i].comm;
    moe_ctx_t *x = &L->ctx;
    *again_p = 0;
    lanes_use(L, i);
    decode_plan(L, in);
    size_t T = why != NULL ? 0 : (size_t)in->counts[L->rank];
    double t0 = inc_now_ms();
    if (T > 0)
        L->ops->decode_pack(L);
    incmoe_dispatch_params_t d = {.field_mask = INCMOE_DISPATCH_PARAM_LOW_LATENCY |
                                                (why ? INCMOE_DISPATCH_PARAM_REFUSED : 0),
                                  .send_mr = (incmoe_mr_t *)(uintptr_t)x->xs_mr,
                                  .nrows = T,
                                  .row_bytes = L->grow,
                                  .sets = T > 0 ? x->sets : NULL,
                                  .recv_mr = (incmoe_mr_t *)(uintptr_t)x->xg_mr,
                                  .capacity = (size_t)L->N * L->decode_tokens,
                                  .refused = why,
                                  .max_tokens = L->decode_tokens};
    incmoe_req_t dreq;
    incmoe_status_t st = incmoe_dispatch(comm, &d, &dreq);
    if (st != INCMOE_OK)
        return decode_failed(L, i, NULL, "dispatch", st, again_p);
    if ((st = incmoe_wait(comm, &dreq)) == INCMOE_OK)
        st = decode_received(L, comm, &dreq);
    if (st != INCMOE_OK) {
        st = decode_failed(L, i, &dreq, "dispatch", st, again_p);
        (void)incmoe_dispatch_release(comm, &dreq);
        return st;
    }
    double t1 = inc_now_ms();
    /* Every rank's dispatch succeeded alike: every rank runs its experts, so the band
       counters' base moves alike. */
    L->band_total += 1;
    char refused[INCMOE_REFUSAL_MAX] = "";
    incmoe_status_t ffn = L->ops->decode_experts(L);
    if (ffn != INCMOE_OK)
        snprintf(refused, sizeof(refused), "rank %d: the local experts failed: %s", L->rank,
                 incmoe_strerror(ffn));
    double t2 = inc_now_ms();
    incmoe_combine_params_t c = {.field_mask = ffn != INCMOE_OK ? INCMOE_COMBINE_PARAM_REFUSED : 0,
                                 .dispatch = dreq,
                                 .send_mr = (incmoe_mr_t *)(uintptr_t)x->z_mr,
                                 .recv_mr = (incmoe_mr_t *)(uintptr_t)x->zo_mr,
                                 .row_count = (size_t)L->H,
                                 .dtype = L->dtype,
                                 .op = INCMOE_SUM,
                                 .refused = refused};
    incmoe_req_t creq;
    st = incmoe_combine(comm, &c, &creq);
    if (st != INCMOE_OK) {
        st = decode_failed(L, i, NULL, "combine", st, again_p);
        (void)incmoe_dispatch_release(comm, &dreq);
        return st;
    }
    st = incmoe_wait(comm, &creq);
    if (ffn != INCMOE_OK) {
        /* The combine carried this rank's refusal, so it failed on every rank; this rank's
           compute team gave up (its abort stays set): the layer is unusable here. */
        (void)incmoe_dispatch_release(comm, &dreq);
        L->failed = 1;
        return ffn;
    }
    if (st != INCMOE_OK) {
        st = decode_failed(L, i, &creq, "combine", st, again_p);
        (void)incmoe_dispatch_release(comm, &dreq); /* a failed combine keeps its dispatch */
        return st;
    }
    L->timing.dispatch_ms = t1 - t0;
    L->timing.ffn_ms = t2 - t1;
    L->timing.combine_ms = inc_now_ms() - t2;
    return INCMOE_OK;
}
