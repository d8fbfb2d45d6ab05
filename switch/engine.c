/*
 * engine.c - the switch engine's router: every message of a member goes to
 * the code that owns it.
 *
 * A collective's messages go to its form (coll_form.h) through the forms
 * table: form_of picks the form a message belongs to (LL: the low-latency
 * form; dispatch and combine: their own; SMALL and SMALL_FWD: small; the
 * rest: chunked), and the form's
 * entry for the message kind takes it; a message no form takes fails the job.
 * The router keeps what is not a collective's: HEARTBEAT, LEAVE, ERROR
 * (membership.c), a JOIN, a child's TREE_JOIN and the parent's JOIN_ACK
 * (tree_join.c), the parent's and a child's CREDIT (tree.c), liveness and
 * the progress timeout, and the reductions the workers hand back (chunked.c's,
 * the one form that uses them).
 *
 * Anything malformed, out of range or inconsistent fails the job with a
 * reason sent to every rank, never the switch: other jobs carry on.
 */
#include "engine.h"

#include <string.h>

#include "chunked.h"
#include "coll_table.h"
#include "dc_form.h"
#include "dc_window.h"
#include "ll_form.h"
#include "shrink.h"
#include "small.h"
#include "tree.h"
#include "tree_join.h"

#include "base/clock.h"

/* Membership retires a job (its hook): what it holds of collectives goes. */
static void drop_collectives(void *engine, job_t *job)
{
    (void)engine;
    tree_drop_queues(job); /* what waits for a link's credits never goes */
    dc_window_drop(job);
    coll_drop_job(job);
}

/* The form a collective's message belongs to: a new form is a line here. */
static const coll_form_t *form_of(int stream, int msg)
{
    if (msg == WIRE_MSG_LL)
        return &ll_form;
    if (coll_streams[stream].planned)
        return &dc_form;
    if (msg == WIRE_MSG_SMALL || msg == WIRE_MSG_SMALL_FWD)
        return &small_form;
    return &chunked_form;
}

/* The entry of the form that takes a collective's message from a rank or a child switch, or
   NULL if none does.  The header check bounded the stream of these messages. */
static coll_msg_fn member_entry(const conn_t *conn, const struct inc_wire_hdr *h)
{
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_POST:
        return form_of(h->stream, h->msg)->post;
    case WIRE_MSG_DATA:
        return form_of(h->stream, h->msg)->data;
    case WIRE_MSG_SMALL:
        return form_of(h->stream, h->msg)->small;
    case WIRE_MSG_LL:
        return conn->role == CONN_RANK ? form_of(h->stream, h->msg)->ll : NULL;
    case WIRE_MSG_TREE_POST:
        return conn->role == CONN_CHILD ? form_of(h->stream, h->msg)->tree_post : NULL;
    default:
        return NULL;
    }
}

/* The same for a message of the parent switch. */
static coll_msg_fn parent_entry(const struct inc_wire_hdr *h)
{
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_POST:
        return form_of(h->stream, h->msg)->parent_post;
    case WIRE_MSG_TREE_POST:
        return form_of(h->stream, h->msg)->tree_post;
    case WIRE_MSG_FWD:
    case WIRE_MSG_SMALL_FWD: {
        const coll_form_t *form = form_of(h->stream, h->msg);
        return form->result_msg == h->msg ? form->parent_result : NULL;
    }
    default:
        return NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* message handling                                                         */

/* Leaving is orderly only if nobody still waits on this rank. */
static void on_leave(engine_t *eng, job_t *job, conn_t *conn)
{
    const coll_t *owed = coll_owed(job, conn->rank);
    if (owed != NULL) {
        job_fail(&eng->members, job, INCMOE_ERR_PEER_FAILED, conn->rank,
                 "rank %d left the job without posting %s epoch %llu", conn->rank,
                 inc_wire_stream_name(owed->stream), (unsigned long long)owed->epoch);
        return;
    }
    member_leave(&eng->members, conn);
}

/* What the parent switch sends a child: its answers for the ports beyond this switch. */
static ucs_status_t on_parent_message(engine_t *eng, job_t *job, conn_t *conn,
                                      const struct inc_wire_hdr *h, void *data, size_t length,
                                      const ucp_am_recv_param_t *param)
{
    membership_t *m = &eng->members;
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_HEARTBEAT:
        return UCS_OK;
    case WIRE_MSG_ERROR:
        member_on_error(m, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_JOIN_ACK:
        tree_on_parent_ack(m, job, h, data, length);
        return UCS_OK;
    case WIRE_MSG_CREDIT:
        if (h->stream == INCMOE_STREAM_BARRIER)
            break;
        if (h->stream == INCMOE_STREAM_COMBINE) /* the window of its set chunks (dc_window.c) */
            dc_window_credit(m, job, job->parent_rep, h->root, h->length);
        else
            tree_up_credit(m, job, h->stream, h->length);
        return UCS_OK;
    default: {
        coll_msg_fn fn = parent_entry(h);
        if (fn != NULL)
            return fn(&eng->env, job, conn, h, data, length, param);
        break;
    }
    }
    JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0, "the parent switch sent %s, which a child never gets",
            inc_wire_msg_name(h->msg));
    return UCS_ERR_INVALID_PARAM;
}

static ucs_status_t on_message(void *engine, conn_t *conn, const struct inc_wire_hdr *h, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    engine_t *eng = engine;
    job_t *job = conn->job;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    ucs_status_t st = member_screen(&eng->members, conn, h, rndv);
    if (st != UCS_OK)
        return st;
    if (conn->role == CONN_PARENT)
        return on_parent_message(eng, job, conn, h, data, length, param);
    if (conn->role == CONN_RANK)
        trips_count(&job->trips, TRIPS_IN, h);
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_HEARTBEAT:
        return UCS_OK;
    case WIRE_MSG_LEAVE:
        on_leave(eng, job, conn);
        return UCS_OK;
    case WIRE_MSG_SHRINK:
        shrink_on_request(&eng->members, conn, h);
        return UCS_OK;
    case WIRE_MSG_ERROR:
        member_on_error(&eng->members, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_TREE_JOIN:
        if (conn->role != CONN_CHILD)
            break;
        member_tree_join(&eng->members, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_CREDIT: /* a child switch's window (tree.c, dc_window.c) */
        if (conn->role != CONN_CHILD)
            break;
        if (h->stream == INCMOE_STREAM_COMBINE)
            dc_window_credit(&eng->members, job, conn->rank, h->root, h->length);
        else
            tree_down_credit(&eng->members, job, conn->rank, h->stream, h->root, h->length);
        return UCS_OK;
    default: {
        coll_msg_fn fn = member_entry(conn, h);
        if (fn != NULL)
            return fn(&eng->env, job, conn, h, data, length, param);
        break;
    }
    }
    JOB_BAD(&eng->members, job, INCMOE_ERR_PROTOCOL, conn->rank,
            "rank %d sent %s, which ranks never send", conn->rank, inc_wire_msg_name(h->msg));
    return UCS_ERR_INVALID_PARAM;
}

/* A malformed message from a member fails its job as an ERROR from that rank would. */
static void on_malformed(void *engine, conn_t *conn, const char *text)
{
    struct inc_wire_hdr e;
    inc_wire_hdr_init(&e, WIRE_MSG_ERROR, conn->job->id);
    e.rank = (uint32_t)conn->rank;
    e.status = INCMOE_ERR_PROTOCOL;
    e.length = strlen(text);
    ucp_am_recv_param_t p = {.recv_attr = 0};
    on_message(engine, conn, &e, (void *)text, e.length, &p);
}

static void on_join(void *engine, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                    size_t length)
{
    member_join(&((engine_t *)engine)->members, conn, hdr, payload, length);
}

static void on_conn_lost(void *engine, conn_t *conn, const char *why)
{
    member_conn_lost(&((engine_t *)engine)->members, conn, why);
}

/* Reductions the threads finished go out from the event loop. */
static void on_wake(void *engine)
{
    engine_t *eng = engine;
    reduce_task_t *done = reduce_pool_take_done(&eng->pool);
    while (done != NULL) {
        reduce_task_t *next = done->next;
        chunked_reduced(done);
        done = next;
    }
}

/* The progress timeouts, checked a few times a second over every active job's streams. */
static void check_progress(engine_t *eng)
{
    double now = inc_now_s();
    if (now - eng->progress_checked < 0.1)
        return;
    eng->progress_checked = now;
    job_t *next;
    for (job_t *job = eng->members.jobs; job != NULL; job = next) {
        next = job->next; /* a failed job moves to the orphans */
        coll_check_progress(&eng->members, job, now);
        if (job->state == JOB_ACTIVE) /* whose ranks all left while it owed its parent */
            job_release(&eng->members, job);
    }
}

static void on_tick(void *engine, conn_t *conns)
{
    engine_t *eng = engine;
    member_tick(&eng->members, conns);
    shrink_tick(&eng->members);
    check_progress(eng);
}

static int wake_fd(void *engine)
{
    return reduce_pool_fd(&((engine_t *)engine)->pool);
}

static void on_shutdown(void *engine, const char *why)
{
    member_fail_all(&((engine_t *)engine)->members, why);
}

const switch_engine_ops_t engine_ops = {
    .on_join = on_join,
    .on_message = on_message,
    .on_malformed = on_malformed,
    .on_conn_lost = on_conn_lost,
    .on_wake = on_wake,
    .on_tick = on_tick,
    .wake_fd = wake_fd,
    .on_shutdown = on_shutdown,
};

int engine_init(engine_t *eng, const switch_settings_t *set, switch_stats_t *stats, switch_tx_t tx)
{
    *eng = (engine_t){.set = set, .stats = stats, .tx = tx};
    eng->env = (coll_env_t){.m = &eng->members, .pool = &eng->pool};
    membership_init(&eng->members, set, stats, trips_tx(&eng->counted, tx), drop_collectives, eng);
    return reduce_pool_start(&eng->pool, set->nthreads - 1, chunked_compute);
}

void engine_fini(engine_t *eng)
{
    reduce_pool_stop(&eng->pool);
}
