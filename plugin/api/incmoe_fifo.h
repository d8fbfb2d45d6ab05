/*
 * incmoe_fifo.h - device-side posting: a lock-free descriptor FIFO plus
 * cumulative completion counters (the model is MSCCL++'s PortChannel).
 *
 * A producer (a CPU role worker now, a GPU thread block later) writes a
 * fixed-size descriptor "post an AllGather / ReduceScatter / barrier of this
 * byte range and layout" into the FIFO and gets back a ticket; it later waits
 * until the completion counter of that stream reaches the ticket.  A proxy
 * thread owning the communicator drains the FIFO in order, posts each
 * collective through the public client API and publishes, with release
 * semantics, how many collectives of each stream have completed.
 *
 * The producer side takes no lock: a slot is claimed with one atomic
 * compare-and-swap and handed over with one release store, and the FIFO and
 * its counters live in one plain block of memory that could be host-mapped
 * for a device.
 *
 * Ordering: the proxy posts in FIFO order, so collectives of one stream reach
 * the communicator in the order their pushes completed.  Pushes of one stream
 * must therefore be serialised by the caller (they must be anyway, since every
 * rank has to post a stream in the same order); different streams may be
 * pushed concurrently from different threads.
 */
#ifndef INCMOE_FIFO_H
#define INCMOE_FIFO_H

#include <stdint.h>

#include "incmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    INCMOE_FIFO_OP_ALLGATHER = 1,
    INCMOE_FIFO_OP_REDUCESCATTER = 2,
    INCMOE_FIFO_OP_BARRIER = 3,
} incmoe_fifo_op_t;

/*
 * One trigger, 64 bytes, no pointers that need fixing up across address
 * spaces except the registration handles and the valid[] array, which must
 * stay alive (unchanged) until the collective has been posted (the client
 * copies valid[] at post time; waiting for the ticket is always enough).
 */
typedef struct {
    uint32_t op;      /* incmoe_fifo_op_t */
    uint16_t dtype;   /* incmoe_dtype_t (ReduceScatter) */
    uint16_t redop;   /* incmoe_redop_t (ReduceScatter) */
    uint64_t send_mr; /* (incmoe_mr_t *) */
    uint64_t send_offset;
    uint64_t recv_mr; /* (incmoe_mr_t *) */
    uint64_t recv_offset;
    uint64_t block_stride; /* incmoe_layout_t */
    uint64_t offset;
    uint64_t length;
} incmoe_fifo_desc_t;

/* valid[] is carried beside the descriptor so the descriptor stays 64 bytes. */
typedef struct {
    incmoe_fifo_desc_t desc;
    const size_t *valid; /* incmoe_layout_t.valid, may be NULL */
} incmoe_fifo_trigger_t;

typedef struct incmoe_fifo incmoe_fifo_t;

/* capacity: slots, a power of two >= 2.  Starts the proxy thread. */
incmoe_status_t incmoe_fifo_create(incmoe_comm_t *comm, uint32_t capacity, incmoe_fifo_t **fifo_p);
/* Waits (bounded by the communicator's failure detection) for posted work, stops the proxy. */
incmoe_status_t incmoe_fifo_destroy(incmoe_fifo_t *fifo);

/*
 * Producer side, lock-free.  *ticket_p: the number of collectives of the
 * trigger's stream pushed so far including this one; the collective is done
 * once incmoe_fifo_completed(stream) >= ticket.  Waits (bounded by timeout_ms)
 * while the FIFO is full.
 */
incmoe_status_t incmoe_fifo_push(incmoe_fifo_t *fifo, const incmoe_fifo_trigger_t *trigger,
                                 uint64_t *ticket_p, int timeout_ms);

/* The stream a descriptor's op belongs to. */
incmoe_stream_t incmoe_fifo_op_stream(incmoe_fifo_op_t op);

/* Collectives of the stream completed so far (acquire). */
uint64_t incmoe_fifo_completed(incmoe_fifo_t *fifo, incmoe_stream_t stream);

/* Waits until the stream's counter reaches ticket, the proxy failed, or timeout_ms passed. */
incmoe_status_t incmoe_fifo_wait(incmoe_fifo_t *fifo, incmoe_stream_t stream, uint64_t ticket,
                                 int timeout_ms);

/* The first error the proxy hit (INCMOE_OK if none). */
incmoe_status_t incmoe_fifo_error(incmoe_fifo_t *fifo);

#ifdef __cplusplus
}
#endif
#endif
