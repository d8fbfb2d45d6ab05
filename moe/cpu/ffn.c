/*
 * ffn_cpu.c - the expert FFNs of a band on the CPU (paper section 3.5).
 *
 * Per tile of the band's rows and per local expert: select the rows routed to
 * the expert, widen them to fp32, one GEMM against the concatenated gate/up
 * weights, SwiGLU, one GEMM against the down weights, and a router-weighted
 * accumulation.  Everything accumulates in fp32 whatever the datatype; each
 * row is rounded to the datatype once, when it is stored into the reduce
 * buffer Z (or kept in fp32 as this rank's own partial in pipelined mode).
 */
#include <cblas.h>
/* cblas.h pulls in complex.h, whose I macro would shadow the FFN's I dimension. */
#undef I
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/elem.h"
#include "plan.h"

incmoe_status_t ffn_scratch_alloc(const cpu_state_t *cs, ffn_scratch_t *s)
{
    size_t t = MOE_FFN_TILE_ROWS, H = (size_t)cs->H, I = (size_t)cs->I;
    memset(s, 0, sizeof(*s));
    s->a = malloc(t * H * sizeof(float));
    s->h = malloc(t * 2 * I * sizeof(float));
    s->act = malloc(t * I * sizeof(float));
    s->out = malloc(t * H * sizeof(float));
    s->acc = malloc(t * H * sizeof(float));
    s->sel = malloc(t * sizeof(int32_t));
    s->selw = malloc(t * sizeof(float));
    if (!s->a || !s->h || !s->act || !s->out || !s->acc || !s->sel || !s->selw) {
        ffn_scratch_free(s);
        return INCMOE_ERR_NO_MEMORY;
    }
    return INCMOE_OK;
}

void ffn_scratch_free(ffn_scratch_t *s)
{
    free(s->a);
    free(s->h);
    free(s->act);
    free(s->out);
    free(s->acc);
    free(s->sel);
    free(s->selw);
    memset(s, 0, sizeof(*s));
}

incmoe_status_t ffn_weights_load(cpu_state_t *cs, const incmoe_moe_params_t *p, size_t esize)
{
    const size_t H = (size_t)cs->H, I = (size_t)cs->I;
    size_t nl = (size_t)(cs->n_local > 0 ? cs->n_local : 1);
    cs->w_gu = malloc(nl * 2 * I * H * sizeof(float));
    cs->w_down = malloc(nl * H * I * sizeof(float));
    if (cs->w_gu == NULL || cs->w_down == NULL)
        return INCMOE_ERR_NO_MEMORY;
    for (int le = 0; le < cs->n_local; le++) {
        const uint8_t *g = (const uint8_t *)p->w_gate + (size_t)le * I * H * esize;
        const uint8_t *u = (const uint8_t *)p->w_up + (size_t)le * I * H * esize;
        const uint8_t *d = (const uint8_t *)p->w_down + (size_t)le * H * I * esize;
        inc_dtype_to_float(cs->w_gu + (size_t)le * 2 * I * H, g, I * H, p->dtype);
        inc_dtype_to_float(cs->w_gu + (size_t)le * 2 * I * H + I * H, u, I * H, p->dtype);
        inc_dtype_to_float(cs->w_down + (size_t)le * H * I, d, H * I, p->dtype);
    }
    return INCMOE_OK;
}

/* One local expert over the m selected rows of a tile, weighted into acc. */
static void ffn_expert(const cpu_state_t *cs, incmoe_dtype_t dtype, ffn_scratch_t *s, int le,
                       uint8_t *const *rows, size_t m)
{
    const int H = cs->H, I = cs->I;
    for (size_t i = 0; i < m; i++)
        inc_dtype_to_float(s->a + i * H, rows[s->sel[i]], (size_t)H, dtype);
    const float *wgu = cs->w_gu + (size_t)le * 2 * I * H;
    const float *wd = cs->w_down + (size_t)le * H * I;
    /* [m x 2I] = [m x H] * [2I x H]^T: gate and up in one GEMM */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, 2 * I, H, 1.0f, s->a, H, wgu, H,
                0.0f, s->h, 2 * I);
    for (size_t i = 0; i < m; i++) {
        const float *g = s->h + i * 2 * I, *u = g + I;
        float *a = s->act + i * I;
        for (int j = 0; j < I; j++)
            a[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
    /* [m x H] = [m x I] * [H x I]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, H, I, 1.0f, s->act, I, wd, I, 0.0f,
                s->out, H);
    for (size_t i = 0; i < m; i++) {
        float *acc = s->acc + (size_t)s->sel[i] * H;
        const float *o = s->out + i * H;
        const float w = s->selw[i];
        for (int j = 0; j < H; j++)
            acc[j] += w * o[j];
    }
}

/* The rows of list positions [p, p + tile) of band j: full routing, every one (from block
   *sblk, row *pos on); masked, the received ones (from received row *ri on).  Their rows,
   blocks (-1: received) and indices (row in the block, or received row) into the arrays;
   returns how many. */
static size_t tile_rows(const moe_ctx_t *x, size_t j, band_t b, size_t p, size_t tile, int *sblk,
                        size_t *pos, size_t *ri, uint8_t **rows, int *blk, size_t *idx)
{
    if (x->masked) {
        size_t end = plan_recv_lower(x, j, b, p + tile), m = end - *ri;
        for (size_t i = 0; i < m; i++) {
            blk[i] = -1;
            idx[i] = *ri + i;
            rows[i] = recv_row(x, b, idx[i]);
        }
        *ri = end;
        return m;
    }
    for (size_t i = 0; i < tile; i++) {
        while (*pos >= band_valid_rows(b, x->counts[*sblk])) {
            *pos = 0;
            (*sblk)++;
        }
        blk[i] = *sblk;
        idx[i] = b.start + *pos;
        rows[i] = xg_row(x, (size_t)*sblk, b.start + *pos);
        (*pos)++;
    }
    return tile;
}

void ffn_band_rows(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, size_t j, band_t b,
                   size_t first, size_t n)
{
    const size_t H = (size_t)x->H;
    const size_t hb = H * x->esize;
    const incmoe_dtype_t dtype = (incmoe_dtype_t)x->dtype;
    uint8_t *rows[MOE_FFN_TILE_ROWS];
    int blk[MOE_FFN_TILE_ROWS];
    size_t idx[MOE_FFN_TILE_ROWS];

    /* Where list position `first` is: its block and row (full routing), or the first received
       row at or after it (masked). */
    int sblk = 0;
    size_t pos = first, ri = 0;
    if (x->masked)
        ri = plan_recv_lower(x, j, b, first);
    else
        while (sblk < x->N && pos >= band_valid_rows(b, x->counts[sblk]))
            pos -= band_valid_rows(b, x->counts[sblk++]);

    for (size_t done = 0; done < n;) {
        size_t tile = n - done < MOE_FFN_TILE_ROWS ? n - done : MOE_FFN_TILE_ROWS;
        size_t m_rows = tile_rows(x, j, b, first + done, tile, &sblk, &pos, &ri, rows, blk, idx);
        memset(s->acc, 0, m_rows * H * sizeof(float));
        for (int le = 0; le < cs->n_local; le++) {
            const int32_t gid = cs->local_ids[le];
            size_t m = 0;
            for (size_t i = 0; i < m_rows; i++) {
                int32_t ids[64];
                float w[64];
                memcpy(ids, rows[i] + hb, (size_t)x->k * 4);
                memcpy(w, rows[i] + hb + (size_t)x->k * 4, (size_t)x->k * 4);
                for (int kk = 0; kk < x->k; kk++) {
                    if (ids[kk] == gid) {
                        s->sel[m] = (int32_t)i;
                        s->selw[m] = w[kk];
                        m++;
                        break; /* ids of a token are distinct (checked on entry) */
                    }
                }
            }
            if (m > 0)
                ffn_expert(cs, dtype, s, le, rows, m);
        }
        for (size_t i = 0; i < m_rows; i++) {
            const float *acc = s->acc + i * H;
            if (x->masked) {
                /* Its own rows too: the combine adds this rank's partial last. */
                inc_dtype_from_float(partial_row(x, b, idx[i]), acc, H, dtype);
            } else if (x->pipelined && blk[i] == x->rank) {
                /* Rounded to the datatype as the baseline's own partial is, so
                   both modes reduce the same numbers (bitwise alike in-network). */
                elem_round(x->own + idx[i] * H, acc, H, dtype);
            } else
                inc_dtype_from_float(z_row(x, (size_t)blk[i], idx[i]), acc, H, dtype);
        }
        done += tile;
    }
}
