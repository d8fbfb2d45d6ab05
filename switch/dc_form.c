/*
 * dc_form.c - dispatch and combine, the third form of a collective
 * (coll_form.h): their POSTs and SMALLs, the plan made when the last rank
 * posted (the verdict of base/dc_plan.c and each of this switch's ranks'
 * PLAN), and their chunks taken in (checked against the plan before anything
 * is allocated) and handed to the items (dc_item.c), whose kind, dispatch
 * (dc_dispatch.c) or combine (dc_combine.c), the collective's dc_kind_t
 * names.
 *
 * Over a tree (base/wire.h, "Switch trees") every switch keeps every rank's
 * POST: one from a rank or a switch port goes on unchanged to every other
 * switch port, so each switch sees each POST once and makes the same plan.
 *
 * Credits: a rank's POST takes one, which its PLAN returns; a DATA one, which
 * a CREDIT returns once its item is done (a child switch's dispatch chunks
 * too, and the parent's, under this switch's window: tree.c); a SMALL one,
 * which a CREDIT returns once the last item holding one of its pieces is done
 * (or at the plan, if none does).  Relayed POSTs take none; the combine's set
 * chunks between switches take a window of their owner on the link
 * (dc_window.c), and its partials between switches none (each answers a set
 * chunk; see job_dc_memory_bound).  Memory: the first
 * dispatch or combine of a job grows its bound (membership.c, job_admit_dc);
 * everything here is job memory.
 */
#include "dc_form.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dc_item.h"

#include "base/dtype.h"
#include "base/log.h"

#define SUBSYS "switch"

/* ------------------------------------------------------------------------ */
/* the collective's state                                                    */

static void small_release(coll_item_t *ci)
{
    dc_small_t *s = (dc_small_t *)ci;
    job_free_mem(ci->job->members, ci->job, s->buf, s->len);
    free(s);
}

static void small_arrived(coll_item_t *ci, int from);

static const coll_item_ops_t small_ops = {
    .arrived = small_arrived,
    .sent = NULL, /* a SMALL sends nothing */
    .release = small_release,
};

/* The collective is going: its items and SMALLs leave it (living on while a send or a
   receive holds them), and its plan goes. */
static void dc_detach(coll_t *c)
{
    dc_coll_t *dc = c->state;
    job_t *job = dc->job;
    c->state = NULL;
    while (dc->items != NULL) {
        dc_item_t *it = dc->items;
        dc->items = it->next;
        coll_item_leave(&it->ci);
    }
    for (int r = 0; r < job->nranks; r++) {
        if (dc->small[r] != NULL) {
            dc_small_t *sm = dc->small[r];
            dc->small[r] = NULL;
            coll_item_leave(&sm->ci);
        }
    }
    job_free_mem(job->members, job, dc, dc->mem);
}

/* The collective's state, made by its first message: one block of job memory. */
static dc_coll_t *dc_state(membership_t *m, job_t *job, conn_t *conn, coll_t *c)
{
    if (c->state != NULL)
        return c->state;
    const size_t n = (size_t)job->nranks;
    const size_t mem = sizeof(dc_coll_t) + n * sizeof(struct inc_wire_dc_post) +
                       3 * n * n * sizeof(uint32_t) + n * sizeof(uint64_t) +
                       n * sizeof(dc_small_t *);
    char *p = job_alloc(m, job, mem);
    if (p == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, conn->rank, "switch memory bound reached");
        return NULL;
    }
    memset(p, 0, mem);
    dc_coll_t *dc = (dc_coll_t *)p;
    p += sizeof(*dc);
    dc->job = job;
    dc->mem = mem;
    dc->post = (struct inc_wire_dc_post *)p;
    p += n * sizeof(struct inc_wire_dc_post);
    dc->next = (uint64_t *)p;
    p += n * sizeof(uint64_t);
    dc->small = (dc_small_t **)p;
    p += n * sizeof(dc_small_t *);
    dc->count = (uint32_t *)p;
    p += n * n * sizeof(uint32_t);
    dc->recvd = (uint32_t *)p;
    p += n * n * sizeof(uint32_t);
    dc->track = (uint32_t *)p;
    dc->words = INCMOE_SET_WORDS(job->nranks);
    dc->kind = c->stream == INCMOE_STREAM_DISPATCH ? &dc_dispatch_kind : &dc_combine_kind;
    c->state = dc;
    return dc;
}

/* ------------------------------------------------------------------------ */
/* the plan                                                                  */

static void plan_sent(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

/* The PLAN of each of this switch's ranks: the verdict, and a dispatch's column of the rank
   (every switch of a tree makes the same verdict; each tells its own ranks). */
static void send_plans(membership_t *m, job_t *job, coll_t *c, const inc_dc_verdict_t *v)
{
    const dc_coll_t *dc = c->state;
    const int n = job->nranks;
    const size_t len =
        sizeof(struct inc_wire_dc_plan) + (c->stream == INCMOE_STREAM_DISPATCH ? 4 * (size_t)n : 0);
    for (int r = 0; r < n; r++) {
        if (job->rep[r] != r || dc_switch_port(job, r))
            continue;
        char *buf = calloc(1, len);
        if (buf == NULL) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, r, "switch out of memory for a plan");
            return;
        }
        struct inc_wire_dc_plan plan = {.status = v->status,
                                        .rank = (uint32_t)(v->rank < 0 ? 0 : v->rank),
                                        .nranks = (uint32_t)n};
        snprintf(plan.reason, sizeof(plan.reason), "%s", v->reason);
        memcpy(buf, &plan, sizeof(plan));
        if (c->stream == INCMOE_STREAM_DISPATCH)
            for (int s = 0; s < n; s++)
                memcpy(buf + sizeof(plan) + 4 * (size_t)s, &dc->count[(size_t)s * n + r], 4);
        struct inc_wire_hdr h;
        coll_hdr_init(&h, WIRE_MSG_PLAN, job, c);
        h.rank = (uint32_t)r;
        h.length = len;
        h.status = (int16_t)v->status;
        m->tx.ops->send(m->tx.server, job->conns[r], &h, buf, len, plan_sent, buf);
    }
}

/* Rank r's refusal as the verdict reads it: the lowest refusing rank's reason, else NULL. */
static const char *refused_of(const dc_coll_t *dc, int r)
{
    return dc->refused_by == r + 1 ? dc->refused_why : NULL;
}

/* The verdict every rank shares, from what they posted. */
static void make_verdict(job_t *job, coll_t *c, inc_dc_verdict_t *v)
{
    const dc_coll_t *dc = c->state;
    const int n = job->nranks;
    if (c->stream == INCMOE_STREAM_DISPATCH) {
        inc_dc_dispatch_in_t in[INCMOE_MAX_RANKS];
        for (int r = 0; r < n; r++)
            in[r] = (inc_dc_dispatch_in_t){.row_bytes = dc->post[r].row_bytes,
                                           .capacity = dc->post[r].capacity,
                                           .count = &dc->count[(size_t)r * n],
                                           .refused = refused_of(dc, r)};
        inc_dc_dispatch_verdict(c->epoch, n, in, v);
        return;
    }
    inc_dc_combine_in_t in[INCMOE_MAX_RANKS];
    for (int r = 0; r < n; r++)
        in[r] = (inc_dc_combine_in_t){.dispatch_epoch = dc->post[r].dispatch_epoch,
                                      .row_count = dc->post[r].row_count,
                                      .dtype = dc->post[r].dtype,
                                      .redop = dc->post[r].redop,
                                      .sent = &dc->count[(size_t)r * n],
                                      .recvd = &dc->recvd[(size_t)r * n],
                                      .refused = refused_of(dc, r)};
    inc_dc_combine_verdict(c->epoch, n, in, v);
}

static int take_pieces(membership_t *m, job_t *job, coll_t *c, dc_small_t *sm);

/* The last rank posted: the verdict goes to this switch's ranks with their PLAN, the SMALLs'
   pieces become the items' contributions, and the collective is armed.  Each root with rows
   counts in remaining until its last chunk is taken (dc_advance), each item until it
   finishes; while the pieces are taken the plan counts one more, so the collective cannot be
   done (and freed) in between. */
static void dc_plan(membership_t *m, job_t *job, coll_t *c)
{
    dc_coll_t *dc = c->state;
    const int n = job->nranks;
    inc_dc_verdict_t v;
    make_verdict(job, c, &v);
    dc->planned = 1;
    dc->ok = v.status == INCMOE_OK;
    if (!dc->ok)
        log_info(SUBSYS, "job %llu: %s (%s)", (unsigned long long)job->id, v.reason,
                 incmoe_strerror(v.status));
    dc->row_bytes = dc->post[0].row_bytes; /* the same on every rank when the verdict is OK */
    dc->rows_per_chunk = inc_wire_dc_rows_per_chunk(dc->row_bytes, n, m->set->chunk_size);
    c->remaining = 1;
    if (dc->ok)
        for (int r = 0; r < n; r++)
            c->remaining += dc->post[r].rows > 0;
    send_plans(m, job, c, &v);
    if (job->state != JOB_ACTIVE)
        return; /* job_fail() has dropped c */
    for (int r = 0; r < n; r++)
        if (dc->small[r] == NULL && job->rep[r] == r && !dc_switch_port(job, r))
            job->inflight[r][c->stream]--; /* its POST's credit, returned by the PLAN */
    for (int r = 0; r < n; r++) {
        dc_small_t *sm = dc->small[r];
        if (sm == NULL)
            continue;
        if (dc->ok && !take_pieces(m, job, c, sm))
            return; /* the job failed, c is gone */
        if (!dc->ok)
            dc_send_credit(m, job, r, c->stream, c->epoch); /* nothing of it is kept */
        dc->small[r] = NULL;
        coll_item_leave(&sm->ci); /* its pieces are copied: its buffer goes */
    }
    c->remaining--;
    c->armed = 1;
    coll_check_done(job, c);
}

/* ------------------------------------------------------------------------ */
/* POST and SMALL                                                            */

/* Rank me's plan fields (the head of its POST or SMALL payload): in range, then kept;
 *used_p the bytes they took.  0: the job failed. */
static int take_post(membership_t *m, job_t *job, coll_t *c, int me, const char *payload,
                     size_t length, uint64_t total, size_t *used_p)
{
    dc_coll_t *dc = c->state;
    const int n = job->nranks;
    const unsigned long long e = (unsigned long long)c->epoch;
    const char *what = inc_wire_stream_name(c->stream);
    const int combine = c->stream == INCMOE_STREAM_COMBINE;
    struct inc_wire_dc_post p;
    memcpy(&p, payload, sizeof(p)); /* the wire check saw that much */
    const size_t want = (size_t)inc_wire_dc_post_length((incmoe_stream_t)c->stream, n, p.refused);
    if (p.nranks != (uint32_t)n || p.refused >= INCMOE_REFUSAL_MAX || length < want) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "%s epoch %llu: rank %d's plan fields say %u ranks and a %u-byte refusal in %zu "
                "bytes; the job has %d",
                what, e, me, p.nranks, p.refused, length, n);
        return 0;
    }
    const uint64_t row_max = m->set->chunk_size - 8 * (uint64_t)dc->words;
    int bad = p.rows != total || p.rows > UINT32_MAX || p.row_bytes == 0 || p.row_bytes > row_max;
    if (p.refused > 0) {
        /* A refusal has no rows; its other fields are not looked at (the verdict fails). */
        bad = p.rows != 0 || total != 0;
    } else if (combine) {
        size_t esize = p.dtype < INC_DTYPE_COUNT ? incmoe_dtype_size(p.dtype) : 0;
        bad = bad || p.capacity != 0 || esize == 0 || p.redop >= INC_REDOP_COUNT ||
              !incmoe_reduce_supported(p.dtype, p.redop) || p.row_count == 0 ||
              p.row_count > p.row_bytes || p.row_count * esize != p.row_bytes;
    } else {
        bad = bad || p.dispatch_epoch != 0 || p.row_count != 0 || p.dtype != 0 || p.redop != 0;
    }
    if (bad) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "%s epoch %llu: rank %d posts %llu rows of %llu bytes (header: %llu rows), "
                "fields out of range for a %llu-byte chunk",
                what, e, me, (unsigned long long)p.rows, (unsigned long long)p.row_bytes,
                (unsigned long long)total, (unsigned long long)m->set->chunk_size);
        return 0;
    }
    uint32_t *count = &dc->count[(size_t)me * n];
    memcpy(count, payload + sizeof(p), 4 * (size_t)n);
    if (combine)
        memcpy(&dc->recvd[(size_t)me * n], payload + sizeof(p) + 4 * (size_t)n, 4 * (size_t)n);
    for (int d = 0; d < n; d++) {
        if (count[d] > p.rows) {
            JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                    "%s epoch %llu: rank %d says %u of its %llu rows go to rank %d", what, e, me,
                    count[d], (unsigned long long)p.rows, d);
            return 0;
        }
    }
    if (p.refused > 0 && (dc->refused_by == 0 || me < dc->refused_by - 1)) {
        dc->refused_by = me + 1;
        memcpy(dc->refused_why, payload + want - p.refused, p.refused);
        dc->refused_why[p.refused] = '\0';
    }
    dc->post[me] = p;
    *used_p = want;
    return 1;
}

/* Rank me posted (its plan fields in hand): the plan, if it was the last. */
static void posted(membership_t *m, job_t *job, coll_t *c, int me, uint64_t total)
{
    if (coll_post(job, c, me, total))
        dc_plan(m, job, c);
}

static void relay_sent(void *arg, ucs_status_t status)
{
    (void)status;
    free(arg);
}

/* Rank r's plan fields (its POST, or the head of its SMALL: len bytes) go on unchanged, as a
   POST from r, to every switch port but the one they came from (from), before anything of the
   collective can: every switch of a tree plans from the same N POSTs, each got once. */
static void relay_post(membership_t *m, job_t *job, const coll_t *c, int r, uint64_t total,
                       const char *fields, size_t len, int from)
{
    for (int p = 0; p < job->nranks && job->state == JOB_ACTIVE; p++) {
        if (job->rep[p] != p || p == from || !dc_switch_port(job, p))
            continue;
        char *copy = malloc(len);
        if (copy == NULL) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, r, "switch out of memory");
            return;
        }
        memcpy(copy, fields, len);
        struct inc_wire_hdr h;
        coll_hdr_init(&h, WIRE_MSG_POST, job, c);
        h.rank = (uint32_t)r;
        h.total = total;
        h.length = len;
        m->tx.ops->send(m->tx.server, job->conns[p], &h, copy, len, relay_sent, copy);
    }
}

/* The collective a POST or SMALL of rank me names (from the rank itself, or relayed by a
   switch port), its form and state; NULL: the job failed.  A rank's takes one of its credits;
   a relayed one none. */
static coll_t *dc_open(membership_t *m, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                       int me)
{
    if (!job_admit_dc(m, job, me))
        return NULL;
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(m, job, conn, c, h) ||
        !coll_set_form(m, job, conn, c, &dc_form) || !coll_unposted(m, job, c, me, "posted") ||
        (conn->role == CONN_RANK && !coll_credit_left(m, job, me, h->stream)) ||
        dc_state(m, job, conn, c) == NULL)
        return NULL;
    const dc_coll_t *dc = c->state;
    if (dc->small[me] != NULL) { /* a rendezvous SMALL posts once it landed */
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me, "rank %d posted %s epoch %llu twice", me,
                inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return NULL;
    }
    return c;
}

/* A POST of rank h->rank from port (the rank itself, or a switch port covering it). */
static ucs_status_t on_post(membership_t *m, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                            const void *data, size_t length, int port)
{
    /* A rank's: member_screen checked it; a relayed one's may be any 32 bits. */
    if (h->rank >= (uint32_t)job->nranks || job->rep[h->rank] != port) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, port,
                "the switch port of rank %d relayed a %s POST of rank %u, which it does not "
                "cover",
                port, inc_wire_stream_name(h->stream), h->rank);
        return UCS_ERR_INVALID_PARAM;
    }
    const int me = (int)h->rank;
    coll_t *c = dc_open(m, job, conn, h, me);
    size_t used;
    if (c == NULL || !take_post(m, job, c, me, data, length, h->total, &used))
        return UCS_ERR_INVALID_PARAM;
    if (used != length) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me, "%s POST of %zu bytes, its fields take %zu",
                inc_wire_stream_name(h->stream), length, used);
        return UCS_ERR_INVALID_PARAM;
    }
    if (conn->role == CONN_RANK)
        job->inflight[me][h->stream]++;
    relay_post(m, job, c, me, h->total, data, used, port);
    if (job->state != JOB_ACTIVE)
        return UCS_ERR_CANCELED;
    posted(m, job, c, me, h->total);
    return UCS_OK;
}

/* The pieces after a SMALL's plan fields, each a header and its padded bytes, end where the
   SMALL does; 0: the job failed.  What each piece says is checked at the plan. */
static int pieces_framed(membership_t *m, job_t *job, coll_t *c, const dc_small_t *sm, size_t at)
{
    while (at < sm->len) {
        struct inc_wire_dc_piece p;
        if (sm->len - at < sizeof(p)) {
            JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, sm->from, "rank %d's %s SMALL ends in a cut piece",
                    sm->from, inc_wire_stream_name(c->stream));
            return 0;
        }
        memcpy(&p, sm->buf + at, sizeof(p));
        if (p.length == 0 || p.length > sm->len - at - sizeof(p) ||
            inc_wire_dc_piece_length(p.length) > sm->len - at) {
            JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, sm->from,
                    "rank %d's %s SMALL has a piece of %llu bytes with %zu left", sm->from,
                    inc_wire_stream_name(c->stream), (unsigned long long)p.length,
                    sm->len - at - sizeof(p));
            return 0;
        }
        at += (size_t)inc_wire_dc_piece_length(p.length);
    }
    return 1;
}

/* A SMALL's payload is here: its plan fields and framing are taken now, its pieces at the
   plan. */
static void small_in(dc_small_t *sm)
{
    coll_t *c = sm->ci.coll;
    job_t *job = sm->ci.job;
    membership_t *m = job->members;
    size_t used;
    sm->in = 1;
    if (!take_post(m, job, c, sm->from, sm->buf, sm->len, sm->total, &used) ||
        !pieces_framed(m, job, c, sm, used))
        return;
    relay_post(m, job, c, sm->from, sm->total, sm->buf, used, sm->from);
    if (job->state == JOB_ACTIVE)
        posted(m, job, c, sm->from, sm->total);
}

static void small_arrived(coll_item_t *ci, int from)
{
    (void)from;
    small_in((dc_small_t *)ci);
}

static ucs_status_t on_small(membership_t *m, job_t *job, conn_t *conn,
                             const struct inc_wire_hdr *h, void *data, size_t length,
                             const ucp_am_recv_param_t *param)
{
    const int me = conn->rank;
    const uint64_t fields =
        inc_wire_dc_fields_length((incmoe_stream_t)h->stream, job->nranks, data, length);
    if (length < fields || !inc_wire_dc_is_small(length - fields, m->set->chunk_size)) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d sent a %s SMALL of %zu bytes; its pieces may take at most %llu", me,
                inc_wire_stream_name(h->stream), length, (unsigned long long)m->set->chunk_size);
        return UCS_ERR_INVALID_PARAM;
    }
    coll_t *c = dc_open(m, job, conn, h, me);
    if (c == NULL)
        return UCS_ERR_INVALID_PARAM;
    dc_coll_t *dc = c->state;
    dc_small_t *sm = calloc(1, sizeof(*sm));
    char *buf = sm != NULL ? job_alloc(m, job, length) : NULL;
    if (buf == NULL) {
        free(sm);
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    coll_item_init(&sm->ci, &small_ops, job, c); /* the collective's hold: dc->small */
    *sm = (dc_small_t){.ci = sm->ci, .from = me, .buf = buf, .len = length, .total = h->total};
    dc->small[me] = sm;
    job->inflight[me][h->stream]++;
    m->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&sm->ci, me, data, buf, length);
    memcpy(buf, data, length);
    small_in(sm);
    return UCS_OK;
}

/* ------------------------------------------------------------------------ */
/* DATA and pieces                                                           */

/* A contribution's header against the plan (each kind's admit); 0: the job failed. */
static int admit(membership_t *m, job_t *job, coll_t *c, int me, const struct inc_wire_dc_piece *p,
                 int dtype, int redop)
{
    const dc_coll_t *dc = c->state;
    char who[48];
    if (c->form != &dc_form || dc == NULL || !dc->planned || !dc->ok) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "%s sent %s epoch %llu data before the switch sent an OK plan",
                dc_port_name(job, me, who, sizeof(who)), inc_wire_stream_name(c->stream),
                (unsigned long long)c->epoch);
        return 0;
    }
    if (p->root >= (uint32_t)job->nranks || p->length > m->set->chunk_size) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "%s sent %s epoch %llu data of %llu bytes for root %u",
                dc_port_name(job, me, who, sizeof(who)), inc_wire_stream_name(c->stream),
                (unsigned long long)c->epoch, (unsigned long long)p->length, p->root);
        return 0;
    }
    return dc->kind->admit(m, job, c, me, p, dtype, redop);
}

/* The item a contribution goes to, made if it is the first; NULL: the job failed. */
static dc_item_t *item_for(membership_t *m, job_t *job, coll_t *c, int me,
                           const struct inc_wire_dc_piece *p)
{
    dc_coll_t *dc = c->state;
    dc_item_t *it = dc_item_find(dc, p->root, p->chunk);
    if (it == NULL && (it = dc_item_new(job, c, p->root, p->chunk)) == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
        return NULL;
    }
    if (it->contrib[me].data != NULL) { /* admit keeps each sender in order: cannot happen */
        char who[48];
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me, "%s sent chunk %u of root %u twice",
                dc_port_name(job, me, who, sizeof(who)), p->chunk, p->root);
        return NULL;
    }
    return it;
}

/* One piece of rank me's SMALL, copied into its item (the SMALL's buffer goes after the
   plan); 0: the job failed. */
static int take_piece(membership_t *m, job_t *job, coll_t *c, int me, dc_credit_t *cr,
                      const struct inc_wire_dc_piece *p, const char *data)
{
    const dc_coll_t *dc = c->state;
    if (!admit(m, job, c, me, p, dc->post[me].dtype, dc->post[me].redop))
        return 0;
    dc_item_t *it = item_for(m, job, c, me, p);
    char *buf = it != NULL ? job_alloc(m, job, (size_t)p->length) : NULL;
    if (buf == NULL) {
        if (it != NULL)
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return 0;
    }
    memcpy(buf, data, (size_t)p->length);
    cr->pieces++;
    it->contrib[me] = (dc_contrib_t){.data = buf, .length = (size_t)p->length, .credit = cr};
    dc_contribution_in(it, me);
    return job->state == JOB_ACTIVE;
}

/* Every piece of a SMALL: the DATA it stands for, in its order.  The SMALL's credit goes
   back with the last item holding a piece (at once if none does). */
static int take_pieces(membership_t *m, job_t *job, coll_t *c, dc_small_t *sm)
{
    const int me = sm->from;
    size_t at = (size_t)inc_wire_dc_post_length((incmoe_stream_t)c->stream, job->nranks,
                                                ((const dc_coll_t *)c->state)->post[me].refused);
    dc_credit_t *cr = calloc(1, sizeof(*cr));
    if (cr == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
        return 0;
    }
    *cr = (dc_credit_t){.pieces = 1, .from = me, .stream = c->stream, .epoch = c->epoch};
    while (at < sm->len) { /* framed when it came in (pieces_framed) */
        struct inc_wire_dc_piece p;
        memcpy(&p, sm->buf + at, sizeof(p));
        if (!take_piece(m, job, c, me, cr, &p, sm->buf + at + sizeof(p)))
            break;
        at += (size_t)inc_wire_dc_piece_length(p.length);
    }
    int ok = job->state == JOB_ACTIVE;
    dc_credit_put(m, job, cr); /* the loop's own hold */
    return ok;
}

/*
 * A chunk from port me: a rank's DATA, a child switch's DATA or the parent's FWD.  A rank's
 * takes one of its credits, and so does a child's dispatch chunk (the child sends it under the
 * credits of this switch's JOIN_ACK); the parent's dispatch chunks take one of this switch's
 * window (tree.c); the combine's set chunks between switches their owner's window on the link
 * (checked in dc_combine.c's admit, dc_window.c), its partials nothing.
 */
static ucs_status_t on_data(membership_t *m, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                            void *data, size_t length, const ucp_am_recv_param_t *param, int me)
{
    const int credited = conn->role == CONN_RANK || h->stream == INCMOE_STREAM_DISPATCH;
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    const struct inc_wire_dc_piece p = {.root = h->root,
                                        .chunk = h->chunk,
                                        .offset = h->offset,
                                        .total = h->total,
                                        .length = length};
    if (c == NULL || !admit(m, job, c, me, &p, h->dtype, h->redop) ||
        (credited && !coll_credit_left(m, job, me, h->stream)))
        return UCS_ERR_INVALID_PARAM;
    dc_item_t *it = item_for(m, job, c, me, &p);
    if (it == NULL)
        return UCS_ERR_INVALID_PARAM;
    char *buf = job_alloc(m, job, length);
    if (buf == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    it->contrib[me] = (dc_contrib_t){.data = buf, .length = length, .credited = credited};
    if (credited)
        job->inflight[me][h->stream]++;
    m->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&it->ci, me, data, buf, length);
    memcpy(buf, data, length);
    dc_contribution_in(it, me);
    return UCS_OK;
}

/* Every message of the dispatch and combine streams, a rank's or a switch port's (the
   parent's FWD and POST, a child's DATA and POST): each form entry is this one. */
static ucs_status_t dc_on_message(const coll_env_t *env, job_t *job, conn_t *conn,
                                  const struct inc_wire_hdr *h, void *data, size_t length,
                                  const ucp_am_recv_param_t *param)
{
    membership_t *m = env->m;
    const int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    const int port = conn->role == CONN_PARENT ? job->parent_rep : conn->rank;
    if (port < 0) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch sent %s on the %s stream for a job wholly beneath this switch",
                inc_wire_msg_name(h->msg), inc_wire_stream_name(h->stream));
        return UCS_ERR_INVALID_PARAM;
    }
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_POST:
        if (!rndv)
            return on_post(m, job, conn, h, data, length, port);
        break;
    case WIRE_MSG_SMALL: /* between switches only the chunked messages */
        if (conn->role == CONN_RANK)
            return on_small(m, job, conn, h, data, length, param);
        break;
    case WIRE_MSG_DATA:
        if (conn->role != CONN_PARENT)
            return on_data(m, job, conn, h, data, length, param, port);
        break;
    case WIRE_MSG_FWD:
        if (conn->role == CONN_PARENT)
            return on_data(m, job, conn, h, data, length, param, port);
        break;
    default:
        break;
    }
    char who[48];
    JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, port, "%s sent %s%s on the %s stream",
            conn->role == CONN_PARENT ? "the parent switch"
                                      : dc_port_name(job, port, who, sizeof(who)),
            inc_wire_msg_name(h->msg), rndv ? " rendezvous" : "", inc_wire_stream_name(h->stream));
    return UCS_ERR_INVALID_PARAM;
}

/* The oldest item still here, by (chunk, root), and what it waits for: its set chunk (or
   source chunk) from the root's port, or the ports whose contributions are missing. */
static void dc_stalled(const coll_t *c, char *why, size_t len)
{
    const dc_coll_t *dc = c->state;
    const dc_item_t *old = NULL;
    why[0] = '\0';
    if (dc == NULL || !dc->planned) {
        snprintf(why, len, "; no plan yet");
        return;
    }
    for (const dc_item_t *it = dc->items; it != NULL; it = it->next)
        if (old == NULL || it->chunk < old->chunk ||
            (it->chunk == old->chunk && it->root < old->root))
            old = it;
    const job_t *job = dc->job;
    char who[48];
    if (old == NULL) { /* the first root whose chunks are not all here */
        const int n = job->nranks, comb = c->stream == INCMOE_STREAM_COMBINE;
        for (int s = 0; s < n; s++) {
            const uint64_t next = comb ? dc->track[(size_t)s * n + job->rep[s]] : dc->next[s];
            if (next < dc_nchunks(dc, dc->post[s].rows)) {
                snprintf(why, len, "; chunk %llu of rank %d from %s next", (unsigned long long)next,
                         s, dc_port_name(job, job->rep[s], who, sizeof(who)));
                return;
            }
        }
        snprintf(why, len, "; no chunk of it here");
        return;
    }
    size_t at = (size_t)snprintf(why, len, "; chunk %u of rank %u waits (%s%s", old->chunk,
                                 old->root, old->src_in ? "its sets in" : "its sets from ",
                                 old->src_in ? "" : dc_port_name(job, old->from, who, sizeof(who)));
    if (old->src_in && at < len)
        at += (size_t)snprintf(why + at, len - at, ", %s, %d of %d contributions",
                               old->taken ? "taken" : "not taken", old->nin, old->nexpected);
    for (int p = 0; p < job->nranks && at < len; p++)
        if (old->src_in && p != old->from && old->kd[p] > 0 && old->contrib[p].data == NULL)
            at += (size_t)snprintf(why + at, len - at, "; none from %s",
                                   dc_port_name(job, p, who, sizeof(who)));
    if (at < len)
        snprintf(why + at, len - at, ")");
}

const coll_form_t dc_form = {
    .what = "as dispatch or combine (POST or SMALL, then a plan)",
    .post = dc_on_message,
    .data = dc_on_message,
    .small = dc_on_message,
    .parent_post = dc_on_message,
    .result_msg = WIRE_MSG_FWD,
    .parent_result = dc_on_message,
    .detach = dc_detach,
    .stalled = dc_stalled,
};
