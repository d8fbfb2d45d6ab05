/*
 * tree_join.c - joining a job, on one switch or in a tree of switches.
 *
 * A rank joins with an eager JOIN naming its job, its rank and the job size;
 * it proved the key in the bootstrap handshake already, and the server let
 * the JOIN through only with that session's token.  A child switch joins its
 * ranks to its parent with TREE_JOINs (base/wire.h, "Switch trees"): a child
 * (--parent) keeps one link to its parent per job, made when the job's first
 * rank joins here with the same bootstrap handshake a rank runs, then sends a
 * TREE_JOIN for each rank that joins beneath (a child's own TREE_JOINs are
 * relayed as they come).  The root forms the job once all N joined and
 * answers every port with JOIN_ACK; a child takes the parent's chunk size (it
 * must equal its own: every switch cuts a window into the same chunks),
 * timeout, ring token and addresses, and answers its own ports with its own
 * credits.  Admission, forming and failure are membership.c's.
 */
#include "tree_join.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree.h"

#include "base/config.h"
#include "base/log.h"
#include "base/ucx_addr.h"

#define SUBSYS "switch"

/* Is the JOIN well formed and in range?  Refuses the connection if not. */
static int join_valid(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr,
                      const struct inc_wire_join *join, const char *addr, size_t length)
{
    char text[200];
    if (join->addr_len > INCMOE_WIRE_MAX_ADDR || sizeof(*join) + join->addr_len != length) {
        m->stats->bad_messages++;
        member_refuse(m, conn, hdr->job, INCMOE_ERR_PROTOCOL, "malformed JOIN");
        return 0;
    }
    /* The address goes to every rank of the job, whose ring hands it to UCX: one that UCX
       could not unpack is refused here, before the others see it.  The layout only, with no
       local reference: the transports are the ranks', and each rank holds the address to its
       own before its ring uses it. */
    char why[160];
    if (join->addr_len > 0 &&
        inc_ucx_addr_check(addr, join->addr_len, NULL, 0, why, sizeof(why)) != INCMOE_OK) {
        m->stats->bad_messages++;
        snprintf(text, sizeof(text), "rank %u's JOIN: %s", hdr->rank, why);
        member_refuse(m, conn, hdr->job, INCMOE_ERR_PROTOCOL, text);
        return 0;
    }
    if (join->nranks < 1 || join->nranks > INCMOE_MAX_RANKS) {
        snprintf(text, sizeof(text), "job size %u out of range 1..%d", join->nranks,
                 INCMOE_MAX_RANKS);
        member_refuse(m, conn, hdr->job, INCMOE_ERR_JOB, text);
        return 0;
    }
    if (hdr->rank >= join->nranks) {
        snprintf(text, sizeof(text), "rank %u is not below the job size %u", hdr->rank,
                 join->nranks);
        member_refuse(m, conn, hdr->job, INCMOE_ERR_JOB, text);
        return 0;
    }
    return 1;
}

/*
 * The switch owns the job's liveness timeout: its own is the floor, a rank may
 * ask for a longer one, and the job takes the largest asked.  One rank asking
 * a short one must not get its healthy peers declared silent.  The progress
 * timeout bounds only the job's own collectives, so an ask replaces the
 * switch's either way; among the ranks, the largest asked wins here too.
 */
static void join_timeout(membership_t *m, job_t *job, uint32_t rank,
                         const struct inc_wire_join *join)
{
    uint32_t asked_ms = join->timeout_ms;
    if (asked_ms > INC_TIMEOUT_MS_MAX) /* the ranks' own bound: one day */
        asked_ms = INC_TIMEOUT_MS_MAX;
    if (asked_ms != 0 && (int)asked_ms < m->set->timeout_ms)
        log_info(SUBSYS, "job %llu: rank %u asked a %u ms timeout, below this switch's %d ms",
                 (unsigned long long)job->id, rank, asked_ms, m->set->timeout_ms);
    if ((int)asked_ms > job->timeout_ms)
        job->timeout_ms = (int)asked_ms;
    uint32_t progress_ms = join->progress_timeout_ms;
    if (progress_ms > INC_TIMEOUT_MS_MAX)
        progress_ms = INC_TIMEOUT_MS_MAX;
    if ((int)progress_ms > job->progress_timeout_ms)
        job->progress_timeout_ms = (int)progress_ms;
}

static void free_payload_cb(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

/* Register these ranks (joined here or beneath) with the parent: a TREE_JOIN on the job's
   link; a failure fails the job with the reason. */
static void tree_join_send(membership_t *m, job_t *job, const int *ranks, int count)
{
    size_t len = sizeof(struct inc_wire_tree_join);
    for (int i = 0; i < count; i++)
        len += 2 * sizeof(uint32_t) + job->addr_len[ranks[i]];
    char *payload = malloc(len);
    if (payload == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, ranks[0], "switch out of memory");
        return;
    }
    struct inc_wire_tree_join tj = {.nranks = (uint32_t)job->nranks,
                                    .count = (uint32_t)count,
                                    .timeout_ms = (uint32_t)job->timeout_ms,
                                    .progress_timeout_ms = (uint32_t)job->progress_timeout_ms,
                                    .window = m->set->link_window};
    memcpy(tj.token, job->parent->token, sizeof(tj.token)); /* binds the first; later: unread */
    memcpy(payload, &tj, sizeof(tj));
    size_t pos = sizeof(tj);
    for (int i = 0; i < count; i++) {
        uint32_t rec[2] = {(uint32_t)ranks[i], job->addr_len[ranks[i]]};
        memcpy(payload + pos, rec, sizeof(rec));
        pos += sizeof(rec);
        if (rec[1] > 0)
            memcpy(payload + pos, job->addr[ranks[i]], rec[1]);
        pos += rec[1];
    }
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_TREE_JOIN, job->id);
    h.rank = (uint32_t)ranks[0];
    h.length = len;
    m->tx.ops->send(m->tx.server, job->parent, &h, payload, len, free_payload_cb, payload);
}

/* A link to the parent that job id asked for, while it waits (the job may fail, go, and its
   id come back for a new job meanwhile: the serial tells them apart). */
typedef struct {
    membership_t *m;
    uint64_t job, serial;
} link_wait_t;

/* The link is up, or failed: the ranks joined by now go up in one TREE_JOIN. */
static void parent_linked(void *arg, conn_t *up, incmoe_status_t st, const char *why)
{
    link_wait_t w = *(link_wait_t *)arg;
    membership_t *m = w.m;
    free(arg);
    job_t *job = job_find(m, w.job);
    if (job == NULL || job->parent_pending != w.serial) {
        if (up != NULL) /* nobody waits for it any more */
            m->tx.ops->drop(m->tx.server, up);
        return;
    }
    job->parent_pending = 0;
    int ranks[INCMOE_MAX_RANKS], n = 0;
    for (int r = 0; r < job->nranks; r++)
        if (job->conns[r] != NULL)
            ranks[n++] = r;
    if (up == NULL) {
        job_fail(m, job, st, n > 0 ? ranks[0] : 0, "%s", why);
        return;
    }
    up->job = job;
    job->parent = up;
    log_info(SUBSYS, "job %llu: joined the tree at the parent switch %s",
             (unsigned long long)job->id, m->set->parent);
    if (n > 0)
        tree_join_send(m, job, ranks, n);
}

/* These ranks joined here or beneath: registered with the parent at once if the job's link is
   up, else with every other rank once it is (the first asks for it). */
static void tree_join_up(membership_t *m, job_t *job, const int *ranks, int count)
{
    if (job->parent != NULL) {
        tree_join_send(m, job, ranks, count);
        return;
    }
    if (job->parent_pending != 0)
        return; /* parent_linked sends them */
    link_wait_t *w = malloc(sizeof(*w));
    if (w == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, ranks[0], "switch out of memory");
        return;
    }
    *w = (link_wait_t){.m = m, .job = job->id, .serial = ++m->link_serial};
    job->parent_pending = w->serial;
    m->tx.ops->connect_parent(m->tx.server, job->id, parent_linked, w);
}

/* The N address records after the JOIN_ACK's fixed part; 0 (the job failed) if malformed. */
static int ack_take_addresses(membership_t *m, job_t *job, const char *payload, size_t length)
{
    size_t pos = sizeof(struct inc_wire_join_ack);
    for (int r = 0; r < job->nranks; r++) {
        uint32_t alen;
        if (length - pos < sizeof(alen))
            goto bad;
        memcpy(&alen, payload + pos, sizeof(alen));
        pos += sizeof(alen);
        if (alen > INCMOE_WIRE_MAX_ADDR || length - pos < alen)
            goto bad;
        if (job->conns[r] == NULL) { /* beyond this switch: the parent's word */
            free(job->addr[r]);
            if ((job->addr[r] = malloc(alen ? alen : 1)) == NULL) {
                job_fail(m, job, INCMOE_ERR_NO_MEMORY, r, "switch out of memory");
                return 0;
            }
            memcpy(job->addr[r], payload + pos, alen);
            job->addr_len[r] = alen;
        }
        pos += alen;
    }
    if (pos == length)
        return 1;
bad:
    JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0, "the parent switch sent a malformed JOIN_ACK");
    return 0;
}

void tree_on_parent_ack(membership_t *m, job_t *job, const struct inc_wire_hdr *h,
                        const char *payload, size_t length)
{
    (void)h;
    struct inc_wire_join_ack ack;
    memcpy(&ack, payload, sizeof(ack)); /* the header check bounded length */
    if (job->state != JOB_FORMING || ack.nranks != (uint32_t)job->nranks || ack.credits == 0) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch answered job %llu of %d ranks with a JOIN_ACK for %u ranks "
                "and %u credits",
                (unsigned long long)job->id, job->nranks, ack.nranks, ack.credits);
        return;
    }
    if (ack.chunk_size != m->set->chunk_size) {
        job_fail(m, job, INCMOE_ERR_MISMATCH, 0,
                 "the parent switch %s cuts chunks of %llu bytes, this switch %llu: every switch "
                 "of a tree needs the same --chunk-size",
                 m->set->parent, (unsigned long long)ack.chunk_size,
                 (unsigned long long)m->set->chunk_size);
        return;
    }
    if (!ack_take_addresses(m, job, payload, length))
        return;
    if ((int)ack.timeout_ms > job->timeout_ms)
        job->timeout_ms = (int)ack.timeout_ms;
    memcpy(job->ring_token, ack.ring_token, sizeof(job->ring_token));
    job->up.granted = ack.credits;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        job->up.left[s] = ack.credits;
    job->up_rank = -1;
    for (int r = 0; r < job->nranks; r++) {
        if (job->conns[r] == NULL)
            job->conns[r] = job->parent;
        else if (job->up_rank < 0)
            job->up_rank = r;
    }
    job_form(m, job);
}

void member_join(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                 size_t length)
{
    if (hdr->msg == WIRE_MSG_TREE_JOIN) {
        member_tree_join(m, conn, hdr, payload, length);
        return;
    }
    if (conn->role != CONN_RANK) { /* its TREE_JOIN made it a child switch's link, refused or not */
        member_refuse(m, conn, hdr->job, INCMOE_ERR_PROTOCOL,
                      "a JOIN on a link that sent TREE_JOIN: a child switch joins its ranks with "
                      "TREE_JOIN only");
        return;
    }
    struct inc_wire_join join;
    memcpy(&join, payload, sizeof(join));
    const char *addr = payload + sizeof(join);
    if (!join_valid(m, conn, hdr, &join, addr, length))
        return;
    job_t *job = member_admit(m, conn, hdr, join.nranks);
    if (job == NULL)
        return;
    job->addr[hdr->rank] = malloc(join.addr_len ? join.addr_len : 1);
    if (job->addr[hdr->rank] == NULL) {
        member_refuse(m, conn, hdr->job, INCMOE_ERR_NO_MEMORY, "switch out of memory");
        return;
    }
    memcpy(job->addr[hdr->rank], addr, join.addr_len);
    job->addr_len[hdr->rank] = join.addr_len;
    join_timeout(m, job, hdr->rank, &join);
    job->conns[hdr->rank] = conn;
    conn->job = job;
    conn->rank = (int)hdr->rank;
    conn->state = CONN_JOINED;
    job->njoined++;
    log_debug(SUBSYS, "job %llu: rank %u joined (%d of %d)", (unsigned long long)job->id, hdr->rank,
              job->njoined, job->nranks);
    if (m->set->parent[0] != '\0') {
        int r = (int)hdr->rank;
        tree_join_up(m, job, &r, 1);
    } else if (job->njoined == job->nranks) {
        job_form(m, job);
    }
}

/* The records of a TREE_JOIN: each rank once, below nranks, its address one UCX could unpack,
   nothing past the last; seen[] marks the ranks.  0: text says what is wrong. */
static int tree_join_records(const struct inc_wire_tree_join *tj, const char *payload,
                             size_t length, uint8_t *seen, char *text, size_t text_len)
{
    if (tj->nranks < 1 || tj->nranks > INCMOE_MAX_RANKS || tj->count < 1 ||
        tj->count > tj->nranks) {
        snprintf(text, text_len, "TREE_JOIN of %u ranks for a job of %u", tj->count, tj->nranks);
        return 0;
    }
    if (tj->window < 1 || tj->window > INCMOE_WIRE_MAX_WINDOW) {
        snprintf(text, text_len, "TREE_JOIN announces a window of %u chunks, not 1..%d", tj->window,
                 INCMOE_WIRE_MAX_WINDOW);
        return 0;
    }
    size_t pos = sizeof(*tj);
    for (uint32_t i = 0; i < tj->count; i++) {
        uint32_t rec[2];
        if (length - pos < sizeof(rec)) {
            snprintf(text, text_len, "TREE_JOIN truncated at record %u", i);
            return 0;
        }
        memcpy(rec, payload + pos, sizeof(rec));
        pos += sizeof(rec);
        if (rec[0] >= tj->nranks || seen[rec[0]] || rec[1] > INCMOE_WIRE_MAX_ADDR ||
            length - pos < rec[1]) {
            snprintf(text, text_len, "TREE_JOIN record %u (rank %u, %u address bytes) is bad", i,
                     rec[0], rec[1]);
            return 0;
        }
        char why[160];
        if (rec[1] > 0 &&
            inc_ucx_addr_check(payload + pos, rec[1], NULL, 0, why, sizeof(why)) != INCMOE_OK) {
            snprintf(text, text_len, "rank %u's address in TREE_JOIN: %s", rec[0], why);
            return 0;
        }
        seen[rec[0]] = 1;
        pos += rec[1];
    }
    if (pos != length) {
        snprintf(text, text_len, "TREE_JOIN has %zu bytes past its records", length - pos);
        return 0;
    }
    return 1;
}

/* The job a TREE_JOIN adds the seen ranks to: admitted on a new connection, else the child's
   own while it forms; NULL: refused, or the job failed. */
static job_t *tree_join_job(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr,
                            uint32_t nranks, const uint8_t *seen)
{
    job_t *job = conn->job;
    if (job == NULL) {
        struct inc_wire_hdr first = *hdr;
        first.rank = 0;
        for (uint32_t r = 0; r < nranks; r++)
            if (seen[r]) {
                first.rank = r;
                break;
            }
        if ((job = member_admit(m, conn, &first, nranks)) == NULL)
            return NULL;
    } else if (job->state != JOB_FORMING || conn->role != CONN_CHILD || hdr->job != job->id ||
               nranks != (uint32_t)job->nranks) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank,
                "a child switch sent TREE_JOIN for job %llu of %u ranks after its job formed",
                (unsigned long long)hdr->job, nranks);
        return NULL;
    }
    for (int r = 0; r < job->nranks; r++) {
        if (seen[r] && (job->conns[r] != NULL || job->addr[r] != NULL)) {
            char text[200];
            snprintf(text, sizeof(text), "rank %d of job %llu has already joined", r,
                     (unsigned long long)job->id);
            if (conn->job == NULL)
                member_refuse(m, conn, hdr->job, INCMOE_ERR_JOB, text);
            else
                job_fail(m, job, INCMOE_ERR_JOB, r, "%s", text);
            return NULL;
        }
    }
    return job;
}

/* The checked records' ranks join the job through the child's connection; their number into
   added[], 0 if the job failed. */
static int tree_join_take(membership_t *m, job_t *job, conn_t *conn,
                          const struct inc_wire_tree_join *tj, const char *payload, int *added)
{
    int nadded = 0;
    size_t pos = sizeof(*tj);
    for (uint32_t i = 0; i < tj->count; i++) {
        uint32_t rec[2];
        memcpy(rec, payload + pos, sizeof(rec));
        pos += sizeof(rec);
        job->addr[rec[0]] = malloc(rec[1] ? rec[1] : 1);
        if (job->addr[rec[0]] == NULL) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, (int)rec[0], "switch out of memory");
            return 0;
        }
        memcpy(job->addr[rec[0]], payload + pos, rec[1]);
        job->addr_len[rec[0]] = rec[1];
        if (!tree_window_set(job, (int)rec[0], tj->window)) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, (int)rec[0], "switch out of memory");
            return 0;
        }
        job->conns[rec[0]] = conn;
        if (conn->rank < 0 || (int)rec[0] < conn->rank)
            conn->rank = (int)rec[0];
        added[nadded++] = (int)rec[0];
        pos += rec[1];
    }
    return nadded;
}

/*
 * A child switch's TREE_JOIN: the ranks that joined beneath it.  On a new
 * connection it admits the job like a JOIN; later ones on the child's
 * connection add ranks while the job forms.  Every record is checked before
 * any is taken, so a bad one refuses the whole message.
 */
void member_tree_join(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr,
                      const char *payload, size_t length)
{
    struct inc_wire_tree_join tj;
    char text[200];
    memcpy(&tj, payload, sizeof(tj)); /* the header check bounded length below */
    if (conn->job == NULL)
        conn->role = CONN_CHILD; /* a refusal leaves the link to the child to close */
    uint8_t seen[INCMOE_MAX_RANKS] = {0};
    if (!tree_join_records(&tj, payload, length, seen, text, sizeof(text))) {
        m->stats->bad_messages++;
        if (conn->job == NULL)
            member_refuse(m, conn, hdr->job, INCMOE_ERR_PROTOCOL, text);
        else
            JOB_BAD(m, conn->job, INCMOE_ERR_PROTOCOL, conn->rank, "%s", text);
        return;
    }
    job_t *job = tree_join_job(m, conn, hdr, tj.nranks, seen);
    if (job == NULL)
        return;
    struct inc_wire_join asked = {.timeout_ms = tj.timeout_ms,
                                  .progress_timeout_ms = tj.progress_timeout_ms};
    join_timeout(m, job, 0, &asked);
    conn->job = job;
    conn->role = CONN_CHILD;
    conn->state = CONN_JOINED;
    int added[INCMOE_MAX_RANKS];
    int nadded = tree_join_take(m, job, conn, &tj, payload, added);
    if (nadded == 0)
        return;
    job->njoined += nadded;
    log_debug(SUBSYS, "job %llu: a child switch brought %d ranks (%d of %d)",
              (unsigned long long)job->id, nadded, job->njoined, job->nranks);
    if (m->set->parent[0] != '\0')
        tree_join_up(m, job, added, nadded);
    else if (job->njoined == job->nranks)
        job_form(m, job);
}
