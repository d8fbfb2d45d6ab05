/*
 * coll_table.c - the collectives of a job: lookup, the epoch window, the
 * agreement on what a collective is and which form it takes, POSTs,
 * credits, retirement and the progress timeout.
 *
 * job->colls[stream] lists a stream's open collectives in epoch order.  A
 * message may open one only inside the window the wire protocol gives
 * (base/wire.h, "Epoch window"); a collective is done when its form says so
 * (armed, nothing left to forward), and the done ones at the front of the
 * list retire in epoch order, which moves the window.  A collective that goes
 * (retired, or dropped with its job) tells its form through the form's ops,
 * whose state then lives on only as long as something still holds it
 * (coll_item.c).
 */
#include "coll_table.h"

#include <stdio.h>
#include <stdlib.h>

#include "dc_window.h"

#include "base/clock.h"

/* ------------------------------------------------------------------------ */
/* stream kinds                                                              */

static int only_root(int r, int root, int nranks)
{
    (void)nranks;
    return r == root;
}

static int all_but_root(int r, int root, int nranks)
{
    (void)nranks;
    return r != root;
}

static int all_to_root_0(int r, int root, int nranks)
{
    (void)r;
    (void)nranks;
    return root == 0;
}

static int every_rank(int r, int root, int nranks)
{
    (void)r;
    (void)root;
    (void)nranks;
    return 1;
}

const coll_stream_t coll_streams[INC_STREAM_COUNT] = {
    /* Every rank's block goes once to the switch and on to the N-1 others. */
    [INCMOE_STREAM_ALLGATHER] = {.data = 1, .contributes = only_root, .receives = all_but_root},
    /* The N-1 others' partials of each root's shard, reduced, go to the root. */
    [INCMOE_STREAM_REDUCESCATTER] = {.data = 1,
                                     .contributes = all_but_root,
                                     .receives = only_root,
                                     .reduces = 1},
    /* All N vectors, reduced, go to all N. */
    [INCMOE_STREAM_ALLREDUCE] = {.data = 1,
                                 .contributes = all_to_root_0,
                                 .receives = every_rank,
                                 .reduces = 1,
                                 .shared_window = 1},
    [INCMOE_STREAM_BARRIER] = {.data = 0},
    /* Each row of a rank goes once to the switch and on to the ranks its set names. */
    [INCMOE_STREAM_DISPATCH] = {.data = 1, .planned = 1},
    /* The partials of the ranks in a row's set, reduced, go to the row's owner. */
    [INCMOE_STREAM_COMBINE] = {.data = 1, .planned = 1, .reduces = 1},
};

/* ------------------------------------------------------------------------ */
/* opening and retiring                                                      */

static void coll_free(coll_t *c)
{
    if (c->state != NULL) /* a form that set itself may have failed before making any */
        c->form->detach(c);
    free(c->posted);
    free(c->relayed);
    free(c->bytes);
    free(c);
}

void coll_drop_job(job_t *job)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        while (job->colls[s] != NULL) {
            coll_t *c = job->colls[s];
            job->colls[s] = c->next;
            coll_free(c);
        }
    }
}

/* Fail the job if a rank has left: a new collective could never complete.  A rank that left
   and whose connection then closed has none (member_conn_lost); an active job loses no other
   connection. */
static int job_all_present(membership_t *m, job_t *job, int stream, uint64_t epoch)
{
    for (int r = 0; job->nleft > 0 && r < job->nranks; r++) {
        if (job->conns[r] == NULL || job->conns[r]->left) {
            job_fail(m, job, INCMOE_ERR_PEER_FAILED, r,
                     "rank %d left the job; %s epoch %llu can never complete", r,
                     inc_wire_stream_name(stream), (unsigned long long)epoch);
            return 0;
        }
    }
    return 1;
}

static coll_t *coll_new(membership_t *m, job_t *job, conn_t *conn, int stream, uint64_t epoch)
{
    coll_t *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->posted = calloc((size_t)job->nranks, 1);
        c->bytes = calloc((size_t)job->nranks, sizeof(uint64_t));
        if (job->tree)
            c->relayed = calloc((size_t)job->nranks, 1);
    }
    if (c == NULL || c->posted == NULL || c->bytes == NULL || (job->tree && c->relayed == NULL)) {
        if (c != NULL) {
            free(c->posted);
            free(c->relayed);
            free(c->bytes);
        }
        free(c);
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, conn->rank, "switch out of memory");
        return NULL;
    }
    c->stream = stream;
    c->epoch = epoch;
    c->opened = inc_now_s();
    /* Keep the list in epoch order: retirement walks it from the front. */
    coll_t **pp = &job->colls[stream];
    while (*pp != NULL && (*pp)->epoch < epoch)
        pp = &(*pp)->next;
    c->next = *pp;
    *pp = c;
    return c;
}

coll_t *coll_get(membership_t *m, job_t *job, conn_t *conn, int stream, uint64_t epoch)
{
    job->moved_at[stream] = inc_now_s();
    for (coll_t *c = job->colls[stream]; c != NULL; c = c->next)
        if (c->epoch == epoch)
            return c;
    if (epoch <= job->retired[stream] || epoch > job->retired[stream] + INCMOE_WIRE_OPEN_EPOCHS) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank,
                "rank %d sent %s epoch %llu; open epochs are %llu..%llu", conn->rank,
                inc_wire_stream_name(stream), (unsigned long long)epoch,
                (unsigned long long)job->retired[stream] + 1,
                (unsigned long long)job->retired[stream] + INCMOE_WIRE_OPEN_EPOCHS);
        return NULL;
    }
    if (!job_all_present(m, job, stream, epoch))
        return NULL;
    return coll_new(m, job, conn, stream, epoch);
}

static void coll_retire(job_t *job, int stream)
{
    const uint64_t was = job->retired[stream];
    while (job->colls[stream] != NULL && job->colls[stream]->done &&
           job->colls[stream]->epoch == job->retired[stream] + 1) {
        coll_t *c = job->colls[stream];
        job->colls[stream] = c->next;
        job->retired[stream] = c->epoch;
        coll_free(c);
    }
    if (stream == INCMOE_STREAM_COMBINE && job->retired[stream] != was)
        dc_window_pump(job); /* set chunks of the next combines may cross links now */
}

void coll_check_done(job_t *job, coll_t *c)
{
    if (c->armed && c->remaining == 0 && !c->done) {
        c->done = 1;
        job->moved_at[c->stream] = inc_now_s();
        coll_retire(job, c->stream);
    }
}

/* ------------------------------------------------------------------------ */
/* what the ranks say about a collective                                     */

int coll_describe(membership_t *m, job_t *job, conn_t *conn, coll_t *c,
                  const struct inc_wire_hdr *h)
{
    if (!c->has_desc) {
        c->has_desc = 1;
        c->sig = h->sig;
        c->dtype = h->dtype;
        c->redop = h->redop;
        return 1;
    }
    if (c->dtype != h->dtype || c->redop != h->redop) {
        JOB_BAD(m, job, INCMOE_ERR_MISMATCH, conn->rank,
                "ranks disagree on %s epoch %llu: rank %d has %s %s, others %s %s",
                inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, conn->rank,
                incmoe_dtype_name(h->dtype), incmoe_redop_name(h->redop),
                incmoe_dtype_name(c->dtype), incmoe_redop_name(c->redop));
        return 0;
    }
    if (c->sig != h->sig) {
        JOB_BAD(m, job, INCMOE_ERR_MISMATCH, conn->rank,
                "ranks disagree on %s epoch %llu: rank %d's byte counts differ from the others'",
                inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, conn->rank);
        return 0;
    }
    return 1;
}

void coll_hdr_init(struct inc_wire_hdr *h, inc_wire_msg_t msg, const job_t *job, const coll_t *c)
{
    inc_wire_hdr_init(h, msg, job->id);
    h->stream = (uint8_t)c->stream;
    h->epoch = c->epoch;
    h->sig = c->sig;
    h->dtype = (uint8_t)c->dtype;
    h->redop = (uint8_t)c->redop;
}

int coll_set_form(membership_t *m, job_t *job, conn_t *conn, coll_t *c, const coll_form_t *form)
{
    if (c->form == NULL)
        c->form = form;
    if (c->form == form)
        return 1;
    JOB_BAD(m, job, INCMOE_ERR_MISMATCH, conn->rank,
            "ranks disagree on %s epoch %llu: rank %d sent it %s, others %s",
            inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, conn->rank, form->what,
            c->form->what);
    return 0;
}

int coll_unposted(membership_t *m, job_t *job, coll_t *c, int me, const char *verb)
{
    if (!c->posted[me])
        return 1;
    JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me, "rank %d %s %s epoch %llu twice", me, verb,
            inc_wire_stream_name(c->stream), (unsigned long long)c->epoch);
    return 0;
}

int coll_post(job_t *job, coll_t *c, int me, uint64_t total)
{
    c->posted[me] = 1;
    c->bytes[me] = total;
    if (++c->nposted < job->nranks)
        return 0;
    job->all_posted_at[c->stream] = inc_now_s();
    return 1;
}

int coll_credit_left(membership_t *m, job_t *job, int me, int stream)
{
    if (me == job->parent_rep && job->inflight[me][stream] >= m->set->link_window) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "the parent switch exceeded this switch's window of %u on %s", m->set->link_window,
                inc_wire_stream_name(stream));
        return 0;
    }
    if (me != job->parent_rep && job->inflight[me][stream] >= m->set->credits) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me, "rank %d exceeded its %u credits on %s", me,
                m->set->credits, inc_wire_stream_name(stream));
        return 0;
    }
    return 1;
}

const coll_t *coll_owed(const job_t *job, int r)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        for (const coll_t *c = job->colls[s]; c != NULL; c = c->next)
            if (!c->done && !c->posted[r])
                return c;
    return NULL;
}

/* The key of a child switch port whose window (tree.c) is spent with FWDs of the stream
   waiting for it, or -1. */
static int window_full(const job_t *job, int stream)
{
    for (int p = 0; job->down != NULL && p < job->nranks; p++)
        if (job->rep[p] == p && job->down[p].head[stream] != NULL && job->down[p].left[stream] == 0)
            return p;
    return -1;
}

/*
 * The progress timeout, when every rank posted: a collective that every rank
 * posted and that is not done here while no message of its stream came and
 * none of the stream's collectives was done for the whole bound is stuck (a
 * lost or withheld message, credits that never come back), and its ranks
 * would wait for ever.  The job fails naming it, so a stall ends in an error.
 */
static void stream_check_stall(membership_t *m, job_t *job, int stream, double now)
{
    const coll_t *c = job->colls[stream];
    while (c != NULL && c->done)
        c = c->next;
    if (c == NULL)
        return;
    const double bound_s = job->progress_timeout_ms / 1000.0;
    double since = c->opened > job->all_posted_at[stream] ? c->opened : job->all_posted_at[stream];
    if (job->moved_at[stream] > since)
        since = job->moved_at[stream];
    if (now - since <= bound_s)
        return;
    char why[160] = "", window[80] = "";
    if (c->form != NULL && c->form->stalled != NULL)
        c->form->stalled(c, why, sizeof(why));
    const int p = window_full(job, stream);
    if (p >= 0)
        snprintf(window, sizeof(window), "; the window of the switch port of rank %d is spent", p);
    job_fail(m, job, INCMOE_ERR_TIMEOUT, 0,
             "%s epoch %llu: every rank posted it, and none of its messages came to this switch "
             "within %.1f s%s%s",
             inc_wire_stream_name(stream), (unsigned long long)c->epoch, bound_s, window, why);
}

/*
 * The progress timeout.  Every rank posts a stream in epoch order, so the
 * stream's oldest collective still missing a POST is the one its laggards
 * owe, and they owe it only since it was opened and the collective before it
 * had every POST (a rank may post far ahead of the others; the others are
 * not late for what they could not yet reach).  Past the bound, the job
 * fails naming (up to 8 of) the ranks that did not post.
 */
static void stream_check_progress(membership_t *m, job_t *job, int stream, double now)
{
    const coll_t *c = job->colls[stream];
    while (c != NULL && c->nposted == job->nranks)
        c = c->next;
    if (c == NULL) {
        stream_check_stall(m, job, stream, now);
        return;
    }
    const double bound_s = job->progress_timeout_ms / 1000.0;
    double since = c->opened > job->all_posted_at[stream] ? c->opened : job->all_posted_at[stream];
    if (now - since <= bound_s)
        return;
    char ranks[96] = "";
    size_t len = 0;
    int missing = 0, first = -1;
    for (int r = 0; r < job->nranks; r++) {
        if (c->posted[r])
            continue;
        if (first < 0)
            first = r;
        if (missing < 8)
            len +=
                (size_t)snprintf(ranks + len, sizeof(ranks) - len, "%s%d", missing ? ", " : "", r);
        missing++;
    }
    if (missing > 8)
        snprintf(ranks + len, sizeof(ranks) - len, " and %d more", missing - 8);
    job_fail(m, job, INCMOE_ERR_TIMEOUT, first,
             "%s epoch %llu: rank%s %s did not post within %.1f s", inc_wire_stream_name(stream),
             (unsigned long long)c->epoch, missing > 1 ? "s" : "", ranks, bound_s);
}

void coll_check_progress(membership_t *m, job_t *job, double now)
{
    if (job->progress_timeout_ms <= 0)
        return; /* 0: the job waits for ever */
    for (int s = 0; s < INC_STREAM_COUNT && job->state == JOB_ACTIVE; s++)
        stream_check_progress(m, job, s, now);
}
