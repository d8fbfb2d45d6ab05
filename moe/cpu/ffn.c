/*
 * ffn.c - the expert FFNs of a band on the CPU (paper section 3.5), run by the compute
 * workers as one team.
 *
 * A band's row list is taken in chunks (as many rows as the shared buffers hold).  Per
 * chunk every worker derives the same plan (ffn_plan.c: each local expert's rows), then
 *   1. for every local expert, gate and up of its worker's columns of I over all the
 *      expert's rows, and SwiGLU into the shared act;
 *   2. a barrier (every column of act is written);
 *   3. for every local expert, the down projection of its worker's columns of H, added
 *      router-weighted into acc, experts in ascending order; then those columns of each
 *      row stored: into the reduce buffer Z, or kept in fp32 as this rank's own partial in
 *      pipelined mode.
 * Everything accumulates in fp32 whatever the datatype; each row is rounded to the
 * datatype once, when it is stored.  The next chunk writes the other act, so a fast worker
 * starts it while a slow one still reads this one; the barrier of that next chunk is
 * what keeps the fast one from writing this act again before the slow one is done.
 */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#include "cpu/cpu.h"
#include "cpu/elem.h"
#include "cpu/gemm.h"
#include "cpu/swiglu.h"

incmoe_status_t ffn_weights_load(cpu_state_t *cs, const incmoe_moe_params_t *p, size_t esize)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I, nl = (size_t)cs->n_local;
    cs->dtype = p->dtype;
    cs->esize = esize;
    cs->gu_elems = 2 * cpu_gemm_packed_elems(I, H, p->dtype);
    cs->d_elems = cpu_gemm_packed_elems(H, I, p->dtype);
    cs->w_gu = malloc((nl > 0 ? nl : 1) * cs->gu_elems * esize);
    cs->w_down = malloc((nl > 0 ? nl : 1) * cs->d_elems * esize);
    if (cs->w_gu == NULL || cs->w_down == NULL)
        return INCMOE_ERR_NO_MEMORY;
    const size_t mat = I * H * esize;
    for (size_t le = 0; le < nl; le++) {
        uint8_t *gu = (uint8_t *)cs->w_gu + le * cs->gu_elems * esize;
        cpu_gemm_pack(gu, (const uint8_t *)p->w_gate + le * mat, I, H, H, p->dtype);
        cpu_gemm_pack(gu + cs->gu_elems / 2 * esize, (const uint8_t *)p->w_up + le * mat, I, H, H,
                      p->dtype);
        cpu_gemm_pack((uint8_t *)cs->w_down + le * cs->d_elems * esize,
                      (const uint8_t *)p->w_down + le * mat, H, I, I, p->dtype);
    }
    return INCMOE_OK;
}

incmoe_status_t ffn_team_create(cpu_state_t *cs, int E, int slots, const int32_t *owner, int rank,
                                int k, size_t max_rows)
{
    ffn_team_t *t = &cs->team;
    const size_t H = (size_t)cs->H, I = (size_t)cs->I;
    t->kk = k < cs->n_local ? k : cs->n_local;
    if (t->kk < 1)
        t->kk = 1;
    /* As many rows as MOE_FFN_CHUNK_BYTES holds, never fewer than one GEMM's worth. */
    size_t per_row = (2 * (size_t)t->kk * I + H) * sizeof(float);
    size_t chunk = MOE_FFN_CHUNK_BYTES / per_row;
    if (chunk < MOE_FFN_GEMM_ROWS)
        chunk = MOE_FFN_GEMM_ROWS;
    t->chunk = chunk < max_rows ? chunk : (max_rows > 0 ? max_rows : 1);
    const size_t ids = (size_t)E * (size_t)slots;
    t->le_of = malloc(ids * sizeof(int32_t));
    t->act[0] = malloc(t->chunk * (size_t)t->kk * I * sizeof(float));
    t->act[1] = malloc(t->chunk * (size_t)t->kk * I * sizeof(float));
    t->acc = malloc(t->chunk * H * sizeof(float));
    if (t->le_of == NULL || t->act[0] == NULL || t->act[1] == NULL || t->acc == NULL)
        return INCMOE_ERR_NO_MEMORY;
    for (size_t id = 0; id < ids; id++)
        t->le_of[id] = -1;
    /* A wire id e + E * slot is this rank's to serve where its slot's replica is here. */
    for (int le = 0; le < cs->n_local; le++)
        for (int slot = 0; slot < slots; slot++) {
            size_t id = (size_t)cs->local_ids[le] + (size_t)E * (size_t)slot;
            if (owner == NULL ? slot == 0 : owner[id] == rank)
                t->le_of[id] = le;
        }
    return INCMOE_OK;
}

void ffn_team_destroy(cpu_state_t *cs)
{
    for (int i = 0; i < INCMOE_MOE_MAX_WORKERS; i++)
        ffn_scratch_free(&cs->scratch[i]);
    free(cs->team.le_of);
    free(cs->team.act[0]);
    free(cs->team.act[1]);
    free(cs->team.acc);
    memset(&cs->team, 0, sizeof(cs->team));
}

static incmoe_status_t scratch_alloc(const cpu_state_t *cs, ffn_scratch_t *s)
{
    const size_t m = MOE_FFN_GEMM_ROWS, H = (size_t)cs->H, I = (size_t)cs->I;
    const size_t chunk = cs->team.chunk, hits = chunk * (size_t)cs->team.kk;
    s->a = malloc(m * H * sizeof(float));
    s->g = malloc(m * I * sizeof(float));
    s->u = malloc(m * I * sizeof(float));
    s->out = malloc(m * H * sizeof(float));
    s->panel = malloc(cpu_gemm_scratch_floats(m, H > I ? H : I) * sizeof(float));
    s->rows = malloc(chunk * sizeof(uint8_t *));
    s->blk = malloc(chunk * sizeof(int));
    s->idx = malloc(chunk * sizeof(size_t));
    s->off = malloc(((size_t)cs->n_local + 1) * sizeof(size_t));
    s->hit = malloc(hits * sizeof(int32_t));
    s->hitw = malloc(hits * sizeof(float));
    if (!s->a || !s->g || !s->u || !s->out || !s->panel || !s->rows || !s->blk || !s->idx ||
        !s->off || !s->hit || !s->hitw) {
        ffn_scratch_free(s);
        return INCMOE_ERR_NO_MEMORY;
    }
    return INCMOE_OK;
}

incmoe_status_t ffn_scratch_reserve(cpu_state_t *cs, int C)
{
    for (int c = 0; c < C && c < INCMOE_MOE_MAX_WORKERS; c++) {
        if (cs->scratch[c].a != NULL)
            continue;
        incmoe_status_t st = scratch_alloc(cs, &cs->scratch[c]);
        if (st != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}

void ffn_scratch_free(ffn_scratch_t *s)
{
    free(s->a);
    free(s->g);
    free(s->u);
    free(s->out);
    free(s->panel);
    free(s->rows);
    free(s->blk);
    free(s->idx);
    free(s->off);
    free(s->hit);
    free(s->hitw);
    memset(s, 0, sizeof(*s));
}

void ffn_team_reset(cpu_state_t *cs)
{
    memset(cs->team.step, 0, sizeof(cs->team.step));
    for (int c = 0; c < INCMOE_MOE_MAX_WORKERS; c++)
        cs->scratch[c].chunks = 0;
}

/* Worker c's share [*lo, *hi) of n columns, on multiples of 16 where n allows. */
static void team_split(size_t n, int C, int c, size_t *lo, size_t *hi)
{
    size_t units = (n + 15) / 16;
    *lo = units * (size_t)c / (size_t)C * 16;
    *hi = units * ((size_t)c + 1) / (size_t)C * 16;
    *lo = *lo < n ? *lo : n;
    *hi = *hi < n ? *hi : n;
}

/* Every worker of the team at barrier number s (counted from this forward's start). */
static incmoe_status_t team_sync(const moe_ctx_t *x, cpu_state_t *cs, int c, uint64_t s)
{
    incmoe_counter_publish(&cs->team.step[c], s, &x->cnt->bell);
    for (int o = 0; o < x->C; o++) {
        incmoe_status_t st = incmoe_counter_wait(&cs->team.step[o], s, &x->cnt->bell,
                                                 &x->cnt->abort, NULL, x->timeout_ms);
        if (st != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}

/* Hits [h0, h0 + m) of the chunk, rows widened to fp32 into s->a. */
static void gather_rows(const moe_ctx_t *x, ffn_scratch_t *s, size_t h0, size_t m)
{
    for (size_t i = 0; i < m; i++)
        cpu_widen(s->a + i * (size_t)x->H, s->rows[s->hit[h0 + i]], (size_t)x->H,
                  (incmoe_dtype_t)x->dtype);
}

/* Step 1 for local expert le: gate and up of columns [lo, hi) of I, SwiGLU into act. */
static void expert_up(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, int le,
                      float *act, size_t lo, size_t hi)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I, n = hi - lo;
    const uint8_t *wg = (const uint8_t *)cs->w_gu + (size_t)le * cs->gu_elems * cs->esize;
    const uint8_t *wu = wg + cs->gu_elems / 2 * cs->esize;
    for (size_t h0 = s->off[le]; h0 < s->off[le + 1]; h0 += MOE_FFN_GEMM_ROWS) {
        size_t m = s->off[le + 1] - h0;
        m = m < MOE_FFN_GEMM_ROWS ? m : MOE_FFN_GEMM_ROWS;
        cpu_gemm_a_t a;
        gather_rows(x, s, h0, m);
        cpu_gemm_prepare(&a, m, H, s->a, H, cs->dtype, s->panel);
        cpu_gemm_packed(lo, hi, &a, wg, cs->dtype, s->g, n, s->panel);
        cpu_gemm_packed(lo, hi, &a, wu, cs->dtype, s->u, n, s->panel);
        for (size_t i = 0; i < m; i++)
            cpu_swiglu(act + (h0 + i) * I + lo, s->g + i * n, s->u + i * n, n);
    }
}

/* Step 3 for local expert le: down projection of columns [lo, hi) of H, weighted into acc. */
static void expert_down(const cpu_state_t *cs, ffn_scratch_t *s, int le, const float *act,
                        size_t lo, size_t hi)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I, n = hi - lo;
    const uint8_t *wd = (const uint8_t *)cs->w_down + (size_t)le * cs->d_elems * cs->esize;
    for (size_t h0 = s->off[le]; h0 < s->off[le + 1]; h0 += MOE_FFN_GEMM_ROWS) {
        size_t m = s->off[le + 1] - h0;
        m = m < MOE_FFN_GEMM_ROWS ? m : MOE_FFN_GEMM_ROWS;
        cpu_gemm_a_t a;
        cpu_gemm_prepare(&a, m, I, act + h0 * I, I, cs->dtype, s->panel);
        cpu_gemm_packed(lo, hi, &a, wd, cs->dtype, s->out, n, s->panel);
        for (size_t i = 0; i < m; i++) {
            float *acc = cs->team.acc + (size_t)s->hit[h0 + i] * H + lo;
            const float *o = s->out + i * n;
            const float w = s->hitw[h0 + i];
            for (size_t j = 0; j < n; j++)
                acc[j] += w * o[j];
        }
    }
}

/* Columns [lo, hi) of the chunk's m rows' sums, stored where each row's result goes. */
static void store_rows(const moe_ctx_t *x, const cpu_state_t *cs, const ffn_scratch_t *s, band_t b,
                       size_t m, size_t lo, size_t hi)
{
    const size_t H = (size_t)x->H, n = hi - lo;
    const incmoe_dtype_t dtype = (incmoe_dtype_t)x->dtype;
    for (size_t i = 0; i < m; i++) {
        const float *acc = cs->team.acc + i * H + lo;
        if (x->masked) {
            /* Its own rows too: the combine adds this rank's partial last. */
            inc_dtype_from_float(partial_row(x, b, s->idx[i]) + lo * x->esize, acc, n, dtype);
        } else if (x->pipelined && s->blk[i] == x->rank) {
            /* Rounded to the datatype as the baseline's own partial is, so
               both modes reduce the same numbers (bitwise alike in-network). */
            elem_round(x->own + s->idx[i] * H + lo, acc, n, dtype);
        } else
            inc_dtype_from_float(z_row(x, (size_t)s->blk[i], s->idx[i]) + lo * x->esize, acc, n,
                                 dtype);
    }
}

/* One chunk: list positions [p, p + n) of band j. */
static incmoe_status_t ffn_chunk(const moe_ctx_t *x, cpu_state_t *cs, int c, size_t j, band_t b,
                                 size_t p, size_t n)
{
    ffn_scratch_t *s = &cs->scratch[c];
    const size_t H = (size_t)x->H;
    float *act = cs->team.act[s->chunks % 2];
    size_t lo, hi, m = ffn_plan_chunk(x, cs, s, j, b, p, n);
    team_split((size_t)cs->I, x->C, c, &lo, &hi);
    if (lo < hi)
        for (int le = 0; le < cs->n_local; le++)
            expert_up(x, cs, s, le, act, lo, hi);
    incmoe_status_t st = team_sync(x, cs, c, ++s->chunks);
    if (st != INCMOE_OK)
        return st;
    team_split(H, x->C, c, &lo, &hi);
    if (lo == hi)
        return INCMOE_OK;
    for (size_t i = 0; i < m; i++)
        memset(cs->team.acc + i * H + lo, 0, (hi - lo) * sizeof(float));
    for (int le = 0; le < cs->n_local; le++)
        expert_down(cs, s, le, act, lo, hi);
    store_rows(x, cs, s, b, m, lo, hi);
    return INCMOE_OK;
}

incmoe_status_t ffn_band(const moe_ctx_t *x, cpu_state_t *cs, int c, size_t j, band_t b)
{
    const size_t n = plan_list_rows(x, j, b), chunk = cs->team.chunk;
    for (size_t p = 0; p < n; p += chunk) {
        incmoe_status_t st = ffn_chunk(x, cs, c, j, b, p, n - p < chunk ? n - p : chunk);
        if (st != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}
