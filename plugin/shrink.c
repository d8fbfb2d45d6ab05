/*
 * shrink.c - a rank asks the switch to shrink its job (base/wire.h, SHRINK): one SHRINK on the
 * communicator's connection to the switch, then a bounded wait for the SHRINK_ACK, which the
 * proxy thread hands over here.  The switch answers once every member it still sees alive asked,
 * or fails the shrink (a member lost after it asked, the job's timeout passed); the wait's own
 * bound covers a switch that never answers.  A failed communicator keeps heartbeating (comm.c), so
 * the switch keeps its connection for this.
 */
#include "shrink.h"

#include <stdio.h>
#include <string.h>

#include "notify.h"
#include "send.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/shrink_wire.h"

#define SUBSYS "client"

static incmoe_status_t send_shrink(incmoe_comm_t *comm, void *arg)
{
    (void)arg;
    client_send_ctrl(comm, WIRE_MSG_SHRINK);
    return INCMOE_OK;
}

void client_on_shrink_ack(incmoe_comm_t *comm, const struct inc_wire_hdr *h, const void *data,
                          size_t length)
{
    struct inc_wire_shrink_ack ack;
    char why[160];
    if (inc_wire_shrink_ack_parse(h, data, length, &ack, why, sizeof(why)) != INCMOE_OK) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "malformed message from the switch: %s", why);
        pthread_mutex_lock(&comm->lock);
        comm->shrink_status = INCMOE_ERR_PROTOCOL;
        snprintf(comm->shrink_ack.reason, sizeof(comm->shrink_ack.reason), "%s", why);
        comm->shrink_state = CLIENT_SHRINK_ANSWERED;
        pthread_cond_broadcast(&comm->cond);
        pthread_mutex_unlock(&comm->lock);
        return;
    }
    pthread_mutex_lock(&comm->lock);
    if (comm->shrink_state != CLIENT_SHRINK_WAITING) {
        pthread_mutex_unlock(&comm->lock);
        client_fail(comm, INCMOE_ERR_PROTOCOL, "SHRINK_ACK from the switch, which nobody asked");
        return;
    }
    comm->shrink_ack = ack;
    comm->shrink_status = (incmoe_status_t)h->status;
    comm->shrink_state = CLIENT_SHRINK_ANSWERED;
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
}

/* Under comm->lock: the shrink failed; the communicator reports why from now on. */
static void shrink_failed_locked(incmoe_comm_t *comm, incmoe_status_t st, const char *why)
{
    char before[sizeof(comm->error_text)];
    snprintf(before, sizeof(before), "%s", comm->error_text);
    if (atomic_load(&comm->error) != 0)
        snprintf(comm->error_text, sizeof(comm->error_text),
                 "shrink: %.120s (the job had failed: %.100s)", why, before);
    else
        snprintf(comm->error_text, sizeof(comm->error_text), "shrink: %.200s", why);
    atomic_store(&comm->error, st);
    log_error(SUBSYS, "rank %d job %llu: %s (%s)", comm->rank, (unsigned long long)comm->job_id,
              comm->error_text, incmoe_strerror(st));
    pthread_cond_broadcast(&comm->cond);
}

incmoe_status_t client_shrink_ask(incmoe_comm_t *comm, struct inc_wire_shrink_ack *ack)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->shrink_state != CLIENT_SHRINK_IDLE) {
        pthread_mutex_unlock(&comm->lock);
        log_error(SUBSYS, "rank %d: incmoe_comm_shrink called twice on one communicator",
                  comm->rank);
        return INCMOE_ERR_INVALID_ARG;
    }
    comm->shrink_state = CLIENT_SHRINK_WAITING;
    pthread_mutex_unlock(&comm->lock);
    client_proxy_call(comm, send_shrink, NULL);

    const int bound_ms = 2 * comm->timeout_ms + 1000;
    const double deadline = inc_now_s() + bound_ms / 1000.0;
    pthread_mutex_lock(&comm->lock);
    while (comm->shrink_state == CLIENT_SHRINK_WAITING && !comm->switch_lost &&
           inc_now_s() < deadline) {
        struct timespec ts = inc_realtime_after_ms(50);
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    incmoe_status_t st = comm->shrink_status;
    char why[INCMOE_WIRE_MAX_TEXT];
    if (comm->shrink_state != CLIENT_SHRINK_ANSWERED) {
        st = comm->switch_lost ? INCMOE_ERR_PEER_FAILED : INCMOE_ERR_TIMEOUT;
        snprintf(why, sizeof(why), "%s",
                 comm->switch_lost ? "the connection to the switch is gone"
                                   : "the switch did not answer in time");
        if (!comm->switch_lost)
            snprintf(why, sizeof(why), "the switch did not answer within %d ms", bound_ms);
    } else {
        snprintf(why, sizeof(why), "%s", comm->shrink_ack.reason);
    }
    comm->shrink_state = CLIENT_SHRINK_ANSWERED;
    if (st != INCMOE_OK)
        shrink_failed_locked(comm, st, why);
    else
        *ack = comm->shrink_ack;
    pthread_mutex_unlock(&comm->lock);
    return st;
}
