/*
 * mesh.h - the connections between the ranks (mesh.c), for the algorithms
 * that use them (ring, a2a).
 */
#ifndef INCMOE_MESH_H
#define INCMOE_MESH_H

#include "client.h"

#include "base/wire.h"

typedef struct client_mesh client_mesh_t;

/* An algorithm's message handler (as client_algo_ops_t.on_message): the mesh hands it what
   arrived from a peer before the token was known, once the peer's HELLO was checked. */
typedef ucs_status_t (*client_mesh_deliver_t)(incmoe_comm_t *comm, const struct inc_wire_hdr *h,
                                              void *data, size_t length,
                                              const ucp_am_recv_param_t *param);

/* A message from another rank kept until it can be handled: an eager payload copied, a
   rendezvous one's descriptor held. */
typedef struct client_kept {
    struct client_kept *next; /* the keeper's list */
    struct inc_wire_hdr hdr;
    ucp_ep_h from; /* the endpoint it arrived from, or NULL */
    void *desc;    /* rendezvous descriptor, or */
    void *copy;    /* the eager payload */
    size_t length;
} client_kept_t;

/* Keep a message as its handler was given it; NULL when out of memory. */
client_kept_t *client_kept_new(const struct inc_wire_hdr *h, void *data, size_t length,
                               const ucp_am_recv_param_t *param);
/* Hand a kept message to deliver as UCX would have, then free it (releasing a descriptor the
   handler did not take). */
void client_kept_deliver(incmoe_comm_t *comm, client_kept_t *k, client_mesh_deliver_t deliver);
/* Free a kept message unhandled. */
void client_kept_free(incmoe_comm_t *comm, client_kept_t *k);

/* Before joining (peers may send before the JOIN_ACK is read): comm->mesh, no endpoint yet. */
incmoe_status_t client_mesh_open(incmoe_comm_t *comm, client_mesh_deliver_t deliver);
/* On the creating thread, after JOIN_ACK: endpoints to the span ranks after this one, and a
   bounded wait until the span ranks before it bound theirs (span 1: the ring's neighbours;
   nranks - 1: every rank). */
incmoe_status_t client_mesh_connect(incmoe_comm_t *comm, int span);
/* Proxy thread: endpoints to every rank not connected yet, their HELLOs sent; an error fails
   the communicator. */
incmoe_status_t client_mesh_open_all(incmoe_comm_t *comm);
/* This rank's endpoint to peer, or NULL before it was opened or once the mesh is closing (a
   send on NULL completes as canceled). */
ucp_ep_h client_mesh_ep(const incmoe_comm_t *comm, int peer);
/* The reason of a connection lost while nothing was in flight, or NULL. */
const char *client_mesh_broken(const incmoe_comm_t *comm);
/* Every message from another rank first: the sender's rank (>= 0) when the algorithm is to
   handle it, or -1 when the mesh took it (a HELLO, one held or dropped; *ret_p is the answer
   to UCX). */
int client_mesh_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                           size_t length, const ucp_am_recv_param_t *param, ucs_status_t *ret_p);
/* Closing, with the worker still alive and no proxy running: the endpoints and comm->mesh. */
void client_mesh_close(incmoe_comm_t *comm);

#endif
