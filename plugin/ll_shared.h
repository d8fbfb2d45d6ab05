/*
 * ll_shared.h - what the low-latency form of dispatch and combine shares,
 * whichever algorithm moves its messages (ll_shared.c): the point-to-point one
 * (ll_peer.c) and the in-network one (innet_ll.c).  Both pack through
 * client_ll_payload, hand every message of the others they receive (PEER_LL,
 * LL_FWD) to client_ll_take, and the verdict, the rows' placement and the
 * owner's reduction are done here once (incmoe.h, "The low-latency form";
 * base/wire.h, "The low-latency form of dispatch and combine").
 */
#ifndef INCMOE_LL_SHARED_H
#define INCMOE_LL_SHARED_H

#include "client.h"
#include "dc_shared.h"

#include "base/ll_wire.h"

/* What one low-latency collective heard from the others, until its verdict. */
typedef struct client_ll {
    int nin;                  /* messages taken (one per other rank) */
    void **payload;           /* [nranks] each message's payload (owned), NULL until taken */
    inc_wire_ll_view_t *view; /* [nranks] their views into it */
    int decided;              /* the verdict was applied (op->status) */
    char *fold;               /* combine by expert: the partials folded over local experts, by
                                 source slot (base[s] + k) */
} client_ll_t;

/* A started low-latency dispatch or combine (op->dc->ll): its record of what comes, and a
   combine's fold (by expert).  0: out of memory, the communicator failed. */
int client_ll_start(incmoe_comm_t *comm, coll_op_t *op);
/* A low-latency dispatch or combine of a single rank: started and decided here. */
void client_ll_alone(incmoe_comm_t *comm, coll_op_t *op);
/* Retiring or freeing op: what it holds. */
void client_ll_free(client_ll_t *ll, int nranks);

/* This rank's description of op (struct inc_wire_ll), as its messages carry it. */
void client_ll_describe(const incmoe_comm_t *comm, const coll_op_t *op, struct inc_wire_ll *d);
/* Bytes of op's message msg (WIRE_MSG_PEER_LL to peer, or WIRE_MSG_LL to the switch, peer
   -1), and the largest PEER_LL to any peer (the algorithms' ll_bytes). */
uint64_t client_ll_length(const incmoe_comm_t *comm, const coll_op_t *op, unsigned msg, int peer);
uint64_t client_ll_peer_largest(const incmoe_comm_t *comm, const coll_op_t *op);
uint64_t client_ll_up_length(const incmoe_comm_t *comm, const coll_op_t *op);
/* The payload of that message (owned by the caller), *total_p its hdr.total (rows: T for
   an LL, n for a PEER_LL); NULL out of memory (the communicator failed). */
char *client_ll_payload(incmoe_comm_t *comm, const coll_op_t *op, unsigned msg, int peer,
                        uint64_t *length_p, uint64_t *total_p);
/* Credits a message of length bytes takes: max(1, ceil(length / chunk_size)). */
uint32_t client_ll_credits(const incmoe_comm_t *comm, uint64_t length);

/* A PEER_LL, or a dispatch's LL_FWD, of op from rank from (-1: the switch, whose header names
   the source): payload (owned, freed here whatever happens) checked and kept; once every other
   rank's is in, the verdict is applied (a dispatch's rows placed, an owner's combine reduced),
   the same on every rank.  INCMOE_OK, or the error with the job failed (a broken peer). */
incmoe_status_t client_ll_take(incmoe_comm_t *comm, coll_op_t *op, int from,
                               const struct inc_wire_hdr *h, void *payload, size_t length);
/* A combine's LL_FWD from the switch (its verdict, or the reduction of the others' partials of
   this rank's rows that have any): applied, this rank's own partial last.  payload as above. */
incmoe_status_t client_ll_take_result(incmoe_comm_t *comm, coll_op_t *op,
                                      const struct inc_wire_hdr *h, void *payload, size_t length);

#endif
