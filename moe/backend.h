/*
 * backend.h - what a backend provides: where the weights and buffers live and
 * who runs the role loops (threads of the CPU backend, thread blocks of one
 * persistent kernel for a GPU backend).  The layer (layer.c) checks
 * arguments, exchanges headers and fills the plan in L->ctx; the backend does
 * the rest through this table.
 */
#ifndef INCMOE_MOE_BACKEND_H
#define INCMOE_MOE_BACKEND_H

#include "incmoe/incmoe_moe.h"

typedef struct {
    const char *name;
    /* 1: x, ids and weights are device memory and the forward takes the
       caller's stream (INCMOE_MOE_FWD_STREAM); 0: host memory, no stream. */
    int device_inputs;
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
    /* Backends with device inputs: copies the n expert ids to host memory
       (behind the caller's stream) for the layer's argument checks and sets
       *host_p to the copy, valid until the next call.  NULL otherwise. */
    incmoe_status_t (*stage_ids)(incmoe_moe_t *L, const incmoe_moe_forward_params_t *f,
                                 const int32_t *ids, size_t n, const int32_t **host_p);
    /* One line on where things live (for incmoe_moe_backend_str); NULL: the name only. */
    int (*describe)(const incmoe_moe_t *L, char *buf, size_t len);
    /* Paths on other communicators (lanes.c).  lane_open registers the buffers create placed
       with comm and makes a FIFO on it (*lane_p: that state); lane_use points L->ctx's
       registrations and FIFO at a lane's (NULL: create's own, on L->comm); lane_close frees
       what lane_open made and returns the FIFO's first error.  NULL: the backend runs on the
       layer's communicator only. */
    incmoe_status_t (*lane_open)(incmoe_moe_t *L, incmoe_comm_t *comm, void **lane_p);
    void (*lane_use)(incmoe_moe_t *L, void *lane);
    incmoe_status_t (*lane_close)(incmoe_moe_t *L, void *lane);
    /* The decode step (decode.h) over the plan in L->ctx; NULL: the backend has none and
       every forward takes the bulk path.  decode_pack puts this rank's rows (its hidden
       states, expert ids and weights) and their destination sets where the dispatch sends
       them from; decode_experts runs the local experts on the rows received into their
       partial rows, and returns INCMOE_OK or why it gave up. */
    void (*decode_pack)(incmoe_moe_t *L);
    incmoe_status_t (*decode_experts)(incmoe_moe_t *L);
    /* The band model's view of the expert compute (bandmodel.h), timed at create: seconds
       per flop (6 H I a row) of one compute worker, and seconds of a band's pass over the
       local experts' weights (one row through each); 0 where not known.  NULL: the backend
       does not time it (the model's rate is INCMOE_MOE_GFLOPS's, its pass free). */
    incmoe_status_t (*ffn_probe)(incmoe_moe_t *L, double *flop_s_p, double *pass_s_p);
} moe_backend_ops_t;

extern const moe_backend_ops_t moe_cpu_backend;
#ifdef INCMOE_MOE_CUDA
extern const moe_backend_ops_t moe_cuda_backend;
#endif

#endif
