/*
 * shrink.c - the switch's side of incmoe_comm_shrink (shrink.h, base/wire.h "SHRINK").
 *
 * Who survives is what the switch's liveness says: the members that asked, once every member
 * whose connection lives asked.  A rank lost without asking is left out whenever it is found,
 * before the first SHRINK or during the shrink: ranks that die together are found some
 * milliseconds apart (or a timeout apart when silent), and the survivors, woken by the first,
 * cannot know of the others.  A rank lost after it asked, before the answer, is a second
 * failure: it had joined the survivors, so the shrink fails for good on every one of them.
 * The new job's id is mixed from the old one and a serial of this switch, drawn again while a
 * live job or a remembered shrunk id has it: it cannot clash with a live job, and a user's own
 * id would have to hit the same 64-bit value.
 */
#include "shrink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/shrink_wire.h"

#define SUBSYS "switch"

typedef struct job_shrink {
    uint8_t *asked;         /* [nranks] */
    double deadline;        /* the first SHRINK's time plus the job's timeout */
    int done;               /* answered: new_id and nranks hold */
    incmoe_status_t status; /* failed for good: why */
    char why[INCMOE_WIRE_MAX_TEXT];
    uint64_t new_id;
    int new_nranks;
} job_shrink_t;

static void ack_sent_cb(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

static void send_ack(membership_t *m, conn_t *conn, uint64_t old_job, incmoe_status_t status,
                     uint64_t new_job, int rank, int nranks, const char *why)
{
    struct inc_wire_shrink_ack *ack = malloc(sizeof(*ack));
    if (ack == NULL) {
        log_error(SUBSYS, "job %llu: no memory for a SHRINK_ACK", (unsigned long long)old_job);
        return;
    }
    inc_wire_shrink_ack_pack(ack, status, new_job, (uint32_t)rank, (uint32_t)nranks, why);
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_SHRINK_ACK, old_job);
    h.rank = (uint32_t)conn->rank;
    h.status = (int16_t)status;
    h.length = sizeof(*ack);
    m->tx.ops->send(m->tx.server, conn, &h, ack, sizeof(*ack), ack_sent_cb, ack);
}

static int live(const job_t *job, int r)
{
    return job->conns[r] != NULL && !job->conns[r]->left;
}

/* The shrink fails for good: every member that asked and lives hears why. */
static void shrink_fail(membership_t *m, job_t *job, incmoe_status_t status, const char *why)
{
    job_shrink_t *js = job->shrink;
    js->status = status;
    snprintf(js->why, sizeof(js->why), "%s", why);
    log_warn(SUBSYS, "job %llu: shrink failed: %s", (unsigned long long)job->id, why);
    for (int r = 0; r < job->nranks; r++)
        if (js->asked[r] && live(job, r))
            send_ack(m, job->conns[r], job->id, status, 0, 0, 0, why);
}

static int id_taken(const membership_t *m, uint64_t id)
{
    for (const job_t *j = m->jobs; j != NULL; j = j->next)
        if (j->id == id)
            return 1;
    for (unsigned i = 0; i < INC_SHRUNK_IDS; i++)
        if (m->shrunk[i] == id)
            return 1;
    return 0;
}

static uint64_t new_job_id(membership_t *m, uint64_t old)
{
    uint64_t id;
    do
        id = inc_mix64(old ^ inc_mix64(++m->shrink_serial));
    while (id == 0 || id == old || id_taken(m, id));
    return id;
}

/* Every live member asked: number the askers densely, tell each, remember the old id. */
static void shrink_finish(membership_t *m, job_t *job)
{
    job_shrink_t *js = job->shrink;
    int n = 0;
    for (int r = 0; r < job->nranks; r++)
        if (live(job, r) && !js->asked[r])
            return;
    for (int r = 0; r < job->nranks; r++) {
        js->asked[r] = (uint8_t)(js->asked[r] && live(job, r)); /* left since: not numbered */
        n += js->asked[r];
    }
    if (n == 0)
        return;
    js->new_id = new_job_id(m, job->id);
    js->new_nranks = n;
    js->done = 1;
    m->shrunk[m->shrunk_next++ % INC_SHRUNK_IDS] = job->id;
    log_info(SUBSYS, "job %llu shrinks to job %llu: %d of %d ranks", (unsigned long long)job->id,
             (unsigned long long)js->new_id, n, job->nranks);
    for (int r = 0, k = 0; r < job->nranks; r++)
        if (js->asked[r])
            send_ack(m, job->conns[r], job->id, INCMOE_OK, js->new_id, k++, n, NULL);
}

/* Why this SHRINK cannot go on, or NULL. */
static const char *refusal(membership_t *m, const conn_t *conn, const job_t *job,
                           const struct inc_wire_hdr *h, incmoe_status_t *st, char *text,
                           size_t text_len)
{
    *st = INCMOE_ERR_PROTOCOL;
    if (conn->role != CONN_RANK || h->job != job->id || h->rank != (uint32_t)conn->rank) {
        snprintf(text, text_len, "a SHRINK of job %llu rank %u from rank %d of job %llu",
                 (unsigned long long)h->job, h->rank, conn->rank, (unsigned long long)job->id);
        return text;
    }
    *st = INCMOE_ERR_UNSUPPORTED;
    int ports = m->set->parent[0] != '\0' || job->tree;
    for (int r = 0; r < job->nranks; r++)
        ports |= job->conns[r] != NULL && job->conns[r]->role != CONN_RANK;
    if (ports) {
        snprintf(text, text_len, "job %llu spans a tree of switches, which cannot shrink it",
                 (unsigned long long)job->id);
        return text;
    }
    *st = INCMOE_ERR_JOB;
    if (job->state == JOB_FORMING) {
        snprintf(text, text_len, "job %llu has not formed: there is nothing to shrink",
                 (unsigned long long)job->id);
        return text;
    }
    return NULL;
}

void shrink_on_request(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h)
{
    job_t *job = conn->job;
    char text[INCMOE_WIRE_MAX_TEXT];
    incmoe_status_t st;
    if (refusal(m, conn, job, h, &st, text, sizeof(text)) != NULL) {
        log_warn(SUBSYS, "refused a shrink: %s", text);
        send_ack(m, conn, h->job, st, 0, 0, 0, text);
        return;
    }
    job_shrink_t *js = job->shrink;
    if (js == NULL) {
        js = job->shrink = calloc(1, sizeof(*js));
        if (js != NULL && (js->asked = calloc((size_t)job->nranks, 1)) == NULL) {
            free(js);
            js = job->shrink = NULL;
        }
        if (js == NULL) {
            send_ack(m, conn, job->id, INCMOE_ERR_NO_MEMORY, 0, 0, 0, "switch out of memory");
            return;
        }
        js->deadline = inc_now_s() + job->timeout_ms / 1000.0;
    }
    if (js->status != INCMOE_OK) {
        send_ack(m, conn, job->id, js->status, 0, 0, 0, js->why);
        return;
    }
    if (js->done) { /* asked again: the same answer, if it was among the askers */
        int k = 0;
        for (int r = 0; r < conn->rank; r++)
            k += js->asked[r];
        if (js->asked[conn->rank]) {
            send_ack(m, conn, job->id, INCMOE_OK, js->new_id, k, js->new_nranks, NULL);
            return;
        }
        snprintf(text, sizeof(text), "rank %d asked to shrink job %llu after it was shrunk",
                 conn->rank, (unsigned long long)job->id);
        send_ack(m, conn, job->id, INCMOE_ERR_JOB, 0, 0, 0, text);
        return;
    }
    js->asked[conn->rank] = 1;
    shrink_finish(m, job);
}

void shrink_on_lost(membership_t *m, job_t *job, int rank)
{
    job_shrink_t *js = job->shrink;
    if (js == NULL || js->done || js->status != INCMOE_OK)
        return;
    if (!js->asked[rank]) { /* left out: one member fewer to wait for */
        shrink_finish(m, job);
        return;
    }
    char why[INCMOE_WIRE_MAX_TEXT];
    snprintf(why, sizeof(why),
             "rank %d of job %llu, which had asked to shrink it, was lost before the answer", rank,
             (unsigned long long)job->id);
    shrink_fail(m, job, INCMOE_ERR_PEER_FAILED, why);
}

static void tick_job(membership_t *m, job_t *job, double now)
{
    job_shrink_t *js = job->shrink;
    if (js == NULL || js->done || js->status != INCMOE_OK || now <= js->deadline)
        return;
    char why[INCMOE_WIRE_MAX_TEXT];
    int len = snprintf(why, sizeof(why), "job %llu could not shrink within %d ms: rank(s)",
                       (unsigned long long)job->id, job->timeout_ms);
    for (int r = 0; r < job->nranks && len > 0 && (size_t)len < sizeof(why); r++)
        if (live(job, r) && !js->asked[r])
            len += snprintf(why + len, sizeof(why) - (size_t)len, " %d", r);
    if (len > 0 && (size_t)len < sizeof(why))
        snprintf(why + len, sizeof(why) - (size_t)len, " never asked");
    shrink_fail(m, job, INCMOE_ERR_TIMEOUT, why);
}

void shrink_tick(membership_t *m)
{
    double now = inc_now_s();
    for (job_t *j = m->jobs; j != NULL; j = j->next)
        tick_job(m, j, now);
    for (job_t *j = m->orphans; j != NULL; j = j->next)
        tick_job(m, j, now);
}

int shrink_refuses_join(const membership_t *m, uint64_t id, char *text, size_t text_len)
{
    for (unsigned i = 0; i < INC_SHRUNK_IDS; i++) {
        if (m->shrunk[i] == id && id != 0) {
            snprintf(text, text_len,
                     "job %llu was shrunk without the ranks it lost: none joins it again",
                     (unsigned long long)id);
            return 1;
        }
    }
    return 0;
}

void shrink_free(job_t *job)
{
    if (job->shrink != NULL)
        free(job->shrink->asked);
    free(job->shrink);
    job->shrink = NULL;
}
