/*
 * ffn_plan.c - which rows a chunk of a band's row list holds, and which of them each local
 * expert takes.  Every compute worker derives the same plan from the same inputs, so the
 * team needs no barrier before its first GEMM.
 */
#include <string.h>

#include "plan.h"

#include "cpu/cpu.h"

/* The rows of list positions [p, p + n) of band j: full routing, every one; masked, the
   received ones.  Their rows, blocks (-1: received) and indices (row in the block, or
   received row) into s; returns how many. */
static size_t plan_rows(const moe_ctx_t *x, ffn_scratch_t *s, size_t j, band_t b, size_t p,
                        size_t n)
{
    if (x->masked) {
        size_t ri = plan_recv_lower(x, j, b, p), m = plan_recv_lower(x, j, b, p + n) - ri;
        for (size_t i = 0; i < m; i++) {
            s->blk[i] = -1;
            s->idx[i] = ri + i;
            s->rows[i] = recv_row(x, b, ri + i);
        }
        return m;
    }
    /* Where position p is: its block and row. */
    int blk = 0;
    size_t pos = p;
    while (blk < x->N && pos >= band_valid_rows(b, x->counts[blk]))
        pos -= band_valid_rows(b, x->counts[blk++]);
    for (size_t i = 0; i < n; i++) {
        while (pos >= band_valid_rows(b, x->counts[blk])) {
            pos = 0;
            blk++;
        }
        s->blk[i] = blk;
        s->idx[i] = b.start + pos;
        s->rows[i] = xg_row(x, (size_t)blk, b.start + pos);
        pos++;
    }
    return n;
}

/* Counting sort of the rows' (row, local expert) hits by expert, rows ascending within. */
static void plan_group(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, size_t m)
{
    const size_t hb = (size_t)x->H * x->esize, kb = (size_t)x->k * 4;
    const int nl = cs->n_local;
    memset(s->off, 0, (size_t)(nl + 1) * sizeof(size_t));
    for (size_t i = 0; i < m; i++)
        for (int kk = 0; kk < x->k; kk++) {
            int32_t id;
            memcpy(&id, s->rows[i] + hb + (size_t)kk * 4, 4);
            int le = cs->team.le_of[id]; /* ids were checked on entry */
            if (le >= 0)
                s->off[le + 1]++;
        }
    for (int le = 0; le < nl; le++)
        s->off[le + 1] += s->off[le];
    /* off[le] runs ahead as hits are placed; shifted back below. */
    for (size_t i = 0; i < m; i++)
        for (int kk = 0; kk < x->k; kk++) {
            int32_t id;
            memcpy(&id, s->rows[i] + hb + (size_t)kk * 4, 4);
            int le = cs->team.le_of[id];
            if (le < 0)
                continue;
            size_t h = s->off[le]++;
            s->hit[h] = (int32_t)i;
            memcpy(&s->hitw[h], s->rows[i] + hb + kb + (size_t)kk * 4, 4);
        }
    for (int le = nl; le > 0; le--)
        s->off[le] = s->off[le - 1];
    s->off[0] = 0;
}

size_t ffn_plan_chunk(const moe_ctx_t *x, const cpu_state_t *cs, ffn_scratch_t *s, size_t j,
                      band_t b, size_t p, size_t n)
{
    size_t m = plan_rows(x, s, j, b, p, n);
    plan_group(x, cs, s, m);
    return m;
}
