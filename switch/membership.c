/*
 * membership.c - jobs and their members.
 *
 * Joining is tree_join.c's, which calls down into this file.  A new job is
 * admitted only if its worst-case buffering (job_memory_bound) still fits
 * under --max-memory beside the jobs already admitted; once all N ranks are
 * in, every rank gets the JOIN_ACK with everyone's worker address and the
 * job's random ring token, and the job is active.  A job ends when a rank fails, breaks the
 * protocol, falls silent or everyone leaves; its memory reservation and id are freed at once, its
 * last buffers when the sends that carry them complete.
 */
#include "membership.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "coll_table.h"
#include "shrink.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/text.h"

#define SUBSYS "switch"

void membership_init(membership_t *m, const switch_settings_t *set, switch_stats_t *stats,
                     switch_tx_t tx, void (*drop_collectives)(void *engine, job_t *job),
                     void *engine)
{
    *m = (membership_t){.set = set,
                        .stats = stats,
                        .tx = tx,
                        .drop_collectives = drop_collectives,
                        .engine = engine};
}

/* ------------------------------------------------------------------------ */
/* memory accounting                                                         */

void job_account(membership_t *m, job_t *job, size_t n)
{
    job->mem_used += n;
    m->mem_used += n;
    if (job->mem_used > job->mem_peak)
        job->mem_peak = job->mem_used;
    if (m->mem_used > m->stats->mem_peak)
        m->stats->mem_peak = m->mem_used;
}

void *job_alloc(membership_t *m, job_t *job, size_t n)
{
    if (job->mem_used + n > job->mem_bound) {
        /* Credits make this impossible for a rank that follows the protocol. */
        log_error(SUBSYS, "job %llu: %zu more bytes would exceed its bound of %zu",
                  (unsigned long long)job->id, n, job->mem_bound);
        return NULL;
    }
    void *p = malloc(n ? n : 1);
    if (p != NULL)
        job_account(m, job, n);
    return p;
}

void job_unaccount(membership_t *m, job_t *job, size_t n)
{
    job->mem_used -= n;
    m->mem_used -= n;
}

void job_free_mem(membership_t *m, job_t *job, void *p, size_t n)
{
    if (p == NULL)
        return;
    free(p);
    job_unaccount(m, job, n);
}

static size_t job_memory_bound(const switch_settings_t *set, int nranks)
{
    /* Contributions: N ranks x credits in each of the 3 data streams, each at most a chunk, or
       for a SMALL a chunk and its table of N sizes (8 N bytes).  Results exist only for
       complete items: a ReduceScatter item holds N-1 contributions, so at most 2 x credits
       results (N >= 2), an AllReduce item N, so at most credits.  A small collective's results
       (one buffer of at most a chunk; small.c) outlive the credits they return, but a stream
       has at most credits small collectives sending results, as a rank regains a credit only
       with its result: credits more chunks per stream. */
    const size_t c = set->chunk_size, n = (size_t)nranks;
    size_t bound = (size_t)set->credits * ((c + 8 * n) * n * 3 + c * 3 + c * 3);
    /* Below a parent (tree.c) its AllGather blocks and AllReduce results take this switch's
       window, a window of chunks per stream, and its ReduceScatter partials a window per
       owner beneath this switch (at most N owners). */
    if (set->parent[0] != '\0')
        bound += (size_t)set->link_window * c * (2 + n);
    return bound;
}

/*
 * What dispatch and combine add to a job that uses them (dc_form.c): per stream, N ranks x
 * credits of contributions of at most a chunk each (a DATA, or a SMALL's pieces, whose plan
 * fields count with the plans below); combine results, one per item of at most a chunk, and each
 * item holds its owner's set chunk, so on one switch at most N x credits of them; and the plans of
 * the open collectives: each rank's POST (fixed fields and 2 N counts), and per collective N x N
 * counts of what went where, for about credits collectives per stream.  While a plan copies the
 * SMALLs' pieces into their items, their N buffers exist twice: one plan at a time.  The dispatch
 * copies toward each rank are built only as its output queue takes them (--egress-chunks bounds
 * them per connection) and are not charged here.  The low-latency form (ll_form.c) fits the
 * same terms: its LLs take the same credits as the contributions above, its LL_FWDs are built
 * as the queues take them, and a combine whose results go out adds a table of N x N offsets;
 * as it holds a credit of every rank until they went, at most credits such combines at once.
 *
 * Over a tree (its job has switch ports) a child's dispatch chunks take its credits here as a
 * rank's do, and the parent's this switch's window (tree.c): a window of chunks.  The
 * combine's set chunks between switches take a window per owner and link (dc_window.c says why
 * that cannot deadlock): an item takes its owner's set chunk under one of the owner's credits
 * if the owner is a rank here, else under the window of the link toward the owner, and only
 * such an item holds a result and a partial of each switch port (a partial answers a set chunk
 * this switch sent); items that wait for their set chunk hold only their ranks' partials, each
 * under a credit.  So per item with its set chunk in: a result and a partial per switch port,
 * and per owner beyond a link, a window of set chunks.
 */
static size_t job_dc_memory_bound(const switch_settings_t *set, const job_t *job)
{
    const size_t c = set->chunk_size, n = (size_t)job->nranks;
    const size_t plan = n * (sizeof(struct inc_wire_dc_post) + 8 * n) + 12 * n * n + 16 * n + 256 +
                        INCMOE_REFUSAL_MAX; /* + the lowest refusal's reason */
    const size_t ll_offsets = n * n * sizeof(uint64_t);
    size_t switch_ports = 0, taken = 0, beyond = 0;
    for (int r = 0; r < job->nranks; r++) {
        const int p = job->rep[r];
        if (job->conns[p] == NULL || job->conns[p]->role == CONN_RANK) {
            taken += set->credits; /* r's set chunks here, under its credits */
            continue;
        }
        const size_t window = p == job->parent_rep ? set->link_window
                              : job->down != NULL  ? job->down[p].granted
                                                   : 0;
        taken += window;
        beyond += window;
        switch_ports += p == r;
    }
    size_t bound = (size_t)set->credits * (2 * n * c + 2 * plan + ll_offsets) + n * c;
    bound += taken * c * (1 + switch_ports) + beyond * c;
    if (job->parent_rep >= 0)
        bound += (size_t)set->link_window * c;
    return bound;
}

int job_admit_dc(membership_t *m, job_t *job, int rank)
{
    if (job->dc_admitted)
        return 1;
    size_t more = job_dc_memory_bound(m->set, job);
    if (m->mem_reserved + more > m->set->max_memory) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, rank,
                 "switch memory: dispatch and combine need %zu more bytes, %zu of %zu already "
                 "reserved",
                 more, m->mem_reserved, m->set->max_memory);
        return 0;
    }
    job->dc_admitted = 1;
    job->mem_bound += more;
    m->mem_reserved += more;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* failure and retirement                                                    */

/* Move a live job to the orphans, where it waits for its sends. */
static void job_unlink(membership_t *m, job_t *job)
{
    for (job_t **pp = &m->jobs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == job) {
            *pp = job->next;
            job->next = m->orphans;
            m->orphans = job;
            return;
        }
    }
}

/* The job is over: drop its collectives, free its id and its memory reservation. */
static void job_retire(membership_t *m, job_t *job)
{
    m->drop_collectives(m->engine, job);
    job_unlink(m, job);
    m->mem_reserved -= job->mem_bound;
}

void job_fail(membership_t *m, job_t *job, incmoe_status_t status, int rank, const char *fmt, ...)
{
    if (job->state == JOB_FAILED)
        return;
    char text[INCMOE_WIRE_MAX_TEXT - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_warn(SUBSYS, "job %llu failed: %s (%s)", (unsigned long long)job->id, text,
             incmoe_strerror(status));
    m->stats->jobs_failed++;
    job->state = JOB_FAILED;
    /* Every port hears it once, the parent too: the whole tree fails the job. */
    for (int r = 0; r < job->nranks; r++) {
        conn_t *c = job->conns[r];
        if (c != NULL && c->state == CONN_JOINED && !c->left && job_port_first(job, r))
            m->tx.ops->send_error(m->tx.server, c, job->id, status, (uint32_t)(rank < 0 ? 0 : rank),
                                  text);
    }
    if (job->parent != NULL && job->parent_rep < 0 && job->parent->state == CONN_JOINED)
        m->tx.ops->send_error(m->tx.server, job->parent, job->id, status,
                              (uint32_t)(rank < 0 ? 0 : rank), text);
    job_retire(m, job); /* the engine's hook drops what waits to go up, and the collectives */
    job->mem_bound = (size_t)-1; /* buffers still in flight are freed later */
}

static void job_free(job_t *job)
{
    for (int r = 0; job->addr != NULL && r < job->nranks; r++)
        free(job->addr[r]);
    free(job->addr);
    free(job->addr_len);
    free(job->ack_payload);
    free(job->conns);
    free(job->inflight);
    free(job->down);
    free(job->owners);
    for (int p = 0; job->clinks != NULL && p < job->nranks; p++)
        free(job->clinks[p].out);
    free(job->clinks);
    free(job->rep);
    shrink_free(job);
    free(job);
}

int job_port_first(const job_t *job, int r)
{
    if (job->rep != NULL)
        return job->rep[r] == r;
    for (int q = 0; q < r; q++)
        if (job->conns[q] == job->conns[r])
            return 0;
    return 1;
}

/* The link to the parent goes with the last of the job's own members. */
static void job_let_parent_go(membership_t *m, job_t *job)
{
    conn_t *up = job->parent;
    if (up == NULL)
        return;
    for (int r = 0; r < job->nranks; r++)
        if (job->conns[r] == up)
            job->conns[r] = NULL;
    job->parent = NULL;
    up->job = NULL;
    if (job->state == JOB_ACTIVE && !up->left) {
        struct inc_wire_hdr h; /* everyone beneath left in order: so does this switch */
        inc_wire_hdr_init(&h, WIRE_MSG_LEAVE, job->id);
        h.rank = (uint32_t)(job->up_rank < 0 ? 0 : job->up_rank);
        m->tx.ops->send(m->tx.server, up, &h, NULL, 0, NULL, NULL);
    }
    m->tx.ops->drop(m->tx.server, up);
}

/* Has the job a collective this switch has not finished (one listed and not done: a done
   one stays listed only behind an older one that is not)? */
static int job_owes_tree(const job_t *job)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        for (const coll_t *c = job->colls[s]; c != NULL; c = c->next)
            if (!c->done)
                return 1;
    return 0;
}

/* One line per stream that carried messages (base/wire.h, "The low-latency form"). */
static void job_log_trips(const job_t *job)
{
    char counts[768];
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        if (trips_format(&job->trips, s, counts, sizeof(counts)))
            log_info(SUBSYS, "job %llu trips %s: %s", (unsigned long long)job->id,
                     inc_wire_stream_name(s), counts);
}

void job_release(membership_t *m, job_t *job)
{
    if (job->refs > 0) /* first: every send completion asks, and counting members is O(N) */
        return;
    int members = 0;
    for (int r = 0; r < job->nranks; r++)
        members += job->conns[r] != NULL && job->conns[r] != job->parent;
    if (members > 0)
        return;
    /* Beneath a parent, the ranks' leaving in order does not end what this switch owes the
       tree: a combine's partials may wait here for the owner's set chunk, a chunk for the
       parent's credits.  The job stays until its collectives are done (the engine's progress
       check asks again) or it fails (their progress timeout bounds the wait). */
    if (job->state == JOB_ACTIVE && job->parent != NULL && job_owes_tree(job))
        return;
    job_let_parent_go(m, job);
    if (job->state != JOB_FAILED) {
        /* Everyone left in order. */
        job->state = JOB_FAILED;
        job_retire(m, job);
        if (job->refs > 0)
            return;
    }
    for (job_t **pp = &m->orphans; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == job) {
            *pp = job->next;
            break;
        }
    }
    log_info(SUBSYS, "job %llu released (peak %zu bytes buffered)", (unsigned long long)job->id,
             job->mem_peak);
    job_log_trips(job);
    job_free(job);
}

void member_fail_all(membership_t *m, const char *why)
{
    while (m->jobs != NULL)
        job_fail(m, m->jobs, INCMOE_ERR_PEER_FAILED, 0, "%s", why);
}

/* ------------------------------------------------------------------------ */
/* joining                                                                   */

void member_refuse(membership_t *m, conn_t *conn, uint64_t job, incmoe_status_t st,
                   const char *text)
{
    log_warn(SUBSYS, "refused a rank of job %llu: %s", (unsigned long long)job, text);
    m->stats->jobs_refused++;
    m->tx.ops->send_error(m->tx.server, conn, job, st, 0, text);
    /* A child switch fails its job on the ERROR and closes the link itself: dropped now, its
       link could fail before the ERROR is read, and the ranks would lose the reason.  Unjoined,
       the connection is dropped by member_tick after the JOIN timeout at the latest. */
    if (conn->role != CONN_CHILD)
        m->tx.ops->drop(m->tx.server, conn);
}

job_t *job_find(membership_t *m, uint64_t id)
{
    for (job_t *j = m->jobs; j != NULL; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

static job_t *job_new(membership_t *m, uint64_t id, int nranks)
{
    job_t *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return NULL;
    job->members = m;
    job->id = id;
    job->nranks = nranks;
    job->conns = calloc((size_t)nranks, sizeof(conn_t *));
    job->addr = calloc((size_t)nranks, sizeof(void *));
    job->addr_len = calloc((size_t)nranks, sizeof(uint32_t));
    job->inflight = calloc((size_t)nranks, sizeof(*job->inflight));
    job->timeout_ms = m->set->timeout_ms;
    job->parent_rep = -1;
    job->up_rank = -1;
    if (RAND_bytes(job->ring_token, sizeof(job->ring_token)) != 1) {
        job_free(job);
        return NULL;
    }
    if (job->conns == NULL || job->addr == NULL || job->addr_len == NULL || job->inflight == NULL) {
        job_free(job);
        return NULL;
    }
    job->mem_bound = job_memory_bound(m->set, nranks);
    job->next = m->jobs;
    m->jobs = job;
    m->mem_reserved += job->mem_bound;
    m->stats->jobs_started++;
    return job;
}

/* A JOIN_ACK went out (or failed): its payload, which the job owns, may go with the job. */
static void ack_sent_cb(void *arg, ucs_status_t status)
{
    (void)status;
    job_t *job = arg;
    job->refs--;
    job_release(job->members, job);
}

/* Each port's key: the lowest rank its connection covers. */
static int job_set_ports(job_t *job)
{
    if (job->rep == NULL && (job->rep = malloc((size_t)job->nranks * sizeof(int))) == NULL)
        return 0;
    job->nlocal = 0;
    for (int r = 0; r < job->nranks; r++) {
        int q = 0;
        while (job->conns[q] != job->conns[r])
            q++;
        job->rep[r] = q;
        job->nlocal += job->conns[r] != job->parent;
        if (job->conns[r]->role == CONN_CHILD)
            job->tree = 1;
    }
    job->parent_rep = -1;
    for (int r = 0; r < job->nranks && job->parent_rep < 0; r++)
        if (job->parent != NULL && job->conns[r] == job->parent)
            job->parent_rep = r;
    if (job->parent_rep >= 0)
        job->tree = 1;
    for (conn_t **c = job->conns; c < job->conns + job->nranks; c++)
        if ((*c)->role == CONN_CHILD)
            (*c)->rank = job->rep[c - job->conns];
    return 1;
}

void job_form(membership_t *m, job_t *job)
{
    if (!job_set_ports(job)) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, 0, "switch out of memory");
        return;
    }
    size_t len = sizeof(struct inc_wire_join_ack);
    for (int r = 0; r < job->nranks; r++)
        len += sizeof(uint32_t) + job->addr_len[r];
    char *payload = malloc(len);
    if (payload == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, 0, "switch out of memory");
        return;
    }
    struct inc_wire_join_ack ack = {.nranks = (uint32_t)job->nranks,
                                    .credits = m->set->credits,
                                    .chunk_size = m->set->chunk_size,
                                    .timeout_ms = (uint32_t)job->timeout_ms};
    memcpy(ack.ring_token, job->ring_token, sizeof(ack.ring_token));
    memcpy(payload, &ack, sizeof(ack));
    size_t pos = sizeof(ack);
    for (int r = 0; r < job->nranks; r++) {
        memcpy(payload + pos, &job->addr_len[r], sizeof(uint32_t));
        pos += sizeof(uint32_t);
        if (job->addr_len[r] > 0) /* a rank without an address has none to copy (NULL) */
            memcpy(payload + pos, job->addr[r], job->addr_len[r]);
        pos += job->addr_len[r];
    }
    /* One payload shared by the sends; it lives as long as the job, and each send holds the
       job until it completes, so a job whose ranks all vanish keeps it while UCX reads it. */
    job->ack_payload = payload;
    int ports = 0;
    for (int r = 0; r < job->nranks; r++) {
        if (job->rep[r] != r || job->conns[r] == job->parent)
            continue;
        struct inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_JOIN_ACK, job->id);
        h.rank = (uint32_t)r;
        h.length = len;
        job->refs++;
        ports++;
        m->tx.ops->send(m->tx.server, job->conns[r], &h, payload, len, ack_sent_cb, job);
    }
    job->state = JOB_ACTIVE;
    if (job->progress_timeout_ms == 0)
        job->progress_timeout_ms = m->set->progress_timeout_ms;
    log_info(SUBSYS,
             "job %llu formed: %d ranks (%d beneath this switch, %d ports%s), timeout %d ms, "
             "progress timeout %d ms",
             (unsigned long long)job->id, job->nranks, job->nlocal, ports,
             job->parent != NULL ? " and the parent" : "", job->timeout_ms,
             job->progress_timeout_ms);
}

job_t *member_admit(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr, uint32_t nranks)
{
    char text[200];
    if (shrink_refuses_join(m, hdr->job, text, sizeof(text))) {
        member_refuse(m, conn, hdr->job, INCMOE_ERR_JOB, text);
        return NULL;
    }
    job_t *job = job_find(m, hdr->job);
    if (job == NULL) {
        size_t bound = job_memory_bound(m->set, (int)nranks);
        if (m->mem_reserved + bound > m->set->max_memory) {
            snprintf(text, sizeof(text),
                     "switch memory: job needs %zu bytes, %zu of %zu already reserved", bound,
                     m->mem_reserved, m->set->max_memory);
            member_refuse(m, conn, hdr->job, INCMOE_ERR_NO_MEMORY, text);
            return NULL;
        }
        job = job_new(m, hdr->job, (int)nranks);
        if (job == NULL) {
            member_refuse(m, conn, hdr->job, INCMOE_ERR_NO_MEMORY, "switch out of memory");
            return NULL;
        }
    }
    if ((int)nranks != job->nranks) {
        snprintf(text, sizeof(text), "rank %u says the job has %u ranks, others said %d", hdr->rank,
                 nranks, job->nranks);
        member_refuse(m, conn, hdr->job, INCMOE_ERR_MISMATCH, text);
        return NULL;
    }
    /* addr[] stays once a rank joined: a rank joins a job once, even after its first
       connection has gone. */
    if (job->state != JOB_FORMING || job->conns[hdr->rank] != NULL ||
        job->addr[hdr->rank] != NULL) {
        snprintf(text, sizeof(text), "rank %u of job %llu has already joined", hdr->rank,
                 (unsigned long long)hdr->job);
        member_refuse(m, conn, hdr->job, INCMOE_ERR_JOB, text);
        return NULL;
    }
    return job;
}

/* ------------------------------------------------------------------------ */
/* members' messages                                                         */

ucs_status_t member_screen(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h, int rndv)
{
    job_t *job = conn->job;
    if (h->msg == WIRE_MSG_SHRINK && conn->role == CONN_RANK)
        return UCS_OK; /* shrink.c checks it: a failed job's survivors ask it most */
    if (job->state == JOB_FAILED)
        return UCS_ERR_CANCELED; /* the ranks already know; drop what is still coming */
    /* A child speaks for its port (its key, once the job formed), but relays the dispatch and
       combine POSTs of the ranks it covers as theirs (dc_form.c), names the rank at fault in an
       ERROR as a switch does, and no rank in a HEARTBEAT or LEAVE; the parent speaks for all but
       this switch's ranks. */
    int rank_checked = conn->role == CONN_RANK || (conn->role == CONN_CHILD && job->rep != NULL);
    if (rank_checked && conn->role == CONN_CHILD &&
        (h->msg == WIRE_MSG_HEARTBEAT || h->msg == WIRE_MSG_LEAVE ||
         (h->msg == WIRE_MSG_ERROR && h->rank < (uint32_t)job->nranks) ||
         (h->msg == WIRE_MSG_POST && inc_wire_is_dc(h->stream) && h->rank < (uint32_t)job->nranks &&
          job->rep[h->rank] == conn->rank)))
        rank_checked = 0;
    if (h->job != job->id || (rank_checked && h->rank != (uint32_t)conn->rank)) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank,
                "%s %d sent a message claiming job %llu rank %u",
                conn->role == CONN_RANK ? "rank" : "the switch port of rank", conn->rank,
                (unsigned long long)h->job, h->rank);
        return UCS_ERR_INVALID_PARAM;
    }
    if (h->msg == WIRE_MSG_SHRINK) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank,
                "the switch port of rank %d sent SHRINK, which only ranks send", conn->rank);
        return UCS_ERR_INVALID_PARAM;
    }
    int forming_ok =
        h->msg == WIRE_MSG_HEARTBEAT || h->msg == WIRE_MSG_LEAVE ||
        (conn->role == CONN_CHILD && h->msg == WIRE_MSG_TREE_JOIN) ||
        (conn->role == CONN_PARENT && (h->msg == WIRE_MSG_JOIN_ACK || h->msg == WIRE_MSG_ERROR));
    if (job->state != JOB_ACTIVE && !forming_ok) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d sent %s before the job formed",
                conn->rank, inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
    int bulk =
        h->msg == WIRE_MSG_DATA || h->msg == WIRE_MSG_SMALL || h->msg == WIRE_MSG_LL ||
        (conn->role == CONN_PARENT && (h->msg == WIRE_MSG_FWD || h->msg == WIRE_MSG_SMALL_FWD));
    if (rndv && !bulk) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank, "rank %d sent %s rendezvous", conn->rank,
                inc_wire_msg_name(h->msg));
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

void member_leave(membership_t *m, conn_t *conn)
{
    (void)m;
    if (!conn->left) {
        conn->left = 1;
        conn->job->nleft++;
    }
}

void member_on_error(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h, const void *text,
                     size_t length)
{
    /* The rank's words reach the log and every peer: printable and bounded only. */
    char copy[INCMOE_WIRE_MAX_TEXT + 1];
    inc_text_sanitize(copy, sizeof(copy), text, length);
    incmoe_status_t st = h->status < 0 ? (incmoe_status_t)h->status : INCMOE_ERR_PROTOCOL;
    /* A switch's ERROR names the rank at fault; a rank's is its own. */
    int at = conn->role != CONN_RANK && h->rank < (uint32_t)conn->job->nranks ? (int)h->rank
                                                                              : conn->rank;
    job_fail(m, conn->job, st, at, "%s", copy);
}

void member_conn_lost(membership_t *m, conn_t *conn, const char *why)
{
    job_t *job = conn->job;
    if (job == NULL)
        return;
    for (int r = 0; r < job->nranks; r++)
        if (job->conns[r] == conn)
            job->conns[r] = NULL;
    if (job->parent == conn)
        job->parent = NULL;
    conn->job = NULL;
    if (conn->role == CONN_RANK && !conn->left)
        shrink_on_lost(m, job, conn->rank);
    /* A LEAVE makes a loss orderly only once the job formed: before that the job can never
       form, and the ranks that joined hear why now.  The parent's link is never left. */
    if (job->state != JOB_FAILED &&
        (!conn->left || job->state == JOB_FORMING || conn->role == CONN_PARENT)) {
        m->stats->peers_lost++;
        if (conn->role == CONN_PARENT)
            job_fail(m, job, INCMOE_ERR_PEER_FAILED, 0,
                     "the parent switch %s of job %llu is gone: %s", m->set->parent,
                     (unsigned long long)job->id, why);
        else if (conn->role == CONN_CHILD)
            job_fail(m, job, INCMOE_ERR_PEER_FAILED, conn->rank,
                     "the child switch serving rank %d of job %llu is gone: %s", conn->rank,
                     (unsigned long long)job->id, why);
        else
            job_fail(m, job, INCMOE_ERR_PEER_FAILED, conn->rank, "rank %d of job %llu is gone: %s",
                     conn->rank, (unsigned long long)job->id, why);
    }
    job_release(m, job);
}

/* ------------------------------------------------------------------------ */
/* liveness                                                                  */

void member_tick(membership_t *m, conn_t *conns)
{
    double now = inc_now_s();
    int new_timeout_ms = m->set->timeout_ms;
    for (conn_t *c = conns; c != NULL; c = c->next) {
        if (c->state == CONN_DEAD)
            continue;
        int timeout_ms = c->job != NULL ? c->job->timeout_ms : new_timeout_ms;
        if (c->state == CONN_NEW) {
            if (now - c->created > new_timeout_ms / 1000.0) {
                log_warn(SUBSYS, "a connection sent no JOIN within %d ms", new_timeout_ms);
                m->tx.ops->drop(m->tx.server, c);
            }
            continue;
        }
        if (now - c->last_rx > timeout_ms / 1000.0) {
            char why[96];
            snprintf(why, sizeof(why), "silent for %.1f s (bound %d ms)", now - c->last_rx,
                     timeout_ms);
            m->tx.ops->drop(m->tx.server, c);
            member_conn_lost(m, c, why);
            continue;
        }
        if (now - c->last_tx > timeout_ms / 4000.0) {
            struct inc_wire_hdr h;
            inc_wire_hdr_init(&h, WIRE_MSG_HEARTBEAT, c->job != NULL ? c->job->id : 0);
            m->tx.ops->send(m->tx.server, c, &h, NULL, 0, NULL, NULL);
        }
    }
}
