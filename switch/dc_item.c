/*
 * dc_item.c - what the items of dispatch and combine share (dc_item.h): the
 * ports a row's set meets, an item's life from its first contribution to its
 * finish (credits back, out of its collective), and the order each root's
 * chunks are taken in.  The kinds' own work is reached through the
 * collective's dc_kind_t (dc_dispatch.c, dc_combine.c), never by name, so
 * the kinds call down into this file and not the other way.
 */
#include "dc_item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dc_window.h"

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

uint64_t dc_nchunks(const dc_coll_t *dc, uint64_t rows)
{
    return (rows + dc->rows_per_chunk - 1) / dc->rows_per_chunk;
}

int dc_read_set(const char *sets, uint64_t row, size_t words, int nranks, uint64_t *set)
{
    memcpy(set, sets + row * words * 8, words * 8);
    const unsigned tail = (unsigned)nranks % 64;
    return tail == 0 || (set[words - 1] >> tail) == 0;
}

int dc_switch_port(const job_t *job, int p)
{
    return job->conns[p] != NULL && job->conns[p]->role != CONN_RANK;
}

const char *dc_port_name(const job_t *job, int p, char *buf, size_t len)
{
    snprintf(buf, len, "%s%d", dc_switch_port(job, p) ? "the switch port of rank " : "rank ", p);
    return buf;
}

int dc_set_ports(const job_t *job, const uint64_t *set, size_t words, int except, int *ports)
{
    int n = 0;
    for (size_t w = 0; w < words; w++) {
        for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1) {
            const int p = job->rep[w * 64 + (size_t)__builtin_ctzll(bits)];
            if (p == except)
                continue;
            int at = n; /* ascending: on one switch each rank comes last, so this stays short */
            while (at > 0 && ports[at - 1] > p)
                at--;
            if (at > 0 && ports[at - 1] == p)
                continue;
            memmove(&ports[at + 1], &ports[at], (size_t)(n - at) * sizeof(int));
            ports[at] = p;
            n++;
        }
    }
    return n;
}

int dc_set_meets(const job_t *job, const uint64_t *set, size_t words, int p)
{
    if (!dc_switch_port(job, p)) /* a rank port covers its rank alone */
        return (int)((set[p / 64] >> (p % 64)) & 1);
    for (size_t w = 0; w < words; w++)
        for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
            if (job->rep[w * 64 + (size_t)__builtin_ctzll(bits)] == p)
                return 1;
    return 0;
}

int dc_set_beyond(const job_t *job, const uint64_t *set, size_t words, int p)
{
    for (size_t w = 0; w < words; w++)
        for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1)
            if (job->rep[w * 64 + (size_t)__builtin_ctzll(bits)] != p)
                return 1;
    return 0;
}

void dc_send_credit(membership_t *m, job_t *job, int r, int stream, uint64_t epoch)
{
    if (job->state != JOB_ACTIVE)
        return;
    job->inflight[r][stream]--;
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_CREDIT, job->id);
    h.stream = (uint8_t)stream;
    h.epoch = epoch;
    h.length = 1;
    if (r == job->parent_rep)
        h.rank = (uint32_t)job->up_rank; /* a child speaks for its port */
    m->tx.ops->send(m->tx.server, job->conns[r], &h, NULL, 0, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* items                                                                     */

static void item_release(coll_item_t *ci);
static void item_arrived(coll_item_t *ci, int from);
static void item_sent(coll_item_t *ci);

static const coll_item_ops_t item_ops = {
    .arrived = item_arrived,
    .sent = item_sent,
    .release = item_release,
};

/* A piece's item is done with it: the SMALL's credit goes back with its last piece. */
void dc_credit_put(membership_t *m, job_t *job, dc_credit_t *cr)
{
    if (--cr->pieces > 0)
        return;
    dc_send_credit(m, job, cr->from, cr->stream, cr->epoch);
    free(cr);
}

/* The item's last hold is gone (coll_item.c): the one place it is freed. */
/* The item's memory of its own (NULL: nothing), as dc_item_new made it. */
static void item_free(dc_item_t *it)
{
    if (it == NULL)
        return;
    free(it->contrib);
    free(it->kd);
    free(it);
}

static void item_release(coll_item_t *ci)
{
    dc_item_t *it = (dc_item_t *)ci;
    job_t *job = ci->job;
    membership_t *m = job->members;
    for (int r = 0; r < job->nranks; r++) {
        dc_contrib_t *k = &it->contrib[r];
        job_free_mem(m, job, k->data, k->length);
        if (k->credit != NULL)
            dc_credit_put(m, job, k->credit); /* without a CREDIT unless its job is active */
    }
    job_free_mem(m, job, it->out, it->out_len);
    item_free(it);
}

static void item_arrived(coll_item_t *ci, int from)
{
    dc_item_t *it = (dc_item_t *)ci;
    const dc_coll_t *dc = ci->coll->state;
    it->contrib[from].in = 1;
    dc->kind->in(ci->coll, it, from);
}

static void item_sent(coll_item_t *ci)
{
    dc_item_try_finish((dc_item_t *)ci);
}

dc_item_t *dc_item_find(dc_coll_t *dc, uint32_t root, uint32_t chunk)
{
    for (dc_item_t *it = dc->items; it != NULL; it = it->next)
        if (it->root == root && it->chunk == chunk)
            return it;
    return NULL;
}

dc_item_t *dc_item_new(job_t *job, coll_t *c, uint32_t root, uint32_t chunk)
{
    dc_coll_t *dc = c->state;
    dc_item_t *it = calloc(1, sizeof(*it));
    if (it != NULL) {
        it->contrib = calloc((size_t)job->nranks, sizeof(dc_contrib_t));
        it->kd = calloc((size_t)job->nranks, sizeof(uint32_t));
    }
    if (it == NULL || it->contrib == NULL || it->kd == NULL) {
        item_free(it);
        return NULL;
    }
    coll_item_init(&it->ci, &item_ops, job, c); /* the collective's hold: the list below */
    it->root = root;
    it->chunk = chunk;
    it->from = job->rep[root];
    uint64_t first = (uint64_t)chunk * dc->rows_per_chunk, rows = dc->post[root].rows;
    it->first = first;
    it->k = rows - first < dc->rows_per_chunk ? rows - first : dc->rows_per_chunk;
    it->row_bytes = dc->row_bytes;
    it->words = dc->words;
    it->next = dc->items;
    dc->items = it;
    c->remaining++;
    return it;
}

void dc_item_try_finish(dc_item_t *it)
{
    coll_t *c = it->ci.coll;
    if (c == NULL || !it->taken || it->ci.sending > 0 ||
        (c->stream == INCMOE_STREAM_COMBINE && !it->reduced))
        return;
    job_t *job = it->ci.job;
    membership_t *m = job->members;
    dc_coll_t *dc = c->state;
    for (int r = 0; r < job->nranks; r++)
        if (it->contrib[r].data != NULL && it->contrib[r].credited)
            dc_send_credit(m, job, r, c->stream, c->epoch);
    /* A set chunk from a switch port took its owner's window on that link (dc_window.c). */
    if (c->stream == INCMOE_STREAM_COMBINE && dc_switch_port(job, it->from) &&
        it->contrib[it->from].data != NULL)
        dc_window_done(m, job, it->from, it->root, c->epoch);
    for (dc_item_t **pp = &dc->items; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == it) {
            *pp = it->next;
            break;
        }
    }
    coll_item_leave(&it->ci); /* it may be gone now */
    c->remaining--;
    coll_check_done(job, c); /* c may be gone now */
}

/* The next item of root s to take: the one with the lowest chunk among those not taken whose
   chunk from the root's port has come (its header: a chunk that is still landing holds up the
   ones after it). */
static dc_item_t *next_to_take(dc_coll_t *dc, int s, int from)
{
    dc_item_t *best = NULL;
    for (dc_item_t *it = dc->items; it != NULL; it = it->next)
        if (it->root == (uint32_t)s && !it->taken && it->contrib[from].data != NULL &&
            (best == NULL || it->chunk < best->chunk))
            best = it;
    return best;
}

/*
 * A root's chunks come from the one port covering it in chunk order (a rank
 * sends each; a switch port only those that concern this side, and always the
 * last), and are taken in that order, so each rank's FWD positions follow its
 * source's rows and a switch port gets them in order too.  The root counts in
 * the collective's remaining from the plan until its last chunk is taken:
 * then every chunk of it that comes here has come.  One more is counted while
 * this walks, so the collective cannot be done (and freed) under it.
 */
void dc_advance(coll_t *c, int s)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    const int from = job->rep[s];
    const uint64_t nch = dc_nchunks(dc, dc->post[s].rows);
    c->remaining++;
    while (job->state == JOB_ACTIVE) {
        dc_item_t *it = next_to_take(dc, s, from);
        if (it == NULL || !it->src_in)
            break;
        const int last = (uint64_t)it->chunk + 1 == nch;
        it->taken = 1;
        dc->kind->take(c, it); /* it may be gone now */
        if (job->state != JOB_ACTIVE)
            break;
        if (last) {
            if (!dc->kind->source_done(c, s))
                break;
            c->remaining--; /* the root's: nothing more of it comes */
        }
    }
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has dropped c */
    c->remaining--;
    coll_check_done(job, c);
}

void dc_contribution_in(dc_item_t *it, int from)
{
    coll_item_hold(&it->ci);
    item_arrived(&it->ci, from);
    coll_item_put(&it->ci);
}
