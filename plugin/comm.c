/*
 * comm.c - the communicator's lifecycle and its proxy thread.  Create opens
 * UCX, joins the job and starts the proxy; the proxy owns the worker: it
 * dispatches every incoming message, starts queued collectives, runs work
 * callers hand it (memory mapping), lets the algorithm move data and watches
 * the switch's liveness.  Destroy waits (bounded) for posted collectives,
 * leaves the job in order or fails it for the other ranks, and frees
 * everything after the worker, and with it every transfer, is gone.  The
 * first error, the wake-ups and the queues callers hand the proxy are
 * notify.c's.
 */
#include "comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "algo.h"
#include "coll.h"
#include "dc_shared.h"
#include "join.h"
#include "mr.h"
#include "notify.h"
#include "send.h"
#include "shrink.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/text.h"

#define SUBSYS "client"

/* ------------------------------------------------------------------------ */
/* incoming messages                                                        */

static ucs_status_t client_on_message(incmoe_comm_t *comm, const void *header, size_t header_length,
                                      void *data, size_t length, const ucp_am_recv_param_t *param)
{
    char why[160];
    if (inc_wire_hdr_check(header, header_length, length, why, sizeof(why)) != INCMOE_OK) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "malformed message from the switch: %s", why);
        return UCS_ERR_INVALID_PARAM;
    }
    struct inc_wire_hdr h;
    memcpy(&h, header, sizeof(h));
    comm->last_rx = inc_now_s();
    if (h.job != comm->job_id) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s for job %llu, this rank is in job %llu",
                    inc_wire_msg_name(h.msg), (unsigned long long)h.job,
                    (unsigned long long)comm->job_id);
        return UCS_ERR_INVALID_PARAM;
    }
    int common = h.msg == WIRE_MSG_JOIN_ACK || h.msg == WIRE_MSG_ERROR ||
                 h.msg == WIRE_MSG_HEARTBEAT || h.msg == WIRE_MSG_DONE ||
                 h.msg == WIRE_MSG_SHRINK_ACK; /* after a failure most of all */
    /* Once the communicator failed, every collective of it failed: their callers may have
       freed the buffers it would land in, and the switch's data already on its way (UCX may even
       deliver it after the ERROR) is dropped, never written. */
    if (!common && atomic_load(&comm->error) != 0)
        return UCS_OK;
    if (!common) /* the algorithm's own, rendezvous data included */
        return comm->algo != NULL ? comm->ops->on_message(comm, &h, data, length, param)
                                  : UCS_OK; /* closing: the algorithm is gone */
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s sent rendezvous", inc_wire_msg_name(h.msg));
        return UCS_ERR_INVALID_PARAM;
    }
    if (h.msg == WIRE_MSG_JOIN_ACK) {
        client_on_join_ack(comm, data, length);
    } else if (h.msg == WIRE_MSG_ERROR) {
        /* The switch relays ranks' words: printable and bounded before anyone reads them. */
        char text[INCMOE_WIRE_MAX_TEXT + 1];
        inc_text_sanitize(text, sizeof(text), data, length);
        incmoe_status_t st = h.status < 0 ? (incmoe_status_t)h.status : INCMOE_ERR_PROTOCOL;
        client_fail(comm, st, "switch: %s", text);
    } else if (h.msg == WIRE_MSG_DONE) {
        client_on_done(comm, &h);
    } else if (h.msg == WIRE_MSG_SHRINK_ACK) {
        client_on_shrink_ack(comm, &h, data, length);
    }
    return UCS_OK;
}

ucs_status_t client_am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    ucs_status_t st = client_on_message(arg, header, header_length, data, length, param);
    /* UCX accepts an error (or INPROGRESS) only for rendezvous data; eager data is done with. */
    return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? st : UCS_OK;
}

/* ------------------------------------------------------------------------ */
/* the proxy thread                                                         */

/* Tell the switch about a local failure the other ranks must hear about. */
static void send_pending_abort(incmoe_comm_t *comm)
{
    pthread_mutex_lock(&comm->lock);
    int abort_pending = comm->abort_pending;
    comm->abort_pending = 0;
    char text[sizeof(comm->error_text) + 32];
    snprintf(text, sizeof(text), "rank %d: %s", comm->rank, comm->error_text);
    pthread_mutex_unlock(&comm->lock);
    if (abort_pending)
        client_send_error(comm, (incmoe_status_t)atomic_load(&comm->error), text);
}

void client_drain_submissions(incmoe_comm_t *comm)
{
    coll_op_t *list = client_proxy_take_submissions(comm);
    while (list != NULL) {
        coll_op_t *op = list;
        list = op->next;
        if (client_op_start(comm, op))
            comm->ops->start(comm, op);
    }
}

/* The heartbeat goes on after a failure too, while the switch is there: the switch keeps a
   failed job's survivors for their shrink (shrink.c) only while it hears from them. */
static void check_liveness(incmoe_comm_t *comm)
{
    double now = inc_now_s();
    double interval = comm->timeout_ms / 4000.0;
    if (now - comm->last_tx > interval && !comm->switch_lost)
        client_send_ctrl(comm, WIRE_MSG_HEARTBEAT);
    if (atomic_load(&comm->error) != 0)
        return;
    if (now - comm->last_rx > comm->timeout_ms / 1000.0)
        client_fail(comm, INCMOE_ERR_PEER_FAILED, "the switch has been silent for %.1f s",
                    now - comm->last_rx);
}

/*
 * Progress the worker until it is idle, but for one slice at most, so the proxy's other duties
 * (the heartbeat, callers' calls, new collectives) get their turn while data streams in and
 * every call finds work.  Ring data never passes the switch and proves nothing to it: a proxy
 * that only took it in would leave the heartbeat unsent and be failed as silent while busy.
 * The slice is a clock read per call, not a count of calls, since one call can take long (many
 * small messages, a slow machine); client_on_message reads the same clock per message.  A
 * millisecond is far below a heartbeat interval and delays a new collective little.  Returns
 * whether any call did something.
 */
static int proxy_progress(incmoe_comm_t *comm)
{
    const double until = inc_now_s() + 0.001;
    int did = 0;
    while (ucp_worker_progress(comm->node.worker) != 0) {
        did = 1;
        if (inc_now_s() >= until)
            break;
    }
    return did;
}

static void *proxy_main(void *arg)
{
    incmoe_comm_t *comm = arg;
    while (!atomic_load(&comm->stop)) {
        int did = proxy_progress(comm);
        client_proxy_run_calls(comm);
        send_pending_abort(comm);
        client_drain_submissions(comm);
        if (atomic_load(&comm->error) == 0 && comm->ops->progress != NULL)
            comm->ops->progress(comm);
        check_liveness(comm);
        if (!did) {
            int wait_ms = comm->timeout_ms / 8 > 0 ? comm->timeout_ms / 8 : 1;
            inc_ucx_node_wait(&comm->node, comm->wake_fd, wait_ms);
            uint64_t v;
            if (read(comm->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                log_debug(SUBSYS, "wake read: %s", strerror(errno));
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                */

static void free_ops(incmoe_comm_t *comm, coll_op_t *op)
{
    while (op != NULL) {
        coll_op_t *next = op->next;
        client_op_free(comm, op);
        op = next;
    }
}

/*
 * On the thread that owns the worker, no proxy running.  The collectives are
 * freed before the worker goes (its purge completes their transfers with
 * comm->freeing set, touching nothing of theirs), and the regions are
 * unmapped only after it went, when no transfer can reach them any more.
 */
static void comm_free(incmoe_comm_t *comm)
{
    if (comm->ep != NULL) {
        /* Graceful, so a LEAVE or ERROR still queued goes out; once the communicator failed the
           switch may be gone or stopped, so its bound is short. */
        inc_ucx_ep_close(&comm->node, comm->ep, 0, client_close_bound_ms(comm));
        comm->ep = NULL;
    }
    if (comm->algo != NULL)
        comm->ops->close(comm);
    /* Let outstanding control sends finish (or fail) before the worker goes. */
    double deadline = inc_now_s() + client_close_bound_ms(comm) / 1000.0;
    while (comm->ctrl_sent.count > 0 && inc_now_s() < deadline)
        inc_ucx_node_wait(&comm->node, -1, 10);
    comm->freeing = 1;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        free_ops(comm, comm->streams[s].head);
    free_ops(comm, comm->submit_head);
    client_dc_close_all(comm);
    if (comm->node.worker != NULL) {
        if (comm->worker_addr != NULL)
            ucp_worker_release_address(comm->node.worker, comm->worker_addr);
        comm->worker_addr = NULL;
        inc_ucx_worker_settle(&comm->node, client_close_bound_ms(comm));
        ucp_worker_destroy(comm->node.worker);
        comm->node.worker = NULL;
    }
    client_mr_close_all(comm);
    if (comm->peer_addr != NULL)
        for (int r = 0; r < comm->nranks; r++)
            free(comm->peer_addr[r]);
    free(comm->peer_addr);
    free(comm->peer_addr_len);
    free(comm->switch_addr);
    OPENSSL_cleanse(comm->secret, sizeof(comm->secret));
    inc_ucx_node_close(&comm->node);
    if (comm->wake_fd >= 0)
        close(comm->wake_fd);
    pthread_mutex_destroy(&comm->lock);
    pthread_cond_destroy(&comm->cond);
    free(comm);
}

static incmoe_status_t check_params(const incmoe_comm_params_t *params, incmoe_comm_t **comm_p)
{
    if (params == NULL || comm_p == NULL) {
        log_error(SUBSYS, "incmoe_comm_create: params and comm_p must not be NULL");
        return INCMOE_ERR_INVALID_ARG;
    }
    if (params->nranks < 1 || params->nranks > INCMOE_MAX_RANKS) {
        log_error(SUBSYS, "nranks %d out of range 1..%d", params->nranks, INCMOE_MAX_RANKS);
        return INCMOE_ERR_INVALID_ARG;
    }
    if (params->rank < 0 || params->rank >= params->nranks) {
        log_error(SUBSYS, "rank %d out of range 0..%d", params->rank, params->nranks - 1);
        return INCMOE_ERR_INVALID_ARG;
    }
    if ((params->field_mask & INCMOE_COMM_PARAM_SECRET) &&
        (params->secret_len > INCMOE_MAX_SECRET ||
         (params->secret == NULL && params->secret_len))) {
        log_error(SUBSYS, "secret of %zu bytes: at most %d", params->secret_len, INCMOE_MAX_SECRET);
        return INCMOE_ERR_INVALID_ARG;
    }
    if ((params->field_mask & INCMOE_COMM_PARAM_TIMEOUT) &&
        params->timeout_ms > INC_TIMEOUT_MS_MAX) {
        log_error(SUBSYS, "timeout_ms %d out of range (allowed: 1..%d, or 0 for the default)",
                  params->timeout_ms, INC_TIMEOUT_MS_MAX);
        return INCMOE_ERR_INVALID_ARG;
    }
    if ((params->field_mask & INCMOE_COMM_PARAM_PROGRESS_TIMEOUT) &&
        (params->progress_timeout_ms < 0 || params->progress_timeout_ms > INC_TIMEOUT_MS_MAX)) {
        log_error(SUBSYS,
                  "progress_timeout_ms %d out of range (allowed: 1..%d, or 0 for the switch's)",
                  params->progress_timeout_ms, INC_TIMEOUT_MS_MAX);
        return INCMOE_ERR_INVALID_ARG;
    }
    incmoe_algo_t algo =
        (params->field_mask & INCMOE_COMM_PARAM_ALGO) ? params->algo : INCMOE_ALGO_INC;
    const char *name;
    if (client_algo_find(algo, &name) == NULL) {
        if (name == NULL) {
            log_error(SUBSYS, "unknown algorithm %d", (int)algo);
            return INCMOE_ERR_INVALID_ARG;
        }
        log_error(SUBSYS, "algorithm %s (%d) is not available in this build yet", name, (int)algo);
        return INCMOE_ERR_UNSUPPORTED;
    }
    return INCMOE_OK;
}

/* The INCMOE_* settings a communicator reads, each in its range (logged when not). */
typedef struct {
    long long timeout_ms, rndv_thresh;
} comm_settings_t;

static incmoe_status_t read_settings(comm_settings_t *s)
{
    if (inc_config_get_int("INCMOE_TIMEOUT_MS", &s->timeout_ms) != INCMOE_OK ||
        inc_config_get_int("INCMOE_RNDV_THRESH", &s->rndv_thresh) != INCMOE_OK)
        return INCMOE_ERR_INVALID_ARG;
    return INCMOE_OK;
}

/* Every message to this communicator reaches client_am_cb: set before any endpoint exists. */
static incmoe_status_t comm_set_handler(incmoe_comm_t *comm)
{
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = INCMOE_AM_ID,
        .cb = client_am_cb,
        .arg = comm,
    };
    ucs_status_t us = ucp_worker_set_am_recv_handler(comm->node.worker, &hp);
    if (us != UCS_OK) {
        log_error(SUBSYS, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
        return INCMOE_ERR_TRANSPORT;
    }
    return INCMOE_OK;
}

/* The communicator before joining: settings, locks, the wake-up fd, UCX and its handler. */
static incmoe_status_t comm_open(const incmoe_comm_params_t *params, const comm_settings_t *set,
                                 incmoe_comm_t *comm)
{
    comm->rank = params->rank;
    comm->nranks = params->nranks;
    comm->job_id = params->job_id;
    const char *name;
    comm->algo_id = (params->field_mask & INCMOE_COMM_PARAM_ALGO) ? params->algo : INCMOE_ALGO_INC;
    comm->ops = client_algo_find(comm->algo_id, &name);
    comm->timeout_ms = (params->field_mask & INCMOE_COMM_PARAM_TIMEOUT) && params->timeout_ms > 0
                           ? params->timeout_ms
                           : (int)set->timeout_ms;
    if (params->field_mask & INCMOE_COMM_PARAM_PROGRESS_TIMEOUT)
        comm->progress_timeout_ms = params->progress_timeout_ms;
    comm->rndv_thresh = set->rndv_thresh == 0 ? SIZE_MAX : (size_t)set->rndv_thresh;
    comm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    comm->switch_addr = strdup(params->switch_addr);
    if (comm->wake_fd < 0 || comm->switch_addr == NULL)
        return INCMOE_ERR_NO_MEMORY;
    incmoe_status_t st =
        inc_ucx_parse_hostport(params->switch_addr, &comm->switch_ss, &comm->switch_ss_len, 0);
    if (st != INCMOE_OK)
        return st;
    /* UCX's own TCP port on the interface this rank reaches the switch through, where the
       switch and the ring neighbours connect to it; every interface when there is no route. */
    struct sockaddr_storage local;
    socklen_t local_len;
    int toward = inc_ucx_local_toward((struct sockaddr *)&comm->switch_ss, comm->switch_ss_len,
                                      &local, &local_len) == 0;
    st = inc_ucx_node_open(&comm->node, toward ? (struct sockaddr *)&local : NULL);
    return st == INCMOE_OK ? comm_set_handler(comm) : st;
}

incmoe_status_t incmoe_comm_create(const incmoe_comm_params_t *params, incmoe_comm_t **comm_p)
{
    comm_settings_t set;
    incmoe_status_t st = check_params(params, comm_p);
    if (st == INCMOE_OK)
        st = read_settings(&set);
    if (st != INCMOE_OK)
        return st;
    incmoe_comm_t *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return INCMOE_ERR_NO_MEMORY;
    int share_addr = 0;
    st = comm_open(params, &set, comm);
    if (st == INCMOE_OK) /* before JOIN: once the job forms, peers may send to this rank */
        st = comm->ops->open(comm, &share_addr);
    if (st == INCMOE_OK)
        st = client_join(comm, params, share_addr);
    if (st == INCMOE_OK)
        st = comm->ops->connect(comm);
    if (st == INCMOE_OK && pthread_create(&comm->proxy, NULL, proxy_main, comm) != 0)
        st = INCMOE_ERR_NO_MEMORY;
    if (st != INCMOE_OK) {
        comm_free(comm);
        return st;
    }
    log_info(SUBSYS, "rank %d/%d joined job %llu at %s (%s, chunk %llu, %u credits)", comm->rank,
             comm->nranks, (unsigned long long)comm->job_id, params->switch_addr, comm->ops->name,
             (unsigned long long)comm->chunk_size, comm->credits);
    *comm_p = comm;
    return INCMOE_OK;
}

/* Wait (at most timeout_ms; a release not at all) until every posted collective retired or
   the communicator failed; returns how many are still in flight. */
static uint64_t comm_wait_idle(incmoe_comm_t *comm)
{
    double deadline = inc_now_s() + (comm->releasing ? 0 : comm->timeout_ms / 1000.0);
    uint64_t left;
    pthread_mutex_lock(&comm->lock);
    for (;;) {
        left = 0;
        for (int s = 0; s < INC_STREAM_COUNT; s++)
            left += comm->streams[s].posted - atomic_load(&comm->streams[s].completed);
        if (left == 0 || atomic_load(&comm->error) != 0 || inc_now_s() > deadline)
            break;
        struct timespec ts = inc_realtime_after_ms(50);
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    pthread_mutex_unlock(&comm->lock);
    return left;
}

incmoe_status_t incmoe_comm_destroy(incmoe_comm_t *comm)
{
    if (comm == NULL)
        return INCMOE_ERR_INVALID_ARG;
    uint64_t left = comm_wait_idle(comm);
    if (left == 0 && comm->ops->barrier_before_leave && !comm->releasing &&
        atomic_load(&comm->error) == 0) {
        incmoe_req_t req;
        if (incmoe_barrier(comm, &req) == INCMOE_OK)
            left = comm_wait_idle(comm);
    }
    char abandon[192] = "";
    if (left > 0 && atomic_load(&comm->error) == 0) {
        snprintf(abandon, sizeof(abandon),
                 "rank %d %s its communicator with %llu collective(s) in flight", comm->rank,
                 comm->releasing ? "released" : "destroyed", (unsigned long long)left);
        client_fail(comm, INCMOE_ERR_TIMEOUT, "%s after %d ms", abandon,
                    comm->releasing ? 0 : comm->timeout_ms);
    }
    atomic_store(&comm->stop, 1);
    client_wake(comm);
    pthread_join(comm->proxy, NULL);
    /* This thread owns the worker now: fail the job for the others, or say goodbye. */
    send_pending_abort(comm);
    incmoe_status_t st = (incmoe_status_t)atomic_load(&comm->error);
    if (abandon[0] != '\0')
        client_send_error(comm, INCMOE_ERR_PEER_FAILED, abandon);
    else if (st == INCMOE_OK)
        client_send_ctrl(comm, WIRE_MSG_LEAVE);
    comm_free(comm);
    return st;
}

/* Destroy without its waits: the flag shortens each of them (comm_wait_idle, the ring's
   barrier, client_close_bound_ms). */
incmoe_status_t incmoe_comm_release(incmoe_comm_t *comm)
{
    if (comm == NULL)
        return INCMOE_ERR_INVALID_ARG;
    comm->releasing = 1;
    return incmoe_comm_destroy(comm);
}

incmoe_status_t incmoe_comm_error(incmoe_comm_t *comm, char *msg, size_t msg_len)
{
    if (comm == NULL)
        return INCMOE_ERR_INVALID_ARG;
    pthread_mutex_lock(&comm->lock);
    incmoe_status_t st = (incmoe_status_t)atomic_load(&comm->error);
    if (msg != NULL && msg_len > 0)
        snprintf(msg, msg_len, "%s", st != INCMOE_OK ? comm->error_text : "");
    pthread_mutex_unlock(&comm->lock);
    return st;
}

incmoe_status_t incmoe_comm_shrink(incmoe_comm_t *comm, incmoe_comm_t **new_comm)
{
    if (comm == NULL || new_comm == NULL) {
        log_error(SUBSYS, "incmoe_comm_shrink: comm and new_comm must not be NULL");
        return INCMOE_ERR_INVALID_ARG;
    }
    *new_comm = NULL;
    struct inc_wire_shrink_ack ack;
    incmoe_status_t st = client_shrink_ask(comm, &ack);
    if (st != INCMOE_OK)
        return st;
    /* The new job as this one was joined: the same switch, key, algorithm and timeouts. */
    incmoe_comm_params_t p = {
        .field_mask = INCMOE_COMM_PARAM_SECRET | INCMOE_COMM_PARAM_ALGO |
                      INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_PROGRESS_TIMEOUT,
        .switch_addr = comm->switch_addr,
        .job_id = ack.job,
        .rank = (int)ack.rank,
        .nranks = (int)ack.nranks,
        .secret = comm->secret,
        .secret_len = comm->secret_len,
        .algo = comm->algo_id,
        .timeout_ms = comm->timeout_ms,
        .progress_timeout_ms = comm->progress_timeout_ms,
    };
    log_info(SUBSYS, "rank %d of job %llu shrinks to rank %u of %u in job %llu", comm->rank,
             (unsigned long long)comm->job_id, ack.rank, ack.nranks, (unsigned long long)ack.job);
    return incmoe_comm_create(&p, new_comm);
}

int incmoe_comm_rank(const incmoe_comm_t *comm)
{
    return comm->rank;
}

int incmoe_comm_nranks(const incmoe_comm_t *comm)
{
    return comm->nranks;
}

uint64_t incmoe_comm_job_id(const incmoe_comm_t *comm)
{
    return comm->job_id;
}
