/*
 * mr.h - registered memory (mr.c): a region and the holds of the collectives
 * using it.
 */
#ifndef INCMOE_MR_H
#define INCMOE_MR_H

#include "client.h"

struct incmoe_mr {
    struct incmoe_mr *next;
    char *base;
    size_t length;
    ucp_mem_h memh;
    unsigned holds; /* collectives (or posting calls) using the region, under comm->lock */
};

/* Hold both regions for a collective being posted; 0 if one is not registered here. */
int client_mr_hold(incmoe_comm_t *comm, coll_op_t *op, struct incmoe_mr *send_mr,
                   struct incmoe_mr *recv_mr);
/* Under comm->lock: the collective no longer uses its regions. */
void client_mr_release_locked(coll_op_t *op);
/* Closing, after the worker is gone: unmap and free every region. */
void client_mr_close_all(incmoe_comm_t *comm);

#endif
