/*
 * mr.c - registered memory: the regions a communicator's collectives may
 * name, their UCX mappings, and which collectives still use them.
 *
 * Mapping and unmapping run on the proxy thread.  ucp_mem_map/unmap guard the
 * context (its registration cache among others) with the context's lock, and
 * in UCX that lock is a real one only in a context created with
 * mt_workers_shared; ours is created without it (one single-threaded worker
 * per progress thread is the fast mode), so the lock is a no-op and a mapping
 * from a caller's thread would race with the worker, which looks up and
 * registers memory in the same cache while it moves rendezvous data.  The
 * thread that owns the worker serialises the two for free.
 *
 * A region is held from the posting call that names it until its collective
 * retires; deregistering a held region answers INCMOE_ERR_BUSY and leaves it
 * registered, so memory a collective may still write is never unmapped.
 */
#include "mr.h"

#include <stdlib.h>

#include "client.h"
#include "notify.h"

#include "base/log.h"

#define SUBSYS "client"

static incmoe_status_t mr_map(incmoe_comm_t *comm, void *arg)
{
    struct incmoe_mr *mr = arg;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = mr->base,
        .length = mr->length,
    };
    ucs_status_t us = ucp_mem_map(comm->node.context, &mp, &mr->memh);
    if (us != UCS_OK) {
        log_error(SUBSYS, "ucp_mem_map of %zu bytes: %s", mr->length, ucs_status_string(us));
        return inc_ucx_status(us);
    }
    return INCMOE_OK;
}

static incmoe_status_t mr_unmap(incmoe_comm_t *comm, void *arg)
{
    struct incmoe_mr *mr = arg;
    ucs_status_t us = ucp_mem_unmap(comm->node.context, mr->memh);
    if (us != UCS_OK)
        log_warn(SUBSYS, "ucp_mem_unmap of %zu bytes: %s", mr->length, ucs_status_string(us));
    return INCMOE_OK;
}

incmoe_status_t incmoe_mem_register(incmoe_comm_t *comm, void *base, size_t length,
                                    incmoe_mr_t **mr_p)
{
    if (comm == NULL || mr_p == NULL || (base == NULL && length > 0)) {
        log_error(SUBSYS, "incmoe_mem_register: NULL argument");
        return INCMOE_ERR_INVALID_ARG;
    }
    struct incmoe_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return INCMOE_ERR_NO_MEMORY;
    mr->base = base;
    mr->length = length;
    if (length > 0) {
        incmoe_status_t st = client_proxy_call(comm, mr_map, mr);
        if (st != INCMOE_OK) {
            free(mr);
            return st;
        }
    }
    pthread_mutex_lock(&comm->lock);
    mr->next = comm->mrs;
    comm->mrs = mr;
    pthread_mutex_unlock(&comm->lock);
    *mr_p = mr;
    return INCMOE_OK;
}

incmoe_status_t incmoe_mem_deregister(incmoe_comm_t *comm, incmoe_mr_t *mr)
{
    if (comm == NULL || mr == NULL)
        return INCMOE_ERR_INVALID_ARG;
    pthread_mutex_lock(&comm->lock);
    struct incmoe_mr **pp = &comm->mrs;
    while (*pp != NULL && *pp != mr)
        pp = &(*pp)->next;
    if (*pp == NULL) {
        pthread_mutex_unlock(&comm->lock);
        log_error(SUBSYS, "incmoe_mem_deregister: region %p is not registered here", (void *)mr);
        return INCMOE_ERR_INVALID_ARG;
    }
    if (mr->holds > 0) {
        unsigned holds = mr->holds;
        pthread_mutex_unlock(&comm->lock);
        log_debug(SUBSYS, "incmoe_mem_deregister: region %p is used by %u collective(s)",
                  (void *)mr, holds);
        return INCMOE_ERR_BUSY;
    }
    *pp = mr->next; /* unlinked and unheld: no collective can name it any more */
    pthread_mutex_unlock(&comm->lock);
    if (mr->memh != NULL)
        client_proxy_call(comm, mr_unmap, mr);
    free(mr);
    return INCMOE_OK;
}

int client_mr_hold(incmoe_comm_t *comm, coll_op_t *op, struct incmoe_mr *send_mr,
                   struct incmoe_mr *recv_mr)
{
    pthread_mutex_lock(&comm->lock);
    int send_known = 0, recv_known = 0;
    for (const struct incmoe_mr *m = comm->mrs; m != NULL; m = m->next) {
        send_known |= m == send_mr;
        recv_known |= m == recv_mr;
    }
    if (send_known && recv_known) {
        op->send_mr = send_mr;
        op->recv_mr = recv_mr;
        send_mr->holds++;
        recv_mr->holds++;
    }
    pthread_mutex_unlock(&comm->lock);
    return send_known && recv_known;
}

void client_mr_release_locked(coll_op_t *op)
{
    if (op->send_mr != NULL)
        op->send_mr->holds--;
    if (op->recv_mr != NULL)
        op->recv_mr->holds--;
    op->send_mr = op->recv_mr = NULL;
}

void client_mr_close_all(incmoe_comm_t *comm)
{
    while (comm->mrs != NULL) {
        struct incmoe_mr *next = comm->mrs->next;
        if (comm->mrs->memh != NULL)
            mr_unmap(comm, comm->mrs);
        free(comm->mrs);
        comm->mrs = next;
    }
}
