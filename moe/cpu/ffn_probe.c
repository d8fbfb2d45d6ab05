/*
 * ffn_probe.c - what the band model needs to know of this rank's expert compute
 * (bandmodel.h), timed on the calling thread when the layer is created: the GEMMs' rate
 * over a full tile of rows, and a pass over every local expert's weights with one row
 * each, which a band pays whatever its rows (each local expert's GEMMs read all of its
 * weights).  The same GEMMs as ffn.c's (cpu_gemm_packed), without the SwiGLU and the
 * sums, which cost per row and not per band.  Ranks that share cores probe at once (create
 * is collective), so the two run in turn for some milliseconds and each one's fastest run
 * counts; the model takes the pass in rows' worth of the tile's rate.
 */
#include <stdlib.h>

#include "base/clock.h"
#include "cpu/cpu.h"
#include "cpu/gemm.h"

#define PROBE_MIN_RUNS 3
#define PROBE_S        15e-3 /* at least, all runs */

/* Buffers for GEMMs of at most m rows against one expert (inputs zero: no denormals). */
typedef struct {
    float *a, *act, *g, *out, *panel;
} probe_bufs_t;

static void bufs_free(probe_bufs_t *b)
{
    free(b->a);
    free(b->act);
    free(b->g);
    free(b->out);
    free(b->panel);
}

static incmoe_status_t bufs_alloc(const cpu_state_t *cs, size_t m, probe_bufs_t *b)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I;
    b->a = calloc(m * H, sizeof(float));
    b->act = calloc(m * I, sizeof(float));
    b->g = malloc(m * I * sizeof(float));
    b->out = malloc(m * H * sizeof(float));
    b->panel = malloc(cpu_gemm_scratch_floats(m, H > I ? H : I) * sizeof(float));
    if (b->a == NULL || b->act == NULL || b->g == NULL || b->out == NULL || b->panel == NULL) {
        bufs_free(b);
        return INCMOE_ERR_NO_MEMORY;
    }
    return INCMOE_OK;
}

/* Gate, up and down of local expert le over m rows. */
static void expert_gemms(const cpu_state_t *cs, probe_bufs_t *b, int le, size_t m)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I;
    const uint8_t *wg = (const uint8_t *)cs->w_gu + (size_t)le * cs->gu_elems * cs->esize;
    const uint8_t *wu = wg + cs->gu_elems / 2 * cs->esize;
    const uint8_t *wd = (const uint8_t *)cs->w_down + (size_t)le * cs->d_elems * cs->esize;
    cpu_gemm_a_t a;
    cpu_gemm_prepare(&a, m, H, b->a, H, cs->dtype, b->panel);
    cpu_gemm_packed(0, I, &a, wg, cs->dtype, b->g, I, b->panel);
    cpu_gemm_packed(0, I, &a, wu, cs->dtype, b->g, I, b->panel);
    cpu_gemm_prepare(&a, m, I, b->act, I, cs->dtype, b->panel);
    cpu_gemm_packed(0, H, &a, wd, cs->dtype, b->out, H, b->panel);
}

/* The tile and the pass in turn until PROBE_S passed, so whatever else runs on the cores
   (the other ranks' probes) falls on both alike; each one's fastest run (a run that was
   preempted only took longer). */
static void probe_runs(const cpu_state_t *cs, probe_bufs_t *b, double *tile_p, double *pass_p)
{
    double tile = 1e30, pass = 1e30, start = inc_now_s();
    int n = 0;
    do {
        double t0 = inc_now_s();
        expert_gemms(cs, b, 0, MOE_FFN_GEMM_ROWS);
        double t1 = inc_now_s();
        for (int le = 0; le < cs->n_local; le++)
            expert_gemms(cs, b, le, 1);
        double t2 = inc_now_s();
        tile = t1 - t0 < tile ? t1 - t0 : tile;
        pass = t2 - t1 < pass ? t2 - t1 : pass;
    } while (++n < PROBE_MIN_RUNS || inc_now_s() - start < PROBE_S);
    *tile_p = tile;
    *pass_p = pass;
}

incmoe_status_t ffn_probe(const cpu_state_t *cs, double *flop_s_p, double *pass_s_p)
{
    *flop_s_p = *pass_s_p = 0;
    if (cs->n_local < 1 || cs->H < 1 || cs->I < 1)
        return INCMOE_OK;
    probe_bufs_t b = {0};
    incmoe_status_t st = bufs_alloc(cs, MOE_FFN_GEMM_ROWS, &b);
    if (st != INCMOE_OK)
        return st;
    double tile, pass;
    probe_runs(cs, &b, &tile, &pass);
    bufs_free(&b);
    *flop_s_p = tile / ((double)MOE_FFN_GEMM_ROWS * 6.0 * cs->H * cs->I);
    *pass_s_p = pass;
    return INCMOE_OK;
}
