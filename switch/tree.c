/*
 * tree.c - what a tree of switches adds to the collectives, below the forms.
 *
 * The collectives run on ports (chunked.c, small.c, dc_form.c); joining a
 * tree is tree_join.c's.  What only a tree adds: sends up take the parent's
 * credits (a DATA or SMALL waits in order while none is left, holding its
 * item; a failed job's waiting sends go through the engine's drop hook,
 * tree_drop_up_queue), and every switch sees every rank's POST through the
 * TREE_POSTs relayed across each link once the far side posted.  One link per
 * job keeps the jobs apart at the parent exactly as ranks are: isolation,
 * memory admission and timeouts hold at every level.
 */
#include "tree.h"

#include <stdlib.h>

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
