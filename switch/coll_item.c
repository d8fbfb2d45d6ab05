/*
 * coll_item.c - the lifetime of everything a collective holds in the switch.
 *
 * Ownership, one reference count per item:
 *  - The collective holds the item from its birth (coll_item_init) until the
 *    item leaves it (coll_item_leave): its results went out, or the
 *    collective is retired or dropped with its job.
 *  - Every operation that calls back later holds the item from its start to
 *    its callback, which puts the hold: each send (coll_item_send), each
 *    rendezvous receive (coll_item_receive), each reduction on a thread.
 *  - Code that starts something that may end inline (a send, a failure that
 *    drops the collective) and reads the item after it holds it across.
 *  - Every hold but the collective's also holds the job (job->refs), so the
 *    job outlives each callback that names it; the collective's does not, as
 *    the job owns its collectives and drops them when it retires.
 *  - The last put calls ops->release, the one place an item is freed.  Other
 *    counters (contributions arrived, sends still out) say what happened to
 *    the item, never whether it may go.
 */
#include "coll_item.h"

#include <stdlib.h>

typedef struct {
    switch_rx_t rx; /* first: the server hands this back */
    coll_item_t *item;
    int from;
} item_recv_t;

void coll_item_init(coll_item_t *item, const coll_item_ops_t *ops, job_t *job, struct coll *c)
{
    *item = (coll_item_t){.ops = ops, .job = job, .coll = c, .refs = 1};
}

static void item_unref(coll_item_t *item)
{
    if (--item->refs == 0)
        item->ops->release(item);
}

void coll_item_hold(coll_item_t *item)
{
    item->refs++;
    item->job->refs++;
}

void coll_item_put(coll_item_t *item)
{
    job_t *job = item->job;
    item_unref(item); /* the release still accounts its buffers to the job */
    job->refs--;
    /* The ranks may all have left in order while this hold was out: then it was the job's
       last, and the job goes now (a no-op while members or holds remain). */
    job_release(job->members, job);
}

void coll_item_leave(coll_item_t *item)
{
    item->coll = NULL;
    item_unref(item);
}

int coll_item_shared(const coll_item_t *item)
{
    return item->refs > 1;
}

static void item_recv_done(switch_rx_t *rx, ucs_status_t status)
{
    item_recv_t *r = (item_recv_t *)rx;
    coll_item_t *item = r->item;
    job_t *job = item->job;
    const int from = r->from;
    free(r);
    /* Fail while this receive still holds the item: dropping the collective then only takes
       the item out of it. */
    if (status != UCS_OK && job->state == JOB_ACTIVE)
        job_fail(job->members, job, INCMOE_ERR_PEER_FAILED, from,
                 "receiving rank %d's data failed: %s", from, ucs_status_string(status));
    if (job->state == JOB_ACTIVE && item->coll != NULL)
        item->ops->arrived(item, from);
    coll_item_put(item);
}

ucs_status_t coll_item_receive(coll_item_t *item, int from, void *desc, void *buf, size_t length)
{
    job_t *job = item->job;
    membership_t *m = job->members;
    item_recv_t *r = malloc(sizeof(*r));
    if (r == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, from, "switch out of memory");
        return UCS_ERR_NO_MEMORY;
    }
    *r = (item_recv_t){.rx = {.done = item_recv_done}, .item = item, .from = from};
    coll_item_hold(item);
    m->tx.ops->recv_data(m->tx.server, desc, buf, length, &r->rx);
    return UCS_INPROGRESS;
}

static void item_sent(void *arg, ucs_status_t status)
{
    /* Done either way: UCX no longer reads the payload.  The switch failing to build one (out
       of memory) means a rank will never get its data: the job fails, while this send still
       holds the item. */
    coll_item_t *item = arg;
    if (status == UCS_ERR_NO_MEMORY && item->job->state == JOB_ACTIVE)
        job_fail(item->job->members, item->job, INCMOE_ERR_NO_MEMORY, 0,
                 "switch out of memory for a message to a rank");
    if (--item->sending == 0 && item->coll != NULL && item->job->state == JOB_ACTIVE)
        item->ops->sent(item);
    coll_item_put(item);
}

void coll_item_send(coll_item_t *item, conn_t *conn, egress_class_t cls,
                    const struct inc_wire_hdr *hdr, const void *payload)
{
    membership_t *m = item->job->members;
    coll_item_hold(item);
    m->stats->bytes_out += hdr->length;
    m->tx.ops->send_data(m->tx.server, conn, cls, hdr, payload, (size_t)hdr->length, item_sent,
                         item);
}

void coll_item_send_built(coll_item_t *item, conn_t *conn, egress_class_t cls,
                          const struct inc_wire_hdr *hdr, switch_tx_build_t build)
{
    membership_t *m = item->job->members;
    coll_item_hold(item);
    m->stats->bytes_out += hdr->length;
    m->tx.ops->send_built(m->tx.server, conn, cls, hdr, build, item_sent, item);
}

void coll_item_send_copies(coll_item_t *item, coll_item_receives_fn receives,
                           coll_item_copy_fn send, void *arg)
{
    job_t *job = item->job;
    int n = 0;
    for (int p = 0; p < job->nranks; p++)
        n += job->rep[p] == p && receives(item, p, arg);
    if (n == 0) {
        item->ops->sent(item);
        return;
    }
    item->sending += n;
    coll_item_hold(item); /* the sends may all complete inline and finish the item */
    for (int p = 0; p < job->nranks && job->state == JOB_ACTIVE; p++)
        if (job->rep[p] == p && receives(item, p, arg))
            send(item, p, arg);
    coll_item_put(item);
}
