/*
 * submit.h - a collective being posted, on the caller's threads (post.c;
 * dc_post.c posts dispatch and combine through it): its range checks, its
 * record, its queueing for the proxy.  What code outside the client may ask
 * before posting is post.h.
 */
#ifndef INCMOE_SUBMIT_H
#define INCMOE_SUBMIT_H

#include "client.h"

/* Is [offset, offset+length) inside the region? */
int client_range_ok(const struct incmoe_mr *mr, size_t offset, size_t length);
/* A collective of the stream being posted, with its zeroed bytes[nranks]; NULL out of
   memory. */
coll_op_t *client_op_new(incmoe_comm_t *comm, incmoe_stream_t stream);
/* The regions are held (client_mr_hold): describe where op's data lies. */
void client_op_set_buffers(coll_op_t *op, size_t send_offset, size_t recv_offset);
/* Queue op for the proxy, first waiting (bounded) for room in its stream's window; the epoch
   is fixed here and *req_p filled.  On failure op is freed and nothing was posted. */
incmoe_status_t client_post_submit(incmoe_comm_t *comm, coll_op_t *op, incmoe_req_t *req_p);
/* A collective this rank cannot run (op, if not NULL, is freed): the job fails with the
   reason, so the other ranks do not wait for it.  Returns st. */
incmoe_status_t client_post_reject(incmoe_comm_t *comm, coll_op_t *op, incmoe_status_t st,
                                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
