/*
 * autotune.c - choosing the band count, worker split and tail assistance.
 *
 * The paper swept these per token-count regime on its hardware; here a small
 * model of the stage costs does the choosing (bandmodel.h), so it follows the
 * shape, the token count and the routing.  The model's inputs (a band's fixed
 * cost, an all-rank synchronisation's, a byte's time on the link, a flop's
 * time) are measured or set when the layer is created and agreed by every rank
 * (calibrate.c), and a masked forward's pairs come from its header exchange,
 * so all ranks choose alike from the same numbers (and the forward's header
 * exchange checks that they did for full routing's count).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bandmodel.h"
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

/* The band model's inputs for tmax rows per block; with load (masked routing) the forward's
   pairs, else full routing's rows. */
static bandmodel_in_t model_inputs(const incmoe_moe_t *L, size_t tmax, const routing_load_t *load)
{
    bandmodel_in_t in = {.load = {.N = L->N, .grow = L->grow, .zrow = L->zrow},
                         .tmax = tmax,
                         .masked = load != NULL,
                         .k = L->k,
                         .row_flops = 6.0 * L->H * L->I,
                         .band_s = L->model.band_s,
                         .sync_s = L->model.sync_s,
                         .seen_s = L->model.masked_band_s,
                         .byte_s = L->model.byte_s,
                         .flop_s = L->model.flop_s,
                         .pass_rows = L->model.pass_rows};
    if (load != NULL)
        in.load = *load;
    return in;
}

void autotune_choose(const incmoe_moe_t *L, size_t tmax, const routing_load_t *masked,
                     incmoe_moe_config_t *cfg_p)
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
            bandmodel_in_t in = model_inputs(L, tmax, masked);
            c.nbands = bandmodel_count(&in);
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

void autotune_observe(incmoe_moe_t *L, size_t tmax, const routing_load_t *masked, int nb,
                      double seconds)
{
    bandmodel_in_t in = model_inputs(L, tmax, masked);
    double seen = bandmodel_seen_s(&in, nb, seconds);
    if (seen > 0)
        L->band_seen_s = seen;
}

int incmoe_moe_config_str(const incmoe_moe_config_t *c, char *buf, size_t len)
{
    return snprintf(buf, len, "nb=%d workers(gather/compute/reduce)=%d/%d/%d tail=%d", c->nbands,
                    c->gather_workers, c->compute_workers, c->reduce_workers, c->tail_bands);
}
