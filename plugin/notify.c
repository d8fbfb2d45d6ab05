/*
 * notify.c - how the communicator's threads tell each other things, below
 * every other file of the client (it calls none of them): the first error and
 * its reason (waking every waiter), the wake-up of the proxy thread, and the
 * work callers hand the proxy: calls it runs for them (memory mapping) and
 * collectives it starts.
 */
#include "notify.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/vformat.h"

#define SUBSYS "client"

void client_fail(incmoe_comm_t *comm, incmoe_status_t status, const char *fmt, ...)
{
    char text[256];
    INC_VFORMAT(text, sizeof(text), fmt);
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->error) == 0) {
        snprintf(comm->error_text, sizeof(comm->error_text), "%s", text);
        atomic_store(&comm->error, status);
        log_error(SUBSYS, "rank %d job %llu: %s (%s)", comm->rank, (unsigned long long)comm->job_id,
                  text, incmoe_strerror(status));
    } else {
        log_debug(SUBSYS, "rank %d: further error: %s", comm->rank, text);
    }
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
}

void client_fail_job(incmoe_comm_t *comm, incmoe_status_t status, const char *text)
{
    client_fail(comm, status, "%s", text);
    pthread_mutex_lock(&comm->lock);
    comm->abort_pending = 1;
    pthread_mutex_unlock(&comm->lock);
    client_wake(comm);
}

int client_close_bound_ms(const incmoe_comm_t *comm)
{
    return atomic_load(&comm->error) != 0 || comm->releasing ? 100 : 2000;
}

void client_wake(incmoe_comm_t *comm)
{
    uint64_t one = 1;
    if (write(comm->wake_fd, &one, sizeof(one)) < 0)
        log_debug(SUBSYS, "wake: %s", strerror(errno));
}

incmoe_status_t client_proxy_call(incmoe_comm_t *comm,
                                  incmoe_status_t (*fn)(incmoe_comm_t *comm, void *arg), void *arg)
{
    client_call_t call = {.fn = fn, .arg = arg};
    pthread_mutex_lock(&comm->lock);
    call.next = comm->calls;
    comm->calls = &call;
    pthread_mutex_unlock(&comm->lock);
    client_wake(comm);
    pthread_mutex_lock(&comm->lock);
    while (!call.done) {
        struct timespec ts = inc_realtime_after_ms(1000); /* a safety net, as in incmoe_wait */
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    pthread_mutex_unlock(&comm->lock);
    return call.status;
}

void client_proxy_run_calls(incmoe_comm_t *comm)
{
    pthread_mutex_lock(&comm->lock);
    client_call_t *list = comm->calls;
    comm->calls = NULL;
    pthread_mutex_unlock(&comm->lock);
    while (list != NULL) {
        client_call_t *call = list;
        list = call->next;
        incmoe_status_t st = call->fn(comm, call->arg);
        pthread_mutex_lock(&comm->lock);
        call->status = st;
        call->done = 1;
        pthread_cond_broadcast(&comm->cond);
        pthread_mutex_unlock(&comm->lock);
    }
}

void client_proxy_submit_locked(incmoe_comm_t *comm, coll_op_t *op)
{
    op->next = NULL;
    if (comm->submit_tail != NULL)
        comm->submit_tail->next = op;
    else
        comm->submit_head = op;
    comm->submit_tail = op;
}

coll_op_t *client_proxy_take_submissions(incmoe_comm_t *comm)
{
    pthread_mutex_lock(&comm->lock);
    coll_op_t *list = comm->submit_head;
    comm->submit_head = comm->submit_tail = NULL;
    pthread_mutex_unlock(&comm->lock);
    return list;
}
