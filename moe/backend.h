/*
 * backend.h - what a backend provides: where the weights and buffers live and
 * who runs the role loops (threads of the CPU backend, thread blocks of one
 * persistent kernel for a GPU backend).  The layer (layer.c) checks
 * arguments, exchanges headers and fills the plan in L->ctx; the backend does
 * the rest through this table.
 */
#ifndef INCMOE_MOE_BACKEND_H
#define INCMOE_MOE_BACKEND_H

#include "api/incmoe_moe.h"

typedef struct {
    const char *name;
    /* Places the local experts' weights (p->w_*, L->local_ids order) and the
       gather / reduce buffers, registers the buffers with L->comm, creates
       the FIFO and the counters, and fills the buffer, counter and FIFO
       fields of L->ctx.  On failure leaves what it made for destroy. */
    incmoe_status_t (*create)(incmoe_moe_t *L, const incmoe_moe_params_t *p);
    /* Runs the roles of the plan in L->ctx.  A backend whose forward is
       stream-ordered returns once the work is enqueued; the CPU backend
       returns once every role finished (and fills the baseline's phase
       timings).  Failures inside the loops are left in L->ctx.cnt for the
       layer to report. */
    incmoe_status_t (*forward)(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f);
    /* Frees what create made (also after a failed create); returns the FIFO's
       first error. */
    incmoe_status_t (*destroy)(incmoe_moe_t *L);
} moe_backend_ops_t;

extern const moe_backend_ops_t moe_cpu_backend;

#endif
