/*
 * autotune.c - choosing the band count, worker split and tail assistance.
 *
 * The paper swept these per token-count regime on its hardware; here a small
 * model of the stage costs does the choosing, so it follows the shape and the
 * token count.  A three-stage pipeline of nb bands takes about
 *     (nb + 2) * stage / nb + nb * overhead
 * where stage is the slowest of AllGather, FFN and ReduceScatter over the
 * whole layer and overhead is a band's fixed cost (collective latency,
 * smaller GEMMs); the minimum is at nb = sqrt(2 * stage / overhead).
 * The model's inputs (a band's fixed cost, a byte's time on the link, a
 * flop's time) are measured or set when the layer is created and agreed by
 * every rank (calibrate.c), so all ranks choose alike from the same numbers
 * (and the forward's header exchange checks that they did).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layer.h"

#include "base/config.h"
#include "base/log.h"
#include "base/text.h"

static int clampi(long long v, long long lo, long long hi)
{
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

/* INCMOE_MOE_WORKERS as G,C,R, each 0..INCMOE_MOE_MAX_WORKERS (0: chosen); all 0 when unset or
   not that (logged). */
static void workers_setting(int w[3])
{
    const char *ws = inc_config_get_str("INCMOE_MOE_WORKERS");
    w[0] = w[1] = w[2] = 0;
    if (ws == NULL)
        return;
    const char *p = ws;
    for (int i = 0; i < 3; i++) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL && i < 2 ? (size_t)(comma - p) : strlen(p);
        char field[24];
        long long v;
        if (n >= sizeof(field) || (i < 2 && comma == NULL)) {
            p = NULL;
            break;
        }
        memcpy(field, p, n);
        field[n] = '\0';
        if (inc_parse_int(field, 0, INCMOE_MOE_MAX_WORKERS, 0, &v, NULL, 0) != 0) {
            p = NULL;
            break;
        }
        w[i] = (int)v;
        p += n + 1;
    }
    if (p == NULL) {
        char shown[64];
        log_warn("moe", "INCMOE_MOE_WORKERS=%s is not G,C,R (each 0..%d); ignored",
                 inc_text_sanitize(shown, sizeof(shown), ws, strlen(ws)), INCMOE_MOE_MAX_WORKERS);
        w[0] = w[1] = w[2] = 0;
    }
}

void autotune_choose(const incmoe_moe_t *L, size_t tmax, incmoe_moe_config_t *cfg_p)
{
    incmoe_moe_config_t c = L->override;

    /* Worker split.  Compute workers may differ by rank (they do not shape any
       collective); gather and reduce workers do (ReduceScatter parts). */
    int w[3];
    workers_setting(w);
    int wg = w[0], wc = w[1], wr = w[2];
    if (c.gather_workers <= 0)
        c.gather_workers = wg > 0 ? wg : 1;
    if (c.reduce_workers <= 0)
        c.reduce_workers = wr > 0 ? wr : 1;
    if (c.compute_workers <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per_rank = cores / (L->N > 0 ? L->N : 1);
        /* Gather and reduce workers mostly sleep on completions (and in
           baseline mode wait on the calling thread while the FFN runs), so
           every core a rank has runs the team's GEMMs (ffn.c). */
        c.compute_workers = wc > 0 ? wc : clampi(per_rank, 1, 8);
    }
    c.gather_workers = clampi(c.gather_workers, 1, INCMOE_MOE_MAX_WORKERS);
    c.compute_workers = clampi(c.compute_workers, 1, INCMOE_MOE_MAX_WORKERS);
    c.reduce_workers = clampi(c.reduce_workers, 1, INCMOE_MOE_MAX_WORKERS);

    /* Band count from the stage-cost model. */
    if (c.nbands <= 0) {
        /* A setting out of its range is logged and its default used: the layer still runs. */
        long long env;
        (void)inc_config_get_int("INCMOE_MOE_BANDS", &env); /* 0 when unset */
        if (env > 0) {
            c.nbands = clampi(env, 1, INCMOE_MOE_MAX_BANDS);
        } else {
            double ovh = L->model.band_s;
            double others = (double)(L->N - 1) * (double)tmax;
            double t_ag = others * (double)L->grow * L->model.byte_s;
            double t_rs = others * (double)L->zrow * L->model.byte_s;
            /* Each rank runs its experts over about tmax * k routed rows. */
            double t_ffn = (double)tmax * L->k * 6.0 * L->H * L->I * L->model.flop_s;
            double stage = fmax(fmax(t_ag, t_rs), t_ffn);
            double nb = ovh > 0 ? sqrt(2 * stage / ovh) : 8;
            /* Bands of fewer than 8 rows only add fixed costs. */
            long long most = (long long)((tmax + 7) / 8);
            c.nbands = clampi(llround(nb), 1, most < 1 ? 1 : (most > 64 ? 64 : most));
        }
    }
    c.nbands = clampi(c.nbands, 1, INCMOE_MOE_MAX_BANDS);

    /* Tail assistance pays off once the drain phase is long: many rows per band. */
    if (c.tail_bands < 0) {
        long long tail;
        if (inc_config_get_str("INCMOE_MOE_TAIL") != NULL &&
            inc_config_get_int("INCMOE_MOE_TAIL", &tail) == INCMOE_OK)
            c.tail_bands = (int)tail;
        else
            c.tail_bands = (c.nbands >= 4 && tmax >= 1024) ? 1 : 0;
    }
    c.tail_bands = clampi(c.tail_bands, 0, c.nbands);
    *cfg_p = c;
}

int incmoe_moe_config_str(const incmoe_moe_config_t *c, char *buf, size_t len)
{
    return snprintf(buf, len, "nb=%d workers(gather/compute/reduce)=%d/%d/%d tail=%d", c->nbands,
                    c->gather_workers, c->compute_workers, c->reduce_workers, c->tail_bands);
}
