/*
 * dc_window.c - the combine's window between switches.  An owner s's set
 * chunks travel away from s, from the switch where s is a rank to every
 * switch whose side the sets name; the partials travel back, each answering
 * a set chunk the receiving switch sent (dc_combine.c).  A set chunk sent to
 * a switch port p takes one of the window of s on that link (the window the
 * child's TREE_JOIN announced, the same both ways: job->down[p].granted at
 * the parent, --link-window at the child); p answers it with a CREDIT that
 * names s (hdr.root) once its item of that chunk is done, which is after p's
 * partial of it went.  A switch port that sends more set chunks of s than
 * the window fails the job with a reason.  A partial from a switch port is
 * taken only into an item whose set chunk went there and holds none from it
 * yet (dc_combine.c's admit), so the partials a switch holds are bounded by
 * its items, and its items whose owner is beyond a switch port by the
 * window: job_dc_memory_bound (membership.c) charges that.
 *
 * Why it cannot deadlock, beside tree.c's argument for the ReduceScatter
 * partials.  Every rank sends its combine DATA, set chunks and partials alike,
 * in the global (epoch, chunk, root) order (plugin/innet_dc.c), and a switch
 * takes an owner's set chunks in chunk order (dc_item.c, dc_advance).  Here a
 * set chunk toward p waits only for its owner's window on that link, behind
 * that owner's earlier set chunks toward p (in (epoch, chunk) order), and for
 * every earlier combine to be finished at this switch: a rendezvous set chunk
 * still landing may let a later epoch's chunk of the same owner be taken
 * first, and the second rule keeps it from taking the window ahead of it.
 * Take the lowest item I* = (e, j, s) not finished at every switch.  Every
 * item below it is, so the credits and window slots they took are back, and
 * every combine before e is finished everywhere.  A rank that holds a credit
 * on an item above I* sent I*'s set chunk or partial before it, so none waits
 * for a credit to send its piece of I*.  At each switch on the way out from
 * s, I*'s set chunk is taken (s's earlier chunks are finished, so taken) and
 * finds the window of s toward each port free (its slots were held only by
 * s's earlier set chunks, finished) and its epoch's turn come.  So I*'s item
 * at each switch gets its set chunk and its ranks' partials; at the switches
 * farthest from s that is all it needs, and it reduces and sends its partial
 * back, which takes no window; so, by induction toward s, does each switch's
 * item, and the one at s's own switch sends s its result.  I* finishes
 * everywhere, and by induction every item does.  A window shared by the
 * owners fails where tree.c says: its slots may be held by other owners' set
 * chunks above I* whose items wait for ranks whose credits wait for I*.
 *
 * What it costs: a combine's set chunks between switches wait until every
 * earlier combine finished at the sending switch, so consecutive combines
 * overlap only within each switch, not across its links.
 */
#include "dc_window.h"

#include <stdlib.h>

/* A set chunk waiting for its owner's window or its epoch's turn. */
typedef struct combine_send {
    struct combine_send *next;
    coll_item_t *ci;
    struct inc_wire_hdr h;
    const void *payload;
} combine_send_t;

/* The window of the link to switch port p (its child's TREE_JOIN's, either way). */
static uint32_t window_of(const job_t *job, int p)
{
    if (p == job->parent_rep)
        return job->members->set->link_window;
    return job->down != NULL ? job->down[p].granted : 0;
}

/* The link to switch port p, its counts made on first use; NULL: out of memory. */
static combine_link_t *link_of(job_t *job, int p)
{
    if (job->clinks == NULL &&
        (job->clinks = calloc((size_t)job->nranks, sizeof(*job->clinks))) == NULL)
        return NULL;
    combine_link_t *l = &job->clinks[p];
    if (l->out == NULL && (l->out = calloc(2 * (size_t)job->nranks, sizeof(uint32_t))) != NULL)
        l->held = l->out + job->nranks;
    return l->out != NULL ? l : NULL;
}

/* May the set chunk q go now: its owner's window toward p has room, and every combine
   before its epoch is finished here? */
static int may_go(const job_t *job, const combine_link_t *l, int p, const combine_send_t *q)
{
    return l->out[q->h.root] < window_of(job, p) &&
           q->h.epoch <= job->retired[INCMOE_STREAM_COMBINE] + 1;
}

static void go(job_t *job, combine_link_t *l, int p, coll_item_t *ci, const struct inc_wire_hdr *h,
               const void *payload)
{
    l->out[h->root]++;
    /* Set chunks let the far side contribute: ahead of multicast copies, like results. */
    coll_item_send(ci, job->conns[p], EGRESS_RESULT, h, payload);
}

/* Send every waiting set chunk toward p that may go, each owner's in order; one going may
   let another, and a send may complete inline and change the list, so each starts over. */
static void pump_link(job_t *job, int p)
{
    combine_link_t *l = &job->clinks[p];
    uint64_t seen[(INCMOE_MAX_RANKS + 63) / 64] = {0};
    combine_send_t **at = &l->waiting;
    while (*at != NULL && job->state == JOB_ACTIVE) {
        combine_send_t *q = *at;
        const uint32_t s = q->h.root;
        if ((seen[s / 64] >> (s % 64)) & 1 || !may_go(job, l, p, q)) {
            seen[s / 64] |= 1ull << (s % 64); /* the owner's later chunks wait behind it */
            at = &q->next;
            continue;
        }
        *at = q->next;
        go(job, l, p, q->ci, &q->h, q->payload);
        coll_item_put(q->ci);
        free(q);
        at = &l->waiting;
        for (size_t w = 0; w < sizeof(seen) / sizeof(seen[0]); w++)
            seen[w] = 0;
    }
}

/* Is a set chunk of owner s waiting toward p? */
static int owner_waits(const combine_link_t *l, uint32_t s)
{
    for (const combine_send_t *q = l->waiting; q != NULL; q = q->next)
        if (q->h.root == s)
            return 1;
    return 0;
}

void dc_window_send(membership_t *m, job_t *job, int p, coll_item_t *ci,
                    const struct inc_wire_hdr *h, const void *payload)
{
    combine_link_t *l = link_of(job, p);
    combine_send_t *q = l != NULL ? malloc(sizeof(*q)) : NULL;
    if (q == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, p, "switch out of memory");
        return;
    }
    *q = (combine_send_t){.ci = ci, .h = *h, .payload = payload};
    if (!owner_waits(l, h->root) && may_go(job, l, p, q)) {
        free(q);
        go(job, l, p, ci, h, payload);
        return;
    }
    coll_item_hold(ci); /* until it goes */
    combine_send_t **at = &l->waiting;
    while (*at != NULL && ((*at)->h.epoch < h->epoch ||
                           ((*at)->h.epoch == h->epoch && (*at)->h.chunk <= h->chunk)))
        at = &(*at)->next;
    q->next = *at;
    *at = q;
}

int dc_window_in(membership_t *m, job_t *job, int p, uint32_t owner)
{
    combine_link_t *l = link_of(job, p);
    if (l == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, p, "switch out of memory");
        return 0;
    }
    if (l->held[owner] >= window_of(job, p)) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, p,
                "the %s switch exceeded the window of %u on combine set chunks of rank %u",
                p == job->parent_rep ? "parent" : "child", window_of(job, p), owner);
        return 0;
    }
    l->held[owner]++;
    return 1;
}

void dc_window_done(membership_t *m, job_t *job, int p, uint32_t owner, uint64_t epoch)
{
    if (job->state != JOB_ACTIVE)
        return;
    job->clinks[p].held[owner]--;
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_CREDIT, job->id);
    h.stream = INCMOE_STREAM_COMBINE;
    h.epoch = epoch;
    h.root = owner; /* whose window */
    h.length = 1;
    h.rank = (uint32_t)(p == job->parent_rep ? job->up_rank : p); /* the sender's key */
    m->tx.ops->send(m->tx.server, job->conns[p], &h, NULL, 0, NULL, NULL);
}

void dc_window_credit(membership_t *m, job_t *job, int p, uint32_t owner, uint64_t n)
{
    const combine_link_t *l = p >= 0 && job->clinks != NULL ? &job->clinks[p] : NULL;
    const int known = l != NULL && l->out != NULL && owner < (uint32_t)job->nranks;
    const uint32_t out = known ? l->out[owner] : 0;
    if (!known || n > out) { /* none sent there, or not that many */
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, p < 0 ? 0 : p,
                "the %s switch returned %llu combine credits of rank %u; %u were out",
                p >= 0 && p == job->parent_rep ? "parent" : "child", (unsigned long long)n, owner,
                out);
        return;
    }
    job->clinks[p].out[owner] -= (uint32_t)n;
    pump_link(job, p);
}

void dc_window_pump(job_t *job)
{
    for (int p = 0; job->clinks != NULL && p < job->nranks && job->state == JOB_ACTIVE; p++)
        if (job->clinks[p].waiting != NULL)
            pump_link(job, p);
}

void dc_window_drop(job_t *job)
{
    for (int p = 0; job->clinks != NULL && p < job->nranks; p++) {
        while (job->clinks[p].waiting != NULL) {
            combine_send_t *q = job->clinks[p].waiting;
            job->clinks[p].waiting = q->next;
            coll_item_put(q->ci);
            free(q);
        }
    }
}
