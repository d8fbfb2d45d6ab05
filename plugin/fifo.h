/*
 * fifo.h - internals of the descriptor FIFO (public API in api/incmoe_fifo.h).
 *
 * The shared block (slots, producer tail, per-stream push tickets and
 * completion counters) comes from the allocator hook so a device can map it;
 * the proxy's private state sits beside it.  The transport behind the proxy is a
 * small table of two functions so the FIFO can be tested without a switch.
 */
#ifndef INCMOE_FIFO_INTERNAL_H
#define INCMOE_FIFO_INTERNAL_H

#include "base/wire.h"
#include "incmoe/incmoe_fifo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The streams a FIFO can carry: AllGather, ReduceScatter, barrier, dispatch, combine (and
   AllReduce's slot, which no op uses). */
#define FIFO_NSTREAMS ((int)INCMOE_STREAM_COMBINE + 1)

typedef struct {
    /* Post one collective; on success *req_p identifies it.  dispatch: for a combine, the
       request of the dispatch it names (completed); NULL otherwise. */
    incmoe_status_t (*post)(void *ctx, const incmoe_fifo_trigger_t *trigger,
                            const incmoe_req_t *dispatch, incmoe_req_t *req_p);
    /* Block (sleeping) until req completed or failed. */
    incmoe_status_t (*wait)(void *ctx, const incmoe_req_t *req);
    /* A dispatch whose wait returned INCMOE_OK or INCMOE_ERR_NO_MEMORY: its R and source
       table into the block (incmoe_dispatch_result), and one that failed released (nothing
       will combine it).  Returns incmoe_dispatch_result's status. */
    incmoe_status_t (*dispatch_result)(void *ctx, const incmoe_req_t *req,
                                       incmoe_fifo_dispatch_t *block);
} fifo_transport_t;

/* The transport of a real communicator (ctx is the incmoe_comm_t). */
extern const fifo_transport_t fifo_comm_transport;

incmoe_status_t fifo_create_full(const fifo_transport_t *transport, void *ctx,
                                 const incmoe_fifo_params_t *params, incmoe_fifo_t **fifo_p);
/* fifo_create_full with only the capacity set. */
incmoe_status_t fifo_create_with(const fifo_transport_t *transport, void *ctx, uint32_t capacity,
                                 incmoe_fifo_t **fifo_p);

#ifdef __cplusplus
}
#endif
#endif
