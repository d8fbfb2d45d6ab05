/*
 * prims.h - the CPU backend's primitives for the role loops of roles.h:
 * threads wait on counters through the FIFO library's host counter wait
 * (spin, then sleep on the bell), post through the FIFO's host push, and run
 * the FFN as one team of the compute workers over OpenBLAS (ffn.c).
 */
#ifndef INCMOE_MOE_CPU_PRIMS_H
#define INCMOE_MOE_CPU_PRIMS_H

#include <string.h>

#include "plan.h"

#include "cpu/cpu.h"
#include "cpu/elem.h"

static inline incmoe_status_t prim_wait_geq(const moe_ctx_t *x, const uint64_t *c, uint64_t v)
{
    return incmoe_counter_wait(c, v, &x->cnt->bell, &x->cnt->abort, NULL, x->timeout_ms);
}

static inline void prim_publish(const moe_ctx_t *x, uint64_t *c, uint64_t v)
{
    incmoe_counter_publish(c, v, &x->cnt->bell);
}

static inline incmoe_status_t prim_post(const moe_ctx_t *x, const incmoe_fifo_trigger_t *t,
                                        uint64_t *ticket)
{
    return incmoe_fifo_push((incmoe_fifo_t *)x->host_fifo, t, ticket, x->timeout_ms);
}

/* Gives up on the layer's abort as well as on the proxy's error. */
static inline incmoe_status_t prim_wait_ticket(const moe_ctx_t *x, int stream, uint64_t ticket)
{
    return incmoe_counter_wait(&x->fifo.completed[stream], ticket, x->fifo.bell, &x->cnt->abort,
                               x->fifo.error, x->timeout_ms);
}

static inline void prim_abort(const moe_ctx_t *x, incmoe_status_t st, moe_fail_t what, size_t band)
{
    int32_t expected = 0;
    if (st == INCMOE_OK)
        st = INCMOE_ERR_CLOSED;
    /* acq_rel: the winner's record of where is ordered before waiters see the abort */
    if (incmoe_atomic_cas_acq_rel32(&x->cnt->abort, &expected, (int32_t)st)) {
        __atomic_store_n(&x->cnt->fail_what, (int32_t)what, __ATOMIC_RELAXED);
        __atomic_store_n(&x->cnt->fail_band, (uint64_t)band, __ATOMIC_RELAXED);
    }
    /* Waiters sleep on the layer's bell or the FIFO's: wake both at once. */
    incmoe_counter_ring_all(&x->cnt->bell);
    incmoe_counter_ring_all(x->fifo.bell);
}

/* Copies this rank's rows b of x, ids and weights into its gather block (masked: into xs,
   and their destination sets): hidden state, then the routing (ids, weights) the other ranks
   need. */
static inline void prim_pack_rows(const moe_ctx_t *x, band_t b)
{
    size_t hb = (size_t)x->H * x->esize, kb = (size_t)x->k * 4;
    for (size_t t = b.start; t < b.start + b.rows; t++) {
        const int32_t *ids = x->ids + t * (size_t)x->k;
        uint8_t *dst = x->masked ? x->xs + t * x->grow : xg_row(x, (size_t)x->rank, t);
        memcpy(dst, (const uint8_t *)x->x + t * hb, hb);
        memcpy(dst + hb, ids, kb);
        memcpy(dst + hb + kb, x->w + t * (size_t)x->k, kb);
        if (x->masked)
            plan_token_set(x->owner, ids, x->k, x->sets + t * x->words, x->words);
    }
}

/* The compute workers run each band as one team (ffn.c). */
static inline int prim_ffn_band(const moe_ctx_t *x, int c, size_t j, band_t b)
{
    incmoe_status_t st = ffn_band(x, (cpu_state_t *)x->be, c, j, b);
    if (st != INCMOE_OK) {
        prim_abort(x, st, MOE_FAIL_WAIT_FFN, j);
        return -1;
    }
    return 0;
}

/* The root's local reduction: own rows of part += own partial (fp32), in place in Z. */
static inline void prim_local_reduce(const moe_ctx_t *x, band_t part)
{
    size_t rows = band_valid_rows(part, x->counts[x->rank]);
    for (size_t t = part.start; t < part.start + rows; t++)
        elem_add_float(z_row(x, (size_t)x->rank, t), x->own + t * (size_t)x->H, (size_t)x->H,
                       (incmoe_dtype_t)x->dtype);
}

#include "roles.h"

#endif
