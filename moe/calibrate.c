/*
 * calibrate.c - the inputs of the configuration model (autotune.c), fixed
 * once per layer when it is created and agreed by every rank.
 *
 * Each rank brings four costs: a band's fixed cost, an all-rank
 * synchronisation's (a masked band's dispatch waits for a plan that needs
 * every rank's POST), a byte's time on the link and a flop's time in the FFN;
 * and a band's pass over its experts' weights, in rows' worth of FFN time
 * (bandmodel.h).  Where INCMOE_MOE_GFLOPS is unset and costs are measured,
 * the backend times its own GEMMs for the last two (ffn_probe: the rate over
 * a full tile of rows, and one row through every local expert); else the
 * setting's rate and a free pass.  The pass agreed is the least any rank
 * timed, not the slowest's: ranks that share cores probe at once, and one
 * rank's preempted probe must not stand for the weights' real cost.
 * A setting that is set (INCMOE_MOE_BAND_US, INCMOE_MOE_SYNC_US,
 * INCMOE_MOE_LINK_MBPS, INCMOE_MOE_GFLOPS) gives its cost; an unset link,
 * band or synchronisation cost is measured on the layer's own communicator
 * with a few AllGathers and small AllReduces (when INCMOE_MOE_CALIBRATE
 * allows and some rank's configuration is chosen automatically), else the
 * setting's default is used.  An AllReduce(max) then gives every rank the slowest
 * rank's costs, so all ranks choose the same configuration from the same
 * numbers whatever each measured.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "wait.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#define SUBSYS "moe"

#define PROBE_SMALL_ROUNDS 3
#define PROBE_BULK_ROUNDS  2
/* Per rank: long enough to be bandwidth, short enough at 100 Mbit/s (N-1 of them in 80 ms
   at N=4). */
#define PROBE_BULK_BYTES (256u << 10)
#define FS_PER_S         1e15
#define ROWS_SCALE       1e6              /* the weights' pass travels in millionths of a row */
#define ROWS_CAP         ((uint64_t)1e18) /* to_fixed's most */

/* Whether the named setting is set in the environment (not just defaulted). */
static int setting_is_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0';
}

int calib_wanted(const incmoe_moe_t *L)
{
    long long on;
    (void)inc_config_get_int("INCMOE_MOE_CALIBRATE", &on);
    if (!on || L->override.nbands > 0 || setting_is_set("INCMOE_MOE_BANDS"))
        return 0;
    return !setting_is_set("INCMOE_MOE_BAND_US") || !setting_is_set("INCMOE_MOE_SYNC_US") ||
           !setting_is_set("INCMOE_MOE_LINK_MBPS");
}

/* Posts an AllGather, waits for it at most L->timeout_ms; its time in seconds in *t_p. */
static incmoe_status_t timed_allgather(incmoe_moe_t *L, incmoe_mr_t *mr, size_t stride,
                                       size_t bytes, double *t_p)
{
    incmoe_layout_t layout = {stride, 0, bytes, NULL};
    incmoe_req_t req;
    double t0 = inc_now_s();
    incmoe_status_t st =
        incmoe_allgather(L->comm, mr, (size_t)L->rank * stride, mr, 0, &layout, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    *t_p = inc_now_s() - t0;
    return st;
}

/* Posts a one-element AllReduce(max), waits for it at most L->timeout_ms; its time in
   seconds in *t_p. */
static incmoe_status_t timed_allreduce(incmoe_moe_t *L, double *t_p)
{
    incmoe_req_t req;
    double t0 = inc_now_s();
    incmoe_status_t st = incmoe_allreduce(L->comm, L->hdr_mr, 0, L->hdr_mr, sizeof(uint64_t), 1,
                                          INCMOE_UINT64, INCMOE_MAX, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    *t_p = inc_now_s() - t0;
    return st;
}

/* This rank's fixed cost of one small collective, of one all-rank synchronisation and time
   of one received byte, measured (each small one the fastest of a few). */
static incmoe_status_t measure(incmoe_moe_t *L, double *lat_p, double *sync_p, double *byte_p)
{
    double lat = 1e30, sync = 1e30, bulk = 1e30, t;
    incmoe_status_t st;
    for (int i = 0; i < PROBE_SMALL_ROUNDS; i++) {
        if ((st = timed_allgather(L, L->hdr_mr, MOE_HDR_BYTES, 64, &t)) != INCMOE_OK)
            return st;
        lat = t < lat ? t : lat;
        if ((st = timed_allreduce(L, &t)) != INCMOE_OK)
            return st;
        sync = t < sync ? t : sync;
    }
    *sync_p = sync;
    /* The gather buffer is free until the first forward packs it. */
    size_t stride = L->max_tokens * L->grow;
    size_t bytes = stride < PROBE_BULK_BYTES ? stride : PROBE_BULK_BYTES;
    *lat_p = lat;
    *byte_p = 0;
    if (bytes == 0 || L->N < 2)
        return INCMOE_OK;
    incmoe_mr_t *xg_mr = (incmoe_mr_t *)(uintptr_t)L->ctx.xg_mr;
    for (int i = 0; i < PROBE_BULK_ROUNDS; i++) {
        if ((st = timed_allgather(L, xg_mr, stride, bytes, &t)) != INCMOE_OK)
            return st;
        bulk = t < bulk ? t : bulk;
    }
    /* Each rank receives N-1 blocks (ring and in-network alike). */
    *byte_p = (bulk > lat ? bulk - lat : 0) / ((double)(L->N - 1) * (double)bytes);
    return INCMOE_OK;
}

/* Mbit/s of a time per byte (0: unbounded, shown as 0). */
static double mbps(double byte_s)
{
    return byte_s > 0 ? 8e-6 / byte_s : 0;
}

/* s * scale as a count (to 1e18), for the AllReduce(max) of costs. */
static uint64_t to_fixed(double s, double scale)
{
    double v = s * scale;
    return v <= 0 ? 0 : v > 1e18 ? (uint64_t)1e18 : (uint64_t)(v + 0.5);
}

/* A setting's cost: its value (set, or its default) v as scale * v, or (scale < 0) as
   -scale / v. */
static double setting_cost(const char *name, double scale)
{
    long long v;
    (void)inc_config_get_int(name, &v);
    if (scale >= 0)
        return scale * (double)v;
    return v > 0 ? -scale / (double)v : 0;
}

/* The backend's FFN probe (backend.h): *flop_s_p its rate where it timed one, *rows_p its
   weights' pass in rows' worth of that rate; both left alone where it has none or it
   failed (logged: the other ranks are already on their way to the agreement below, and
   the setting's rate only sizes bands). */
static void probe_ffn(incmoe_moe_t *L, double *flop_s_p, double *rows_p)
{
    double flop_s = 0, pass_s = 0;
    if (L->ops->ffn_probe == NULL)
        return;
    incmoe_status_t st = L->ops->ffn_probe(L, &flop_s, &pass_s);
    if (st != INCMOE_OK) {
        log_warn(SUBSYS,
                 "rank %d: create: timing the expert GEMMs failed (%s); the band model takes "
                 "INCMOE_MOE_GFLOPS's rate",
                 L->rank, incmoe_strerror(st));
        return;
    }
    if (flop_s <= 0)
        return;
    *flop_s_p = flop_s;
    *rows_p = pass_s / (flop_s * 6.0 * L->H * L->I);
}

incmoe_status_t calib_agree(incmoe_moe_t *L, int measure_costs)
{
    double lat = 0, sync = 0, byte = 0;
    incmoe_status_t st = INCMOE_OK;
    if (measure_costs && (st = measure(L, &lat, &sync, &byte)) != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: create: measuring the collectives' cost failed: %s (%s)",
                  L->rank, incmoe_strerror(st), why);
        return st;
    }
    /* A band pays the fixed cost of its AllGather and of its ReduceScatter. */
    double band_s = measure_costs && !setting_is_set("INCMOE_MOE_BAND_US")
                        ? 2 * lat
                        : setting_cost("INCMOE_MOE_BAND_US", 1e-6);
    double sync_s = measure_costs && !setting_is_set("INCMOE_MOE_SYNC_US")
                        ? sync
                        : setting_cost("INCMOE_MOE_SYNC_US", 1e-6);
    double byte_s = measure_costs && !setting_is_set("INCMOE_MOE_LINK_MBPS")
                        ? byte
                        : setting_cost("INCMOE_MOE_LINK_MBPS", -8e-6);
    double flop_s = setting_cost("INCMOE_MOE_GFLOPS", -1e-9), pass_rows = 0;
    if (measure_costs && !setting_is_set("INCMOE_MOE_GFLOPS"))
        probe_ffn(L, &flop_s, &pass_rows);

    uint64_t *mine = (uint64_t *)L->hdr, *all = mine + 5;
    mine[0] = to_fixed(band_s, FS_PER_S);
    mine[1] = to_fixed(byte_s, FS_PER_S);
    mine[2] = to_fixed(flop_s, FS_PER_S);
    mine[3] = to_fixed(sync_s, FS_PER_S);
    /* The pass travels as ROWS_CAP less itself, so the max is the least any rank timed (its
       fastest run; on shared cores a run only takes longer); 0: this rank timed none. */
    mine[4] = pass_rows > 0 ? ROWS_CAP - to_fixed(pass_rows, ROWS_SCALE) : 0;
    incmoe_req_t req;
    st = incmoe_allreduce(L->comm, L->hdr_mr, 0, L->hdr_mr, 5 * sizeof(uint64_t), 5, INCMOE_UINT64,
                          INCMOE_MAX, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    if (st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: create: agreeing on the configuration model failed: %s (%s)",
                  L->rank, incmoe_strerror(st), why);
        return st;
    }
    L->model.band_s = (double)all[0] / FS_PER_S;
    L->model.byte_s = (double)all[1] / FS_PER_S;
    L->model.flop_s = (double)all[2] / FS_PER_S;
    L->model.sync_s = (double)all[3] / FS_PER_S;
    L->model.pass_rows = all[4] > 0 ? (double)(ROWS_CAP - all[4]) / ROWS_SCALE : 0;
    log_info(SUBSYS,
             "rank %d: configuration model: band %.0f us, sync %.0f us, link %.1f Mbit/s, %.2f "
             "GFLOP/s, weights' pass %.1f rows a band (%s; this rank's: %.0f us, %.0f us, %.1f "
             "Mbit/s, %.2f GFLOP/s, %.1f rows)",
             L->rank, L->model.band_s * 1e6, L->model.sync_s * 1e6, mbps(L->model.byte_s),
             L->model.flop_s > 0 ? 1e-9 / L->model.flop_s : 0.0, L->model.pass_rows,
             measure_costs ? "measured where not set, slowest rank" : "settings, slowest rank",
             band_s * 1e6, sync_s * 1e6, mbps(byte_s), flop_s > 0 ? 1e-9 / flop_s : 0.0, pass_rows);
    return INCMOE_OK;
}

void calib_ffn_measured(incmoe_moe_t *L, double flop_s)
{
    if (flop_s <= 0 || setting_is_set("INCMOE_MOE_GFLOPS"))
        return;
    L->model.flop_s = flop_s;
    log_info(SUBSYS, "rank %d: configuration model: FFN %.2f GFLOP/s (measured, slowest rank)",
             L->rank, 1e-9 / flop_s);
}
