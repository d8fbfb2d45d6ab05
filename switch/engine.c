/*
 * engine.c - the switch engine: POST, DATA, FWD, CREDIT and DONE.
 *
 * Each collective (stream, epoch) of a job is a coll_t of the job's table
 * (coll_table.c); in the chunked form each chunk of a window is an item_t
 * that collects the contributions it needs (AllGather: the root's block;
 * ReduceScatter: the N-1 partials of everyone but the root; AllReduce: all
 * N).  Once every rank has POSTed the collective (so every receiver knows
 * where results go), a complete item is forwarded at once: multicast to the
 * N-1 others, reduced in rank order and sent to the root, or reduced and
 * multicast.  All roots and all chunks proceed independently, so the N
 * rooted reductions of a ReduceScatter run concurrently.  When the forward
 * completes the item leaves its collective and the contributors get their
 * credits back.  An item lives by the rule of coll_item.c: its collective,
 * each send, receive and reduction hold it.
 *
 * Small collectives (one SMALL in per rank, one SMALL_FWD out) are small.c's,
 * the other form of a collective; dispatch and combine are dc.c's; on_message
 * below hands each its messages.
 *
 * Anything malformed, out of range or inconsistent fails the job with a
 * reason sent to every rank, never the switch: other jobs carry on.
 */
#include "engine.h"
#include "coll_item.h"
#include "coll_table.h"
#include "dc.h"
#include "small.h"
#include "tree.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/reduce.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SUBSYS "switch"

/* One chunk of one window of one collective, and what the switch holds of it. */
typedef struct item {
    coll_item_t ci; /* first: its lifetime (coll_item.c), its job and its collective */
    struct item *next;
    struct engine *eng;
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

static void send_control(engine_t *eng, conn_t *conn, const struct inc_wire_hdr *h)
{
    eng->tx.ops->send(eng->tx.server, conn, h, NULL, 0, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* ports                                                                     */

/*
 * Does the port with key p send toward root's window, and does it get the
 * result (base/wire.h, "Switch trees")?  On one switch every port is a rank and
 * these are the stream's own rules; an AllReduce below the root goes up from
 * every port but the parent and comes down from the parent alone.
 */
static int port_contributes(const job_t *job, int stream, int down, int p, int root)
{
    if (stream == INCMOE_STREAM_ALLGATHER)
        return job->rep[root] == p;
    if (stream == INCMOE_STREAM_REDUCESCATTER)
        return job->rep[root] != p;
    if (job->parent_rep < 0)
        return 1;
    return down ? p == job->parent_rep : p != job->parent_rep;
}

static int port_receives(const job_t *job, int stream, int down, int p, int root)
{
    if (stream == INCMOE_STREAM_ALLGATHER)
        return job->rep[root] != p;
    if (stream == INCMOE_STREAM_REDUCESCATTER)
        return job->rep[root] == p;
    if (job->parent_rep < 0)
        return 1;
    return down ? p != job->parent_rep : p == job->parent_rep;
}

/* ------------------------------------------------------------------------ */
/* items and collectives: lifetime                                           */

/* The item's last hold is gone (coll_item.c): the one place it is freed. */
static void item_release(coll_item_t *ci)
{
    item_t *it = (item_t *)ci;
    engine_t *eng = it->eng;
    job_t *job = ci->job;
    for (int r = 0; r < job->nranks; r++) {
        if (it->ucx_owned[r] && it->contrib[r] != NULL) {
            eng->tx.ops->release_data(eng->tx.server, it->contrib[r]);
            job_unaccount(&eng->members, job, it->length);
        } else {
            job_free_mem(&eng->members, job, it->contrib[r], it->length);
        }
    }
    job_free_mem(&eng->members, job, it->out, it->length);
    free(it->contrib);
    free(it->arrived);
    free(it->ucx_owned);
    free(it);
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

static const coll_form_t chunked_form = {
    .what = "in chunks (POST/DATA)",
    .detach = chunked_detach,
};

/* Membership retires a job: its collectives go. */
static void drop_collectives(void *engine, job_t *job)
{
    (void)engine;
    coll_drop_job(job);
}

/* ------------------------------------------------------------------------ */
/* forwarding                                                                */

/* Each contributor of a forwarded item gets one credit back on the item's stream. */
static void item_return_credits(engine_t *eng, item_t *it)
{
    job_t *job = it->ci.job;
    coll_t *c = it->ci.coll;
    for (int r = 0; r < job->nranks; r++) {
        if (!it->arrived[r] || r == job->parent_rep) /* the parent's took no credit */
            continue;
        job->inflight[r][c->stream]--;
        struct inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_CREDIT, job->id);
        h.stream = (uint8_t)c->stream;
        h.epoch = c->epoch;
        h.length = 1;
        send_control(eng, job->conns[r], &h);
    }
}

/* Every send of the item's result completed: the contributors get their credits back and
   the item leaves its collective, which may be done now. */
static void item_forwarded(engine_t *eng, item_t *it)
{
    job_t *job = it->ci.job;
    coll_t *c = it->ci.coll;
    item_return_credits(eng, it);
    c->remaining -= it->length;
    item_unlink(it); /* the item may be gone now */
    coll_check_done(job, c);
}

static void item_sent(coll_item_t *ci)
{
    item_forwarded(((item_t *)ci)->eng, (item_t *)ci);
}

/* Send payload, the item's result, to every rank that gets it.  The sends are counted before
   the first goes, so only the last completion finishes the forward.  A send may complete
   before send_data returns (UCX may call back at once), and the last may then retire the
   collective: the loop reads nothing of it. */
static void item_forward(engine_t *eng, item_t *it, const void *payload)
{
    job_t *job = it->ci.job;
    const coll_t *c = it->ci.coll;
    const int root = (int)it->root, stream = c->stream;
    int n = 0;
    for (int p = 0; p < job->nranks; p++)
        n += job->rep[p] == p && port_receives(job, stream, it->down, p, root);
    if (n == 0) { /* an AllGather of one rank */
        item_forwarded(eng, it);
        return;
    }
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_FWD, job->id);
    h.stream = (uint8_t)c->stream;
    h.epoch = c->epoch;
    h.root = it->root;
    h.offset = it->offset;
    h.length = it->length;
    h.total = it->total;
    h.chunk = it->chunk;
    h.sig = c->sig; /* a child switch checks it as a rank's DATA */
    h.dtype = (uint8_t)c->dtype;
    h.redop = (uint8_t)c->redop;
    /* Reductions unblock the contributors' credits: they overtake multicast copies. */
    egress_class_t cls = coll_streams[stream].reduces ? EGRESS_RESULT : EGRESS_FORWARD;
    it->ci.sending = n;
    coll_item_hold(&it->ci); /* and may free the item: keep it until the last is posted */
    for (int p = 0; p < job->nranks && job->state == JOB_ACTIVE; p++) {
        if (job->rep[p] != p || !port_receives(job, stream, it->down, p, root))
            continue;
        if (p == job->parent_rep) { /* up: the parent takes it as a contribution */
            struct inc_wire_hdr up = h;
            up.msg = WIRE_MSG_DATA;
            up.rank = (uint32_t)job->up_rank;
            /* One class up: a ReduceScatter's partials ahead of the AllGather's blocks would
               hold the blocks back until the partials are all up, and leave the links down
               idle meanwhile (the parent multicasts blocks down only as they come up). */
            tree_send_up(&eng->members, job, &it->ci, EGRESS_FORWARD, &up, payload, NULL);
            continue;
        }
        h.rank = (uint32_t)p;
        coll_item_send(&it->ci, job->conns[p], cls, &h, payload);
    }
    coll_item_put(&it->ci);
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

static void task_compute(reduce_task_t *task)
{
    item_compute((item_t *)((char *)task - offsetof(item_t, task)));
}

/* The item's reduction is done (on a thread or inline): forward it, and put the reduction's
   hold. */
static void item_reduced(engine_t *eng, item_t *it)
{
    if (it->ci.coll != NULL && it->ci.job->state == JOB_ACTIVE)
        item_forward(eng, it, it->out);
    coll_item_put(&it->ci);
}

/* Forward an item whose contributions are all here. */
static void item_forward_complete(engine_t *eng, item_t *it)
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
        item_forward(eng, it, it->contrib[from]);
        return;
    }
    it->out = job_alloc(&eng->members, job, it->length);
    if (it->out == NULL) {
        job_fail(&eng->members, job, INCMOE_ERR_NO_MEMORY, 0,
                 "switch out of memory for a reduction");
        return;
    }
    coll_item_hold(&it->ci); /* the reduction's, put by item_reduced */
    if (reduce_pool_submit(&eng->pool, &it->task))
        return; /* item_reduced runs from on_wake */
    item_compute(it);
    item_reduced(eng, it);
}

/* Forward a complete item if everyone has posted (else coll_arm will). */
static void item_try_forward(engine_t *eng, item_t *it)
{
    if (it->ci.coll->armed)
        item_forward_complete(eng, it);
}

/* ------------------------------------------------------------------------ */
/* POST                                                                      */

/* Is an item consistent with what its root (with a shared window, every rank) announced? */
static int item_matches_post(engine_t *eng, job_t *job, coll_t *c, item_t *it)
{
    int owner = coll_streams[c->stream].shared_window ? -1 : (int)it->root;
    for (int r = 0; r < job->nranks; r++) {
        if (!c->posted[r] || (owner >= 0 && r != owner))
            continue;
        if (c->bytes[r] != it->total) {
            JOB_BAD(&eng->members, job, INCMOE_ERR_MISMATCH, r,
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
static void coll_arm(engine_t *eng, job_t *job, coll_t *c)
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
        if (!item_matches_post(eng, job, c, it))
            return;
    item_t *it = c->state;
    while (it != NULL && job->state == JOB_ACTIVE) {
        item_t *next = it->next; /* it may leave the list and go; the others stay */
        item_forward_complete(eng, it);
        it = next;
    }
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has dropped c */
    c->armed = 1;
    coll_check_done(job, c);
}

/* A barrier completes when the last rank posts it: every rank hears DONE (a switch port knows
   from the TREE_POSTs; a rank that posted it and left has no connection). */
static void barrier_complete(engine_t *eng, job_t *job, coll_t *c)
{
    for (int r = 0; r < job->nranks; r++) {
        if (job->rep[r] != r || job->conns[r] == NULL || job->conns[r]->role != CONN_RANK)
            continue;
        struct inc_wire_hdr d;
        inc_wire_hdr_init(&d, WIRE_MSG_DONE, job->id);
        d.stream = (uint8_t)c->stream;
        d.epoch = c->epoch;
        send_control(eng, job->conns[r], &d);
    }
    c->armed = 1;
    coll_check_done(job, c);
}

/* A shared window (AllReduce) has the same size on every rank. */
static int window_sizes_agree(engine_t *eng, job_t *job, coll_t *c)
{
    for (int r = 1; r < job->nranks; r++) {
        if (c->bytes[r] != c->bytes[0]) {
            JOB_BAD(&eng->members, job, INCMOE_ERR_MISMATCH, r,
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
static void after_post(engine_t *eng, job_t *job, coll_t *c, int last)
{
    if (job->tree)
        tree_relay_posts(&eng->members, job, c);
    if (!last || job->state != JOB_ACTIVE)
        return; /* others have yet to post */
    const coll_stream_t *kind = &coll_streams[c->stream];
    if (!kind->data) {
        barrier_complete(eng, job, c);
        return;
    }
    if (kind->shared_window && !window_sizes_agree(eng, job, c))
        return;
    coll_arm(eng, job, c);
}

static void on_post(engine_t *eng, job_t *job, conn_t *conn, const struct inc_wire_hdr *h)
{
    const coll_stream_t *kind = &coll_streams[h->stream];
    coll_t *c = coll_get(&eng->members, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(&eng->members, job, conn, c, h))
        return;
    if (kind->data && !coll_set_form(&eng->members, job, conn, c, &chunked_form))
        return;
    if (!coll_unposted(&eng->members, job, c, conn->rank, "posted"))
        return;
    after_post(eng, job, c, coll_post(job, c, conn->rank, h->total));
}

/* A switch port's TREE_POST: every rank it covers posted (tree.c). */
static void on_tree_post(engine_t *eng, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                         const void *data, size_t length)
{
    membership_t *m = &eng->members;
    if (length != 8 * (size_t)job->nranks) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, conn->rank, "a TREE_POST of %zu bytes for %d ranks",
                length, job->nranks);
        return;
    }
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(m, job, conn, c, h))
        return;
    if (coll_streams[h->stream].data && !coll_set_form(m, job, conn, c, &chunked_form))
        return;
    int last = 0;
    for (int r = 0; r < job->nranks; r++) {
        if (job->conns[r] != conn)
            continue;
        if (!coll_unposted(m, job, c, r, "posted"))
            return;
        uint64_t bytes;
        memcpy(&bytes, (const char *)data + 8 * (size_t)r, sizeof(bytes));
        last = coll_post(job, c, r, bytes);
    }
    after_post(eng, job, c, last);
}

/* ------------------------------------------------------------------------ */
/* DATA                                                                      */

/* A contribution has fully arrived (eager at once, rendezvous when its receive ends). */
static void item_arrived(engine_t *eng, item_t *it, int from)
{
    it->arrived[from] = 1;
    it->narrived++;
    if (it->ci.coll != NULL && it->ci.job->state == JOB_ACTIVE)
        item_try_forward(eng, it);
}

static void item_received(coll_item_t *ci, int from)
{
    item_arrived(((item_t *)ci)->eng, (item_t *)ci, from);
}

static const coll_item_ops_t item_ops = {
    .arrived = item_received,
    .sent = item_sent,
    .release = item_release,
};

/* May the port with key me send this chunk: its role for the root, the chunking, its credits
   (the parent's take none)? */
static int data_allowed(engine_t *eng, job_t *job, int me, int down, const struct inc_wire_hdr *h)
{
    const int stream = h->stream;
    const uint64_t chunk = eng->set->chunk_size;
    if (h->root >= (uint32_t)job->nranks || (coll_streams[stream].shared_window && h->root != 0) ||
        !port_contributes(job, stream, down, me, (int)h->root)) {
        JOB_BAD(&eng->members, job, INCMOE_ERR_PROTOCOL, me, "%s %d sent %s data for root %u",
                me == job->parent_rep ? "the parent port of rank" : "rank", me,
                inc_wire_stream_name(stream), h->root);
        return 0;
    }
    if (h->offset % chunk != 0 || h->chunk != h->offset / chunk ||
        h->length != (h->total - h->offset < chunk ? h->total - h->offset : chunk)) {
        JOB_BAD(&eng->members, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d: chunk %u [%llu,+%llu) of %llu bytes does not follow the %llu-byte "
                "chunking",
                me, h->chunk, (unsigned long long)h->offset, (unsigned long long)h->length,
                (unsigned long long)h->total, (unsigned long long)chunk);
        return 0;
    }
    return me == job->parent_rep || coll_credit_left(&eng->members, job, me, stream);
}

static item_t *item_new(engine_t *eng, job_t *job, coll_t *c, int down,
                        const struct inc_wire_hdr *h)
{
    item_t *it = calloc(1, sizeof(*it));
    if (it != NULL) {
        it->contrib = calloc((size_t)job->nranks, sizeof(void *));
        it->arrived = calloc((size_t)job->nranks, 1);
        it->ucx_owned = calloc((size_t)job->nranks, 1);
    }
    if (it == NULL || it->contrib == NULL || it->arrived == NULL || it->ucx_owned == NULL) {
        if (it != NULL) {
            free(it->contrib);
            free(it->arrived);
            free(it->ucx_owned);
        }
        free(it);
        return NULL;
    }
    coll_item_init(&it->ci, &item_ops, job, c); /* the collective's hold: its list below */
    it->eng = eng;
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
static item_t *item_for_data(engine_t *eng, job_t *job, coll_t *c, int me, int down,
                             const struct inc_wire_hdr *h, ucs_status_t *st)
{
    *st = UCS_ERR_INVALID_PARAM;
    item_t *it = c->state;
    while (it != NULL && !(it->root == h->root && it->chunk == h->chunk && it->down == down))
        it = it->next;
    if (it == NULL) {
        it = item_new(eng, job, c, down, h);
        if (it == NULL) {
            job_fail(&eng->members, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
            *st = UCS_ERR_NO_MEMORY;
            return NULL;
        }
        if (c->armed && !item_matches_post(eng, job, c, it))
            return NULL;
    } else if (it->total != h->total || it->length != h->length) {
        JOB_BAD(&eng->members, job, INCMOE_ERR_MISMATCH, me,
                "%s epoch %llu root %u: rank %d sends a window of %llu bytes, others %llu",
                inc_wire_stream_name(c->stream), (unsigned long long)h->epoch, h->root, me,
                (unsigned long long)h->total, (unsigned long long)it->total);
        return NULL;
    }
    if (it->contrib[me] != NULL) {
        JOB_BAD(&eng->members, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d sent chunk %u of root %u twice", me, h->chunk, h->root);
        return NULL;
    }
    return it;
}

/* Eager data UCX lets us keep: hold its buffer instead of copying it. */
static ucs_status_t data_keep_eager(engine_t *eng, item_t *it, int me, void *data, size_t length)
{
    job_t *job = it->ci.job;
    it->contrib[me] = data;
    it->ucx_owned[me] = 1;
    job_account(&eng->members, job, length);
    if (me != job->parent_rep)
        job->inflight[me][it->ci.coll->stream]++;
    eng->stats->bytes_in += length;
    coll_item_hold(&it->ci); /* its forward, or a failure, may take the item out of the table */
    item_arrived(eng, it, me);
    if (coll_item_shared(&it->ci)) {
        coll_item_put(&it->ci);
        return UCS_INPROGRESS; /* the item lives on: its release gives the buffer back */
    }
    /* Ours was the last hold (the job failed, or it all went out at once): UCX takes its
       buffer back when we return, so the item must not release it. */
    it->contrib[me] = NULL;
    it->ucx_owned[me] = 0;
    job_unaccount(&eng->members, job, length);
    coll_item_put(&it->ci);
    return UCS_OK;
}

/* A DATA from a rank or a child switch, or a FWD from the parent (tree.c): a contribution of
   the sender's port. */
static ucs_status_t on_data(engine_t *eng, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                            void *data, size_t length, const ucp_am_recv_param_t *param)
{
    const int from_parent = conn->role == CONN_PARENT;
    const int me = from_parent ? job->parent_rep : conn->rank;
    const int down = from_parent && h->stream == INCMOE_STREAM_ALLREDUCE;
    if (me < 0) {
        JOB_BAD(&eng->members, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch sent %s data for a job wholly beneath this switch",
                inc_wire_stream_name(h->stream));
        return UCS_ERR_INVALID_PARAM;
    }
    if (!data_allowed(eng, job, me, down, h))
        return UCS_ERR_INVALID_PARAM;
    coll_t *c = coll_get(&eng->members, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(&eng->members, job, conn, c, h) ||
        !coll_set_form(&eng->members, job, conn, c, &chunked_form))
        return UCS_ERR_INVALID_PARAM;
    ucs_status_t st;
    item_t *it = item_for_data(eng, job, c, me, down, h, &st);
    if (it == NULL)
        return st;
    if (job->mem_used + length > job->mem_bound) {
        job_fail(&eng->members, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)
        return data_keep_eager(eng, it, me, data, length);
    it->contrib[me] = job_alloc(&eng->members, job, length);
    if (it->contrib[me] == NULL) {
        job_fail(&eng->members, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    if (!from_parent)
        job->inflight[me][h->stream]++;
    eng->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&it->ci, me, data, it->contrib[me], length);
    memcpy(it->contrib[me], data, length);
    item_arrived(eng, it, me);
    return UCS_OK;
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
        /* The combine's chunks between switches take no credit (dc_combine.c). */
        if (h->stream == INCMOE_STREAM_COMBINE || h->stream == INCMOE_STREAM_BARRIER)
            break;
        tree_up_credit(m, job, h->stream, h->length);
        return UCS_OK;
    case WIRE_MSG_TREE_POST:
        on_tree_post(eng, job, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_POST: /* a dispatch or combine POST of a rank beyond this switch */
        if (!inc_wire_is_dc(h->stream))
            break;
        return dc_on_message(m, job, conn, h, data, length, param);
    case WIRE_MSG_FWD:
        if (inc_wire_is_dc(h->stream))
            return dc_on_message(m, job, conn, h, data, length, param);
        return on_data(eng, job, conn, h, data, length, param);
    case WIRE_MSG_SMALL_FWD:
        if (inc_wire_is_dc(h->stream))
            break;
        return small_on_parent_result(m, job, conn, h, data, length, param);
    default:
        break;
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
    /* The header check bounded the stream of these three. */
    if ((h->msg == WIRE_MSG_POST || h->msg == WIRE_MSG_DATA || h->msg == WIRE_MSG_SMALL) &&
        coll_streams[h->stream].planned)
        return dc_on_message(&eng->members, job, conn, h, data, length, param);
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_HEARTBEAT:
        return UCS_OK;
    case WIRE_MSG_LEAVE:
        on_leave(eng, job, conn);
        return UCS_OK;
    case WIRE_MSG_ERROR:
        member_on_error(&eng->members, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_POST:
        on_post(eng, job, conn, h);
        return UCS_OK;
    case WIRE_MSG_DATA:
        return on_data(eng, job, conn, h, data, length, param);
    case WIRE_MSG_SMALL:
        return small_on_message(&eng->members, job, conn, h, data, length, param);
    case WIRE_MSG_TREE_JOIN:
        if (conn->role != CONN_CHILD)
            break;
        member_tree_join(&eng->members, conn, h, data, length);
        return UCS_OK;
    case WIRE_MSG_TREE_POST:
        if (conn->role != CONN_CHILD)
            break;
        on_tree_post(eng, job, conn, h, data, length);
        return UCS_OK;
    default:
        break;
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
        item_reduced(eng, (item_t *)((char *)done - offsetof(item_t, task)));
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
    }
}

static void on_tick(void *engine, conn_t *conns)
{
    engine_t *eng = engine;
    member_tick(&eng->members, conns);
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
    membership_init(&eng->members, set, stats, tx, drop_collectives, eng);
    return reduce_pool_start(&eng->pool, set->nthreads - 1, task_compute);
}

void engine_fini(engine_t *eng)
{
    reduce_pool_stop(&eng->pool);
}
