/*
 * tree.c - what a tree of switches adds to the collectives, below the forms.
 *
 * The collectives run on ports (chunked.c, small.c, dc_form.c); joining a
 * tree is tree_join.c's.  What only a tree adds: sends up take the parent's
 * credits (a DATA or SMALL waits in order while none is left, holding its
 * item; a failed job's waiting sends go through the engine's drop hook,
 * tree_drop_up_queue), sends down a child's window (per stream, and for the
 * ReduceScatter partials per owner, in chunk order), and every switch sees
 * every rank's POST through the TREE_POSTs relayed across each link once the
 * far side posted.  One link per
 * job keeps the jobs apart at the parent exactly as ranks are: isolation,
 * memory admission and timeouts hold at every level.
 */
#include "tree.h"

#include <stdlib.h>

/* A send that waits for the far side's credits, in order. */
typedef struct link_send {
    struct link_send *next;
    coll_item_t *ci;
    egress_class_t cls;
    struct inc_wire_hdr h;
    const void *payload;
    switch_tx_build_t build;
} link_send_t;

/* ------------------------------------------------------------------------ */
/* joining                                                                   */

static void free_payload_cb(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

/* ------------------------------------------------------------------------ */
/* sends under a window: up the parent's credits, down a child's window      */

static void link_go(link_window_t *w, conn_t *to, coll_item_t *ci, egress_class_t cls,
                    const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build)
{
    w->left[h->stream]--;
    if (build != NULL)
        coll_item_send_built(ci, to, cls, h, build);
    else
        coll_item_send(ci, to, cls, h, payload);
}

/* Send now if the window has room and nothing waits before it, else queue in order (the item
   held until it goes).  port: the key named if the switch runs out of memory. */
static void link_send(membership_t *m, job_t *job, link_window_t *w, conn_t *to, int port,
                      coll_item_t *ci, egress_class_t cls, const struct inc_wire_hdr *h,
                      const void *payload, switch_tx_build_t build)
{
    const int s = h->stream;
    if (w->head[s] == NULL && w->left[s] > 0) {
        link_go(w, to, ci, cls, h, payload, build);
        return;
    }
    link_send_t *q = malloc(sizeof(*q));
    if (q == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, port, "switch out of memory");
        return;
    }
    *q = (link_send_t){.ci = ci, .cls = cls, .h = *h, .payload = payload, .build = build};
    coll_item_hold(ci); /* until it goes */
    if (w->tail[s] != NULL)
        w->tail[s]->next = q;
    else
        w->head[s] = q;
    w->tail[s] = q;
}

/* n credits came back (checked): what waits goes while the window has room. */
static void link_credit(job_t *job, link_window_t *w, conn_t *to, int stream, uint64_t n)
{
    w->left[stream] += (uint32_t)n;
    while (w->head[stream] != NULL && w->left[stream] > 0 && job->state == JOB_ACTIVE) {
        link_send_t *q = w->head[stream];
        w->head[stream] = q->next;
        if (q->next == NULL)
            w->tail[stream] = NULL;
        link_go(w, to, q->ci, q->cls, &q->h, q->payload, q->build);
        coll_item_put(q->ci);
        free(q);
    }
}

static void drop_list(link_send_t *q)
{
    while (q != NULL) {
        link_send_t *next = q->next;
        coll_item_put(q->ci);
        free(q);
        q = next;
    }
}

static void link_drop(link_window_t *w)
{
    drop_list(w->partials);
    w->partials = NULL;
    for (int s = 0; s < INC_STREAM_COUNT; s++) {
        drop_list(w->head[s]);
        w->head[s] = w->tail[s] = NULL;
    }
}

void tree_send_up(membership_t *m, job_t *job, coll_item_t *ci, egress_class_t cls,
                  const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build)
{
    link_send(m, job, &job->up, job->parent, job->up_rank, ci, cls, h, payload, build);
}

/*
 * Why a child's window cannot deadlock: an AllGather block, an AllReduce result or a dispatch
 * chunk that comes down is an item of the child that needs nothing more from its ports, only
 * the POSTs (TREE_POSTs and relayed POSTs, which take no window): it goes on to the child's
 * ports, and its CREDIT follows.  So a FWD waiting here for the window, and the credits of
 * this switch's ports its item holds, wait only for sends already out.  Not so a
 * ReduceScatter partial or a combine chunk: the child's item waits for its own ranks'
 * partials, whose credits may be held by items that wait for a FWD queued behind a shared
 * window.  ReduceScatter partials therefore take a window per owner, below; the combine's set
 * chunks one per owner and link, both ways (dc_window.c, with its argument).
 */
int tree_windowed(int stream)
{
    return stream == INCMOE_STREAM_ALLGATHER || stream == INCMOE_STREAM_ALLREDUCE ||
           stream == INCMOE_STREAM_DISPATCH;
}

void tree_send_down(membership_t *m, job_t *job, int p, coll_item_t *ci, egress_class_t cls,
                    const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build)
{
    link_send(m, job, &job->down[p], job->conns[p], p, ci, cls, h, payload, build);
}

/* ------------------------------------------------------------------------ */
/* ReduceScatter partials down: a window per owner, in (epoch, chunk) order  */

/*
 * Why a window per owner, taken in (epoch, chunk) order, cannot deadlock where a shared one
 * can.  Every rank sends its DATA in the global order (epoch, chunk, root) (plugin/innet.c),
 * and a switch's items complete in that order too, as each of their contributors sends in it
 * over an ordered link.  Take the lowest item I* = (e, j, b) not finished everywhere: every
 * item below it is, so the credits and window slots they took are back.  A contributor that
 * holds a credit on an item above I* sent I*'s partial before it, so none waits for a credit
 * to send I*'s.  Down a link, the slots of b's window are held only by b's partials sent
 * earlier, which in (epoch, chunk) order are below I* and finished: I*'s partial finds the
 * window free and its turn come.  So I* finishes, and by induction every item does.  A shared
 * window fails the second step: its slots may be held by other owners' partials above I*,
 * whose items at the child wait for ranks whose credits wait for I*.
 */

static tree_owner_t *owners_of(job_t *job)
{
    if (job->owners == NULL)
        job->owners = calloc((size_t)job->nranks, sizeof(*job->owners));
    return job->owners;
}

/* Has an armed ReduceScatter from the owner's next turn up to epoch e chunks of b to send? */
static int earlier_partials_owed(const job_t *job, const tree_owner_t *o, int b, uint64_t e)
{
    for (const coll_t *c = job->colls[INCMOE_STREAM_REDUCESCATTER]; c != NULL; c = c->next)
        if (c->epoch >= o->next_epoch && c->epoch < e && c->armed && c->bytes[b] > 0)
            return 1;
    return 0;
}

/* Has the owner of partial q room in its window, and is q its next in (epoch, chunk) order? */
static int partial_may_go(const job_t *job, const link_send_t *q)
{
    const int b = (int)q->h.root;
    const tree_owner_t *o = &job->owners[b];
    if (o->left == 0)
        return 0;
    if (q->h.epoch == o->next_epoch)
        return q->h.chunk == o->next_chunk;
    return q->h.epoch > o->next_epoch && q->h.chunk == 0 && o->next_chunk == 0 &&
           !earlier_partials_owed(job, o, b, q->h.epoch);
}

/* Send every waiting partial toward port p that may go; one going may let another. */
static void partials_pump(job_t *job, int p)
{
    link_send_t **at = &job->down[p].partials;
    while (*at != NULL && job->state == JOB_ACTIVE) {
        link_send_t *q = *at;
        if (!partial_may_go(job, q)) {
            at = &q->next;
            continue;
        }
        *at = q->next;
        tree_owner_t *o = &job->owners[q->h.root];
        o->left--;
        const int last = q->h.offset + q->h.length >= q->h.total;
        o->next_epoch = last ? q->h.epoch + 1 : q->h.epoch;
        o->next_chunk = last ? 0 : q->h.chunk + 1;
        coll_item_send(q->ci, job->conns[p], q->cls, &q->h, q->payload);
        coll_item_put(q->ci);
        free(q);
        at = &job->down[p].partials;
    }
}

void tree_send_partial_down(membership_t *m, job_t *job, int p, coll_item_t *ci, egress_class_t cls,
                            const struct inc_wire_hdr *h, const void *payload)
{
    link_send_t *q = malloc(sizeof(*q));
    if (q == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, p, "switch out of memory");
        return;
    }
    *q = (link_send_t){
        .next = job->down[p].partials, .ci = ci, .cls = cls, .h = *h, .payload = payload};
    coll_item_hold(ci); /* until it goes */
    job->down[p].partials = q;
    partials_pump(job, p);
}

/* The child switch port p returned n credits of owner root's window. */
static void partials_credit(membership_t *m, job_t *job, int p, uint32_t root, uint64_t n)
{
    const uint32_t out = root < (uint32_t)job->nranks && job->rep[root] == p
                             ? job->down[p].granted - job->owners[root].left
                             : 0;
    if (n > out) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, p,
                "the child switch port of rank %d returned %llu reducescatter credits of rank "
                "%u; %u were out",
                p, (unsigned long long)n, root, out);
        return;
    }
    job->owners[root].left += (uint32_t)n;
    partials_pump(job, p);
}

int tree_parent_partial_in(membership_t *m, job_t *job, uint32_t root)
{
    if (owners_of(job) == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, job->parent_rep, "switch out of memory");
        return 0;
    }
    if (job->owners[root].from_parent >= m->set->link_window) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, job->parent_rep,
                "the parent switch exceeded this switch's window of %u on reducescatter "
                "partials of rank %u",
                m->set->link_window, root);
        return 0;
    }
    job->owners[root].from_parent++;
    return 1;
}

void tree_parent_partial_done(job_t *job, uint32_t root)
{
    job->owners[root].from_parent--;
}

void tree_up_credit(membership_t *m, job_t *job, int stream, uint64_t n)
{
    const link_window_t *w = &job->up;
    if (n > w->granted - w->left[stream]) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch returned %llu %s credits; %u were out", (unsigned long long)n,
                inc_wire_stream_name(stream), w->granted - w->left[stream]);
        return;
    }
    link_credit(job, &job->up, job->parent, stream, n);
}

void tree_down_credit(membership_t *m, job_t *job, int p, int stream, uint32_t root, uint64_t n)
{
    const link_window_t *w = &job->down[p];
    if (stream == INCMOE_STREAM_REDUCESCATTER) {
        partials_credit(m, job, p, root, n);
        return;
    }
    if (!tree_windowed(stream) || n > w->granted - w->left[stream]) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, p,
                "the child switch port of rank %d returned %llu %s credits; %u were out", p,
                (unsigned long long)n, inc_wire_stream_name(stream),
                tree_windowed(stream) ? w->granted - w->left[stream] : 0);
        return;
    }
    link_credit(job, &job->down[p], job->conns[p], stream, n);
}

int tree_window_set(job_t *job, int r, uint32_t window)
{
    if (job->down == NULL && (job->down = calloc((size_t)job->nranks, sizeof(*job->down))) == NULL)
        return 0;
    if (owners_of(job) == NULL)
        return 0;
    job->owners[r].left = window; /* r's partials, toward the port covering it */
    job->down[r].granted = window;
    for (int s = 0; s < INC_STREAM_COUNT; s++)
        job->down[r].left[s] = window;
    return 1;
}

void tree_drop_queues(job_t *job)
{
    link_drop(&job->up);
    for (int p = 0; job->down != NULL && p < job->nranks; p++)
        link_drop(&job->down[p]);
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
