/*
 * chunked.c - the chunked form of a collective (coll_form.h): POST, then DATA
 * chunk by chunk, FWD back; and the barrier, a POST alone.
 *
 * Each chunk of a window is an item_t that collects the contributions it
 * needs from the ports (AllGather: the root's block; ReduceScatter: the
 * partials of everyone but the root; AllReduce: all of them), as the stream
 * table says (coll_table.c, coll_streams).  Once every rank has POSTed the
 * collective (so every receiver knows where results go), a complete item is
 * forwarded at once: multicast to the others, reduced in rank order and sent
 * to the root, or reduced and multicast.  All roots and all chunks proceed
 * independently, so the N rooted reductions of a ReduceScatter run
 * concurrently.  When the forward completes the item leaves its collective
 * and the contributors get their credits back.  An item lives by the rule of
 * coll_item.c: its collective, each send, receive and reduction hold it.
 *
 * Anything malformed, out of range or inconsistent fails the job with a
 * reason sent to every rank, never the switch: other jobs carry on.
 */
#include "chunked.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "coll_item.h"
#include "coll_table.h"
#include "tree.h"

#include "base/reduce.h"

/* One chunk of one window of one collective, and what the switch holds of it. */
typedef struct item {
    coll_item_t ci; /* first: its lifetime (coll_item.c), its job and its collective */
    struct item *next;
    reduce_pool_t *pool; /* where its reduction runs (--threads) */
    uint32_t root, chunk;
    int down; /* an AllReduce result coming down from the parent (tree.c) */
    uint64_t offset, length, total;
    int dtype, redop;   /* the collective's, for the reduction thread */
    void **contrib;     /* [nranks] by port key: received payloads, NULL while missing */
    uint8_t *arrived;   /* [nranks]: payload complete (rendezvous may still be running) */
    uint8_t *ucx_owned; /* [nranks]: contrib is UCX's eager buffer (release_data) */
    int narrived, nexpected;
    void *out;     /* reduction result (ReduceScatter, AllReduce) */
    int forwarded; /* its result went out */
    reduce_task_t task;
} item_t;

static void send_control(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h)
{
    m->tx.ops->send(m->tx.server, conn, h, NULL, 0, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* ports                                                                     */

/*
 * Does the port with key p send toward root's window, and does it get the
 * result (base/wire.h, "Switch trees")?  The stream's rules (coll_streams)
 * applied to ports: a port is the root's when it covers the root.  Over a tree
 * a shared window (AllReduce) has a direction: it goes up from every port but
 * the parent, and comes down from the parent alone to every other port.
 */
static int port_contributes(const job_t *job, int stream, int down, int p, int root)
{
    const coll_stream_t *kind = &coll_streams[stream];
    if (kind->shared_window && job->parent_rep >= 0)
        return down ? p == job->parent_rep : p != job->parent_rep;
    return kind->contributes(p, job->rep[root], job->nranks);
}

static int port_receives(const job_t *job, int stream, int down, int p, int root)
{
    const coll_stream_t *kind = &coll_streams[stream];
    if (kind->shared_window && job->parent_rep >= 0)
        return down ? p != job->parent_rep : p == job->parent_rep;
    return kind->receives(p, job->rep[root], job->nranks);
}

/* ------------------------------------------------------------------------ */
/* items and collectives: lifetime                                           */

/* The item's last hold is gone (coll_item.c): the one place it is freed. */
/* The item's memory of its own (NULL: nothing), as item_new made it. */
static void item_free(item_t *it)
{
    if (it == NULL)
        return;
    free(it->contrib);
    free(it->arrived);
    free(it->ucx_owned);
    free(it);
}

static void item_release(coll_item_t *ci)
{
    item_t *it = (item_t *)ci;
    job_t *job = ci->job;
    membership_t *m = job->members;
    for (int r = 0; r < job->nranks; r++) {
        if (it->ucx_owned[r] && it->contrib[r] != NULL) {
            m->tx.ops->release_data(m->tx.server, it->contrib[r]);
            job_unaccount(job->members, job, it->length);
        } else {
            job_free_mem(job->members, job, it->contrib[r], it->length);
        }
    }
    job_free_mem(job->members, job, it->out, it->length);
    item_free(it);
}

/* The item leaves its collective's list, and the collective's hold goes with it. */
static void item_unlink(item_t *it)
{
    coll_t *c = it->ci.coll;
    item_t *prev = NULL;
    for (item_t *p = c->state; p != NULL && p != it; p = p->next)
        prev = p;
    if (prev != NULL)
        prev->next = it->next;
    else
        c->state = it->next;
    coll_item_leave(&it->ci);
}

/* The collective is going: each item leaves it, and lives on while a send, receive or
   reduction still holds it. */
static void chunked_detach(coll_t *c)
{
    while (c->state != NULL) {
        item_t *it = c->state;
        c->state = it->next;
        coll_item_leave(&it->ci);
    }
}

/* ------------------------------------------------------------------------ */
/* forwarding                                                                */

/* Each contributor of a forwarded item gets one credit back on the item's stream. */
static void item_return_credits(item_t *it)
{
    job_t *job = it->ci.job;
    coll_t *c = it->ci.coll;
    for (int r = 0; r < job->nranks; r++) {
        /* The parent's took one of this switch's window (a ReduceScatter's, its owner's), or
           on a stream without one nothing */
        const int partial = r == job->parent_rep && c->stream == INCMOE_STREAM_REDUCESCATTER;
        if (!it->arrived[r] || (r == job->parent_rep && !tree_windowed(c->stream) && !partial))
            continue;
        if (partial)
            tree_parent_partial_done(job, it->root);
        else
            job->inflight[r][c->stream]--;
        struct inc_wire_hdr h;
        coll_hdr_init(&h, WIRE_MSG_CREDIT, job, c);
        h.length = 1;
        if (partial)
            h.root = it->root; /* whose window */
        if (r == job->parent_rep)
            h.rank = (uint32_t)job->up_rank; /* a child speaks for its port */
        send_control(job->members, job->conns[r], &h);
    }
}

/* Every send of the item's result completed: the contributors get their credits back and
   the item leaves its collective, which may be done now. */
static void item_forwarded(item_t *it)
{
    job_t *job = it->ci.job;
    coll_t *c = it->ci.coll;
    item_return_credits(it);
    c->remaining -= it->length;
    item_unlink(it); /* the item may be gone now */
    coll_check_done(job, c);
}

static void item_sent(coll_item_t *ci)
{
    item_forwarded((item_t *)ci);
}

/* A forward's copies: the header, the payload, and what the loop may read without the
   collective (the last send may retire it inline). */
typedef struct {
    struct inc_wire_hdr h;
    const void *payload;
    int stream;
    egress_class_t cls;
} forward_t;

static int forward_receives(const coll_item_t *ci, int p, const void *arg)
{
    const item_t *it = (const item_t *)ci;
    const forward_t *f = arg;
    return port_receives(ci->job, f->stream, it->down, p, (int)it->root);
}

static void forward_copy(coll_item_t *ci, int p, void *arg)
{
    job_t *job = ci->job;
    forward_t *f = arg;
    if (p == job->parent_rep) { /* up: the parent takes it as a contribution */
        struct inc_wire_hdr up = f->h;
        up.msg = WIRE_MSG_DATA;
        up.rank = (uint32_t)job->up_rank;
        /* One class up: a ReduceScatter's partials ahead of the AllGather's blocks would hold
           the blocks back until the partials are all up, and leave the links down idle
           meanwhile (the parent multicasts blocks down only as they come up). */
        tree_send_up(job->members, job, ci, EGRESS_FORWARD, &up, f->payload, NULL);
        return;
    }
    f->h.rank = (uint32_t)p;
    if (job->conns[p]->role == CONN_CHILD && f->stream == INCMOE_STREAM_REDUCESCATTER) {
        tree_send_partial_down(job->members, job, p, ci, f->cls, &f->h, f->payload);
        return;
    }
    if (job->conns[p]->role == CONN_CHILD && tree_windowed(f->stream)) {
        tree_send_down(job->members, job, p, ci, f->cls, &f->h, f->payload, NULL);
        return;
    }
    coll_item_send(ci, job->conns[p], f->cls, &f->h, f->payload);
}

/* Send payload, the item's result, to every port that gets it (none: an AllGather of one
   rank, which is forwarded at once). */
static void item_forward(item_t *it, const void *payload)
{
    const coll_t *c = it->ci.coll;
    forward_t f = {.payload = payload, .stream = c->stream};
    coll_hdr_init(&f.h, WIRE_MSG_FWD, it->ci.job, c); /* a child switch checks it as DATA */
    f.h.root = it->root;
    f.h.offset = it->offset;
    f.h.length = it->length;
    f.h.total = it->total;
    f.h.chunk = it->chunk;
    /* Reductions unblock the contributors' credits: they overtake multicast copies. */
    f.cls = coll_streams[c->stream].reduces ? EGRESS_RESULT : EGRESS_FORWARD;
    coll_item_send_copies(&it->ci, forward_receives, forward_copy, &f);
}

/* Reduce the contributions into it->out (on a reduction thread or inline). */
static void item_compute(item_t *it)
{
    const void *srcs[INCMOE_MAX_RANKS];
    int n = 0;
    /* Ascending rank order whatever the arrival order: bitwise reproducible. */
    for (int r = 0; r < it->ci.job->nranks; r++)
        if (it->contrib[r] != NULL)
            srcs[n++] = it->contrib[r];
    incmoe_dtype_t dtype = (incmoe_dtype_t)it->dtype;
    inc_reduce_ordered(it->out, srcs, n, it->length / incmoe_dtype_size(dtype), dtype,
                       (incmoe_redop_t)it->redop);
}

void chunked_compute(reduce_task_t *task)
{
    item_compute((item_t *)((char *)task - offsetof(item_t, task)));
}

/* The item's reduction is done (on a thread or inline): forward it, and put the reduction's
   hold. */
static void item_reduced(item_t *it)
{
    if (it->ci.coll != NULL && it->ci.job->state == JOB_ACTIVE)
        item_forward(it, it->out);
    coll_item_put(&it->ci);
}

/* Forward an item whose contributions are all here. */
static void item_forward_complete(item_t *it)
{
    coll_t *c = it->ci.coll;
    job_t *job = it->ci.job;
    if (it->forwarded || it->narrived < it->nexpected)
        return;
    it->forwarded = 1;
    if (!coll_streams[c->stream].reduces || it->down) {
        int from = 0; /* the one contribution: the root's port's, or the parent's */
        while (it->contrib[from] == NULL)
            from++;
        item_forward(it, it->contrib[from]);
        return;
    }
    it->out = job_alloc(job->members, job, it->length);
    if (it->out == NULL) {
        job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, 0,
                 "switch out of memory for a reduction");
        return;
    }
    coll_item_hold(&it->ci); /* the reduction's, put by item_reduced */
    if (reduce_pool_submit(it->pool, &it->task))
        return; /* item_reduced runs from on_wake */
    item_compute(it);
    item_reduced(it);
}

/* Forward a complete item if everyone has posted (else coll_arm will). */
static void item_try_forward(item_t *it)
{
    if (it->ci.coll->armed)
        item_forward_complete(it);
}

/* ------------------------------------------------------------------------ */
/* POST                                                                      */

/* Is an item consistent with what its root (with a shared window, every rank) announced? */
static int item_matches_post(job_t *job, coll_t *c, item_t *it)
{
    int owner = coll_streams[c->stream].shared_window ? -1 : (int)it->root;
    for (int r = 0; r < job->nranks; r++) {
        if (!c->posted[r] || (owner >= 0 && r != owner))
            continue;
        if (c->bytes[r] != it->total) {
            JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, r,
                    "%s epoch %llu: rank %d announced %llu bytes, a contribution for root %u says "
                    "%llu",
                    inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, r,
                    (unsigned long long)c->bytes[r], it->root, (unsigned long long)it->total);
            return 0;
        }
    }
    return 1;
}

/* Everyone has posted: forward every item complete already, then arm the collective (an item
   completing later forwards at once).  Arming last keeps the collective from being done, and
   retired, while this walks its items: their forwards may complete inline. */
static void coll_arm(job_t *job, coll_t *c)
{
    c->remaining = 0;
    if (coll_streams[c->stream].shared_window) {
        /* Below the root an AllReduce goes through this switch twice: up, then down. */
        c->remaining = c->bytes[0] * (job->parent_rep >= 0 ? 2 : 1);
    } else {
        for (int r = 0; r < job->nranks; r++)
            c->remaining += c->bytes[r];
    }
    for (item_t *it = c->state; it != NULL; it = it->next)
        if (!item_matches_post(job, c, it))
            return;
    item_t *it = c->state;
    while (it != NULL && job->state == JOB_ACTIVE) {
        item_t *next = it->next; /* it may leave the list and go; the others stay */
        item_forward_complete(it);
        it = next;
    }
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has dropped c */
    c->armed = 1;
    coll_check_done(job, c);
}

/* A barrier completes when the last rank posts it: every rank hears DONE (a switch port knows
   from the TREE_POSTs; a rank that posted it and left has no connection). */
static void barrier_complete(job_t *job, coll_t *c)
{
    for (int r = 0; r < job->nranks; r++) {
        if (job->rep[r] != r || job->conns[r] == NULL || job->conns[r]->role != CONN_RANK)
            continue;
        struct inc_wire_hdr d;
        coll_hdr_init(&d, WIRE_MSG_DONE, job, c);
        send_control(job->members, job->conns[r], &d);
    }
    c->armed = 1;
    coll_check_done(job, c);
}

/* A shared window (AllReduce) has the same size on every rank. */
static int window_sizes_agree(job_t *job, coll_t *c)
{
    for (int r = 1; r < job->nranks; r++) {
        if (c->bytes[r] != c->bytes[0]) {
            JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, r,
                    "%s epoch %llu: rank %d has %llu bytes, rank 0 has %llu",
                    inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, r,
                    (unsigned long long)c->bytes[r], (unsigned long long)c->bytes[0]);
            return 0;
        }
    }
    return 1;
}

/* Ranks posted c (last: the N-th among them): tell the switch ports whose far side is now
   complete, and once all N are in, finish a barrier or arm the collective. */
static void after_post(job_t *job, coll_t *c, int last)
{
    if (job->tree)
        tree_relay_posts(job->members, job, c);
    if (!last || job->state != JOB_ACTIVE)
        return; /* others have yet to post */
    const coll_stream_t *kind = &coll_streams[c->stream];
    if (!kind->data) {
        barrier_complete(job, c);
        return;
    }
    if (kind->shared_window && !window_sizes_agree(job, c))
        return;
    coll_arm(job, c);
}

static ucs_status_t on_post(const coll_env_t *env, job_t *job, conn_t *conn,
                            const struct inc_wire_hdr *h, void *data, size_t length,
                            const ucp_am_recv_param_t *param)
{
    const coll_stream_t *kind = &coll_streams[h->stream];
    coll_t *c = coll_get(job->members, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(job->members, job, conn, c, h))
        return UCS_OK;
    if (kind->data && !coll_set_form(job->members, job, conn, c, &chunked_form))
        return UCS_OK;
    if (!coll_unposted(job->members, job, c, conn->rank, "posted"))
        return UCS_OK;
    after_post(job, c, coll_post(job, c, conn->rank, h->total));
    return UCS_OK;
}

/* A switch port's TREE_POST: every rank it covers posted (tree.c). */
static ucs_status_t on_tree_post(const coll_env_t *env, job_t *job, conn_t *conn,
                                 const struct inc_wire_hdr *h, void *data, size_t length,
                                 const ucp_am_recv_param_t *param)
{
    membership_t *m = env->m;
    if (length != 8 * (size_t)job->nranks) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank, "a TREE_POST of %zu bytes for %d ranks",
                length, job->nranks);
        return UCS_OK;
    }
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(m, job, conn, c, h))
        return UCS_OK;
    if (coll_streams[h->stream].data && !coll_set_form(m, job, conn, c, &chunked_form))
        return UCS_OK;
    int last = 0;
    for (int r = 0; r < job->nranks; r++) {
        if (job->conns[r] != conn)
            continue;
        if (!coll_unposted(m, job, c, r, "posted"))
            return UCS_OK;
        uint64_t bytes;
        memcpy(&bytes, (const char *)data + 8 * (size_t)r, sizeof(bytes));
        last = coll_post(job, c, r, bytes);
    }
    after_post(job, c, last);
    return UCS_OK;
}

/* ------------------------------------------------------------------------ */
/* DATA                                                                      */

/* A contribution has fully arrived (eager at once, rendezvous when its receive ends). */
static void item_arrived(item_t *it, int from)
{
    it->arrived[from] = 1;
    it->narrived++;
    if (it->ci.coll != NULL && it->ci.job->state == JOB_ACTIVE)
        item_try_forward(it);
}

static void item_received(coll_item_t *ci, int from)
{
    item_arrived((item_t *)ci, from);
}

static const coll_item_ops_t item_ops = {
    .arrived = item_received,
    .sent = item_sent,
    .release = item_release,
};

/* May the port with key me send this chunk: its role for the root, the chunking, its credits
   (the parent's: this switch's window, on the streams that have one)? */
static int data_allowed(job_t *job, int me, int down, const struct inc_wire_hdr *h)
{
    const int stream = h->stream;
    const uint64_t chunk = job->members->set->chunk_size;
    if (h->root >= (uint32_t)job->nranks || (coll_streams[stream].shared_window && h->root != 0) ||
        !port_contributes(job, stream, down, me, (int)h->root)) {
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, me, "%s %d sent %s data for root %u",
                me == job->parent_rep ? "the parent port of rank" : "rank", me,
                inc_wire_stream_name(stream), h->root);
        return 0;
    }
    if (h->offset % chunk != 0 || h->chunk != h->offset / chunk ||
        h->length != (h->total - h->offset < chunk ? h->total - h->offset : chunk)) {
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d: chunk %u [%llu,+%llu) of %llu bytes does not follow the %llu-byte "
                "chunking",
                me, h->chunk, (unsigned long long)h->offset, (unsigned long long)h->length,
                (unsigned long long)h->total, (unsigned long long)chunk);
        return 0;
    }
    if (me == job->parent_rep && stream == INCMOE_STREAM_REDUCESCATTER)
        return tree_parent_partial_in(job->members, job, h->root); /* its owner's window */
    if (me == job->parent_rep && !tree_windowed(stream))
        return 1; /* the parent's take no window on this stream (tree.c) */
    return coll_credit_left(job->members, job, me, stream);
}

static item_t *item_new(reduce_pool_t *pool, job_t *job, coll_t *c, int down,
                        const struct inc_wire_hdr *h)
{
    item_t *it = calloc(1, sizeof(*it));
    if (it != NULL) {
        it->contrib = calloc((size_t)job->nranks, sizeof(void *));
        it->arrived = calloc((size_t)job->nranks, 1);
        it->ucx_owned = calloc((size_t)job->nranks, 1);
    }
    if (it == NULL || it->contrib == NULL || it->arrived == NULL || it->ucx_owned == NULL) {
        item_free(it);
        return NULL;
    }
    coll_item_init(&it->ci, &item_ops, job, c); /* the collective's hold: its list below */
    it->pool = pool;
    it->root = h->root;
    it->chunk = h->chunk;
    it->offset = h->offset;
    it->length = h->length;
    it->total = h->total;
    it->dtype = c->dtype;
    it->redop = c->redop;
    it->down = down;
    for (int p = 0; p < job->nranks; p++)
        it->nexpected +=
            job->rep[p] == p && port_contributes(job, c->stream, down, p, (int)h->root);
    it->next = c->state;
    c->state = it;
    return it;
}

/* The item this chunk belongs to, new if it is the first contribution; NULL (the job
   failed, *st says what UCX hears) if it cannot take this one. */
static item_t *item_for_data(reduce_pool_t *pool, job_t *job, coll_t *c, int me, int down,
                             const struct inc_wire_hdr *h, ucs_status_t *st)
{
    *st = UCS_ERR_INVALID_PARAM;
    item_t *it = c->state;
    while (it != NULL && !(it->root == h->root && it->chunk == h->chunk && it->down == down))
        it = it->next;
    if (it == NULL) {
        it = item_new(pool, job, c, down, h);
        if (it == NULL) {
            job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
            *st = UCS_ERR_NO_MEMORY;
            return NULL;
        }
        if (c->armed && !item_matches_post(job, c, it))
            return NULL;
    } else if (it->total != h->total || it->length != h->length) {
        JOB_BAD(job->members, job, INCMOE_ERR_MISMATCH, me,
                "%s epoch %llu root %u: rank %d sends a window of %llu bytes, others %llu",
                inc_wire_stream_name(c->stream), (unsigned long long)h->epoch, h->root, me,
                (unsigned long long)h->total, (unsigned long long)it->total);
        return NULL;
    }
    if (it->contrib[me] != NULL) {
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d sent chunk %u of root %u twice", me, h->chunk, h->root);
        return NULL;
    }
    return it;
}

/* Eager data UCX lets us keep: hold its buffer instead of copying it. */
static ucs_status_t data_keep_eager(item_t *it, int me, void *data, size_t length)
{
    job_t *job = it->ci.job;
    it->contrib[me] = data;
    it->ucx_owned[me] = 1;
    job_account(job->members, job, length);
    if (me != job->parent_rep || tree_windowed(it->ci.coll->stream))
        job->inflight[me][it->ci.coll->stream]++;
    job->members->stats->bytes_in += length;
    coll_item_hold(&it->ci); /* its forward, or a failure, may take the item out of the table */
    item_arrived(it, me);
    if (coll_item_shared(&it->ci)) {
        coll_item_put(&it->ci);
        return UCS_INPROGRESS; /* the item lives on: its release gives the buffer back */
    }
    /* Ours was the last hold (the job failed, or it all went out at once): UCX takes its
       buffer back when we return, so the item must not release it. */
    it->contrib[me] = NULL;
    it->ucx_owned[me] = 0;
    job_unaccount(job->members, job, length);
    coll_item_put(&it->ci);
    return UCS_OK;
}

/* A DATA from a rank or a child switch, or a FWD from the parent (tree.c): a contribution of
   the sender's port. */
static ucs_status_t on_data(const coll_env_t *env, job_t *job, conn_t *conn,
                            const struct inc_wire_hdr *h, void *data, size_t length,
                            const ucp_am_recv_param_t *param)
{
    const int from_parent = conn->role == CONN_PARENT;
    const int me = from_parent ? job->parent_rep : conn->rank;
    const int down = from_parent && h->stream == INCMOE_STREAM_ALLREDUCE;
    if (me < 0) {
        JOB_BAD(job->members, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch sent %s data for a job wholly beneath this switch",
                inc_wire_stream_name(h->stream));
        return UCS_ERR_INVALID_PARAM;
    }
    if (!data_allowed(job, me, down, h))
        return UCS_ERR_INVALID_PARAM;
    coll_t *c = coll_get(job->members, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(job->members, job, conn, c, h) ||
        !coll_set_form(job->members, job, conn, c, &chunked_form))
        return UCS_ERR_INVALID_PARAM;
    ucs_status_t st;
    item_t *it = item_for_data(env->pool, job, c, me, down, h, &st);
    if (it == NULL)
        return st;
    if (job->mem_used + length > job->mem_bound) {
        job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)
        return data_keep_eager(it, me, data, length);
    it->contrib[me] = job_alloc(job->members, job, length);
    if (it->contrib[me] == NULL) {
        job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    if (!from_parent || tree_windowed(h->stream))
        job->inflight[me][h->stream]++;
    job->members->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&it->ci, me, data, it->contrib[me], length);
    memcpy(it->contrib[me], data, length);
    item_arrived(it, me);
    return UCS_OK;
}

/* The reduction of a task handed to the workers is done (the router's on_wake). */
void chunked_reduced(reduce_task_t *task)
{
    item_reduced((item_t *)((char *)task - offsetof(item_t, task)));
}

const coll_form_t chunked_form = {
    .what = "in chunks (POST/DATA)",
    .post = on_post,
    .data = on_data,
    .tree_post = on_tree_post,
    .result_msg = WIRE_MSG_FWD,
    .parent_result = on_data, /* the parent port's contribution */
    .detach = chunked_detach,
};
