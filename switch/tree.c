/*
 * tree.c - what a switch does only as part of a tree of switches.
 *
 * A child switch (--parent) keeps one link to its parent per job, made when
 * the job's first rank joins here: the same bootstrap handshake a rank runs,
 * with the parent link's key, then a TREE_JOIN for each rank that joins
 * beneath (a child's own TREE_JOINs are relayed as they come).  The root
 * forms the job once all N joined and answers every port with JOIN_ACK; a
 * child takes the parent's chunk size (it must equal its own: every switch
 * cuts a window into the same chunks), timeout, ring token and addresses,
 * and answers its own ports with its own credits.  One link per job keeps
 * the jobs apart at the parent exactly as ranks are: isolation, memory
 * admission and timeouts hold at every level.
 *
 * The collectives run on ports (chunked.c, small.c, dc_form.c).  What only a tree adds:
 * sends up take the parent's credits (a DATA or SMALL waits in order while
 * none is left, holding its item), and every switch sees every rank's POST
 * through the TREE_POSTs relayed across each link once the far side posted.
 */
#include "tree.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "switch"

typedef struct up_send {
    struct up_send *next;
    coll_item_t *ci;
    egress_class_t cls;
    struct inc_wire_hdr h;
    const void *payload;
    switch_tx_build_t build;
} up_send_t;

/* ------------------------------------------------------------------------ */
/* joining                                                                   */

static void free_payload_cb(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

void tree_join_up(membership_t *m, job_t *job, const int *ranks, int count)
{
    if (job->parent == NULL) {
        char why[INCMOE_WIRE_MAX_TEXT - 64];
        incmoe_status_t st;
        conn_t *up = m->tx.ops->connect_parent(m->tx.server, job->id, &st, why, sizeof(why));
        if (up == NULL) {
            job_fail(m, job, st, ranks[0], "%s", why);
            return;
        }
        up->job = job;
        job->parent = up;
        log_info(SUBSYS, "job %llu: joined the tree at the parent switch %s",
                 (unsigned long long)job->id, m->set->parent);
    }
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
                                    .progress_timeout_ms = (uint32_t)job->progress_timeout_ms};
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
    job->up_granted = ack.credits;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        job->up_credits[s] = ack.credits;
    job->up_rank = -1;
    for (int r = 0; r < job->nranks; r++) {
        if (job->conns[r] == NULL)
            job->conns[r] = job->parent;
        else if (job->up_rank < 0)
            job->up_rank = r;
    }
    job_form(m, job);
}

/* ------------------------------------------------------------------------ */
/* sends up                                                                  */

static void up_go(membership_t *m, job_t *job, coll_item_t *ci, egress_class_t cls,
                  const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build)
{
    (void)m;
    job->up_credits[h->stream]--;
    if (build != NULL)
        coll_item_send_built(ci, job->parent, cls, h, build);
    else
        coll_item_send(ci, job->parent, cls, h, payload);
}

void tree_send_up(membership_t *m, job_t *job, coll_item_t *ci, egress_class_t cls,
                  const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build)
{
    const int s = h->stream;
    if (job->up_head[s] == NULL && job->up_credits[s] > 0) {
        up_go(m, job, ci, cls, h, payload, build);
        return;
    }
    up_send_t *q = malloc(sizeof(*q));
    if (q == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, job->up_rank, "switch out of memory");
        return;
    }
    *q = (up_send_t){.ci = ci, .cls = cls, .h = *h, .payload = payload, .build = build};
    coll_item_hold(ci); /* until it goes */
    if (job->up_tail[s] != NULL)
        job->up_tail[s]->next = q;
    else
        job->up_head[s] = q;
    job->up_tail[s] = q;
}

void tree_up_credit(membership_t *m, job_t *job, int stream, uint64_t n)
{
    if (n > job->up_granted - job->up_credits[stream]) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch returned %llu %s credits; %u were out", (unsigned long long)n,
                inc_wire_stream_name(stream), job->up_granted - job->up_credits[stream]);
        return;
    }
    job->up_credits[stream] += (uint32_t)n;
    while (job->up_head[stream] != NULL && job->up_credits[stream] > 0 &&
           job->state == JOB_ACTIVE) {
        up_send_t *q = job->up_head[stream];
        job->up_head[stream] = q->next;
        if (q->next == NULL)
            job->up_tail[stream] = NULL;
        up_go(m, job, q->ci, q->cls, &q->h, q->payload, q->build);
        coll_item_put(q->ci);
        free(q);
    }
}

void tree_drop_up_queue(job_t *job)
{
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        while (job->up_head[s] != NULL) {
            up_send_t *q = job->up_head[s];
            job->up_head[s] = q->next;
            coll_item_put(q->ci);
            free(q);
        }
        job->up_tail[s] = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* posts                                                                     */

/* Has every rank the port with key p does not cover posted c? */
static int far_side_posted(const job_t *job, const coll_t *c, int p)
{
    for (int r = 0; r < job->nranks; r++)
        if (job->rep[r] != p && !c->posted[r])
            return 0;
    return 1;
}

void tree_relay_posts(membership_t *m, job_t *job, coll_t *c)
{
    for (int p = 0; p < job->nranks && job->state == JOB_ACTIVE; p++) {
        conn_t *to = job->conns[p];
        if (job->rep[p] != p || to == NULL || to->role == CONN_RANK || c->relayed[p] ||
            !far_side_posted(job, c, p))
            continue;
        c->relayed[p] = 1;
        const size_t len = 8 * (size_t)job->nranks;
        uint64_t *bytes = calloc((size_t)job->nranks, sizeof(uint64_t));
        if (bytes == NULL) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, p, "switch out of memory");
            return;
        }
        for (int r = 0; r < job->nranks; r++)
            if (job->rep[r] != p)
                bytes[r] = c->bytes[r];
        struct inc_wire_hdr h;
        coll_hdr_init(&h, WIRE_MSG_TREE_POST, job, c);
        h.rank = (uint32_t)(to == job->parent ? job->up_rank : p);
        h.length = len;
        m->tx.ops->send(m->tx.server, to, &h, bytes, len, free_payload_cb, bytes);
    }
}
