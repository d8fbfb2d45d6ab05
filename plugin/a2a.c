/*
 * a2a.c - the all-to-all algorithm: every rank connected to every other at
 * create (the full mesh, mesh.c), the baseline an expert-parallel user picks
 * today for dispatch and combine (each row once to each rank that needs it,
 * over the ranks' own links; dc_peer.c).  AllGather, ReduceScatter and
 * AllReduce run as on the ring: every entry but the wire-up is the ring's
 * (ring.c), which connects only to its right neighbour at create and to the
 * other ranks at its first dispatch or combine.
 */
#include "algo.h"
#include "ll_shared.h"
#include "mesh.h"

static incmoe_status_t a2a_open(incmoe_comm_t *comm, int *share_addr)
{
    return client_ring_ops.open(comm, share_addr);
}

/* Every peer's HELLO heard before create returns: an unreachable peer fails here, not in the
   middle of the first dispatch. */
static incmoe_status_t a2a_connect(incmoe_comm_t *comm)
{
    return client_mesh_connect(comm, comm->nranks - 1);
}

static void a2a_start(incmoe_comm_t *comm, coll_op_t *op)
{
    client_ring_ops.start(comm, op);
}

static void a2a_progress(incmoe_comm_t *comm)
{
    client_ring_ops.progress(comm);
}

static ucs_status_t a2a_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                   size_t length, const ucp_am_recv_param_t *param)
{
    return client_ring_ops.on_message(comm, h, data, length, param);
}

static void a2a_close(incmoe_comm_t *comm)
{
    client_ring_ops.close(comm);
}

const client_algo_ops_t client_a2a_ops = {
    .name = "a2a",
    .connect = a2a_connect,
    .barrier_before_leave = 1,
    .has_dc = 1,
    .ll_bytes = client_ll_peer_largest,
    /* The ring's. */
    .open = a2a_open,
    .start = a2a_start,
    .progress = a2a_progress,
    .on_message = a2a_on_message,
    .close = a2a_close,
};
