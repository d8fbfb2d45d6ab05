/*
 * notify.h - how the client's threads tell each other: errors, wake-ups, work
 * handed to the proxy (notify.c).
 */
#ifndef INCMOE_NOTIFY_H
#define INCMOE_NOTIFY_H

#include "client.h"

/* Record the communicator's first error (later ones are only logged) and wake every waiter. */
void client_fail(incmoe_comm_t *comm, incmoe_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A local failure the other ranks must hear about, or they would wait forever. */
void client_fail_job(incmoe_comm_t *comm, incmoe_status_t status, const char *text);
/* The bound on closing one endpoint: short once the communicator failed, when the peer
   may be stopped and the process must not linger past the error. */
int client_close_bound_ms(const incmoe_comm_t *comm);
/* Wake the proxy thread: new work is queued. */
void client_wake(incmoe_comm_t *comm);
/* Run fn(comm, arg) on the proxy thread and return its status (the caller blocks). */
incmoe_status_t client_proxy_call(incmoe_comm_t *comm,
                                  incmoe_status_t (*fn)(incmoe_comm_t *comm, void *arg), void *arg);
/* Proxy thread: run what callers handed over; a call's caller may return once it is done. */
void client_proxy_run_calls(incmoe_comm_t *comm);
/* Under comm->lock: queue a collective for the proxy, behind those queued before. */
void client_proxy_submit_locked(incmoe_comm_t *comm, coll_op_t *op);
/* Proxy thread: the queued collectives in order (linked by next), the queue emptied. */
coll_op_t *client_proxy_take_submissions(incmoe_comm_t *comm);

#endif
