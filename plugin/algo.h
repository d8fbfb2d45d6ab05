/*
 * algo.h - the one table behind which an algorithm moves a communicator's
 * data: in-network through the switch (innet.c), the ring between the ranks
 * (ring.c) or the all-to-all over the full mesh (a2a.c), found by
 * incmoe_algo_t in algo.c.  The common code calls these entries only from
 * comm.c; a2a.c runs the ring's entries through its table, otherwise the
 * algorithms never call each other.  The barrier, the join and liveness
 * always go through the switch and are not the algorithm's.  An algorithm
 * moves every data stream (every stream but the barrier), switching on
 * op->stream inside its own entries.
 */
#ifndef INCMOE_ALGO_H
#define INCMOE_ALGO_H

#include <sys/socket.h>

#include "client.h"

typedef struct client_algo_ops {
    const char *name;
    /* Before joining, on the creating thread: allocate comm->algo (peers may send before
       connect() ran).  *share_addr: whether JOIN carries this rank's worker address (the
       peers connect to it). */
    incmoe_status_t (*open)(incmoe_comm_t *comm, int *share_addr);
    /* After JOIN_ACK, on the creating thread: finish wire-up. */
    incmoe_status_t (*connect)(incmoe_comm_t *comm);
    /* Proxy thread: a started collective of a data stream, of more than one rank; the local
       part (own block, expected result bytes) is done. */
    void (*start)(incmoe_comm_t *comm, coll_op_t *op);
    /* Proxy thread, every loop turn while healthy: move what can move now (may be NULL). */
    void (*progress)(incmoe_comm_t *comm);
    /* Proxy thread: a message the common code does not handle (answers as a UCX active
       message callback does). */
    ucs_status_t (*on_message)(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                               size_t length, const ucp_am_recv_param_t *param);
    /* Closing, with the worker still alive and no proxy running: release comm->algo. */
    void (*close)(incmoe_comm_t *comm);
    /* Data flows rank to rank: nobody may leave while a neighbour still needs it, so
       destroy first runs a barrier. */
    int barrier_before_leave;
    /* Moves dispatch and combine (start and on_message see their streams; the plan's verdict
       and the rows' placement are dc_shared.c's).  0: posting them returns INCMOE_ERR_UNSUPPORTED.
     */
    int has_dc;
    /* On the posting thread, a dispatch or combine checked and described (may be NULL): the
       algorithm's own limits on it; INCMOE_OK, or the error with the reason in why. */
    incmoe_status_t (*dc_check)(incmoe_comm_t *comm, const coll_op_t *op, char *why,
                                size_t why_len);
    /* The low-latency form of dispatch and combine (NULL: posting it returns
       INCMOE_ERR_UNSUPPORTED): on the posting thread, the bytes of the largest message this rank
       sends for op, each taking max(1, ceil(bytes / chunk_size)) credits (ll_shared.h). */
    uint64_t (*ll_bytes)(const incmoe_comm_t *comm, const coll_op_t *op);
} client_algo_ops_t;

extern const client_algo_ops_t client_innet_ops;
extern const client_algo_ops_t client_ring_ops;
extern const client_algo_ops_t client_a2a_ops;

/* The algorithm's table, or NULL: for a value that names none (*name_p NULL), or one this
   build lists but does not have yet (*name_p its name). */
const client_algo_ops_t *client_algo_find(incmoe_algo_t algo, const char **name_p);

#endif
