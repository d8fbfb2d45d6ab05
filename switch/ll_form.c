/*
 * ll_form.c - the low-latency form of dispatch and combine (coll_form.h;
 * base/wire.h, "The low-latency form of dispatch and combine"): one LL in
 * per rank and collective, no POST and no plan.
 *
 * Each LL is copied (or received, if rendezvous) into job memory as an item
 * of its own (ll_in_t) and checked whole by base/ll_wire.h before anything
 * reads it.  A dispatch's LL goes on at once as one LL_FWD to every other
 * rank, built from it when that rank's output queue takes the send; once
 * they all went, it is freed and its credits go back.  A combine's LLs stay
 * with the collective (ll_coll_t) until all N are in; then the N
 * descriptions and the recvd counts against the owners' sets give a
 * verdict: a failed one goes to every rank as an LL_FWD with its status, an
 * OK one as each owner's reduction, built (reduced, ascending rank order)
 * when the owner's queue takes the send; once all N went, the LLs are freed
 * and their credits go back.  Over a switch tree each LL is answered with
 * an UNSUPPORTED verdict and freed.
 *
 * Credits: an LL takes max(1, ceil(length / chunk_size)) of its stream's
 * credits (job->inflight, shared with the bulk form), which the CREDIT sent
 * when it is freed returns; more than the rank has left fails the job.
 * Memory (membership.c, job_dc_memory_bound): the LLs held are within the
 * contributions the credits allow (N x credits chunks per stream); a
 * combine whose results go out holds a table of N x N offsets (each combine
 * holds a credit of every rank until then, so at most credits of them per
 * stream); the LL_FWDs are built only as each output queue takes them
 * (--egress-chunks bounds them per connection), as the bulk dispatch's are.
 */
#include "ll_form.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_item.h"
#include "coll_table.h"

#include "base/dtype.h"
#include "base/ll_wire.h"
#include "base/reduce.h"

static const char tree_reason[] =
    "the low-latency form of dispatch and combine does not cross switch trees yet";

/* One rank's LL: its buffer, the credits it took, the checked view of it. */
typedef struct ll_in {
    coll_item_t ci; /* first: its lifetime (coll_item.c), its job and its collective */
    int from;
    char *buf;
    size_t len;
    uint32_t credits;
    inc_wire_ll_view_t v;
} ll_in_t;

/* The collective: its LLs, and a combine's verdict and results. */
typedef struct ll_coll {
    coll_item_t ci; /* first: the combine's results go out on it */
    ll_in_t **in;   /* [N]: the LLs still held as items (dispatch; any before its check) */
    /* combine: the LLs of the ranks, kept by the collective once checked */
    char **buf;
    size_t *len;
    uint32_t *credits;
    inc_wire_ll_view_t *v;
    uint64_t *offset; /* [N x N]: where rank d's partials for owner o start in d's LL */
    size_t offset_mem;
    int narrived;  /* LLs in and checked */
    int nanswered; /* LLs answered (dispatch: forwarded; a tree: refused) and freed */
    inc_dc_verdict_t verdict;
} ll_coll_t;

static void ll_send_credit(job_t *job, int r, int stream, uint64_t epoch, uint32_t credits)
{
    if (job->state != JOB_ACTIVE || credits == 0)
        return;
    membership_t *m = job->members;
    job->inflight[r][stream] -= credits;
    struct inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_CREDIT, job->id);
    h.stream = (uint8_t)stream;
    h.epoch = epoch;
    h.length = credits;
    m->tx.ops->send(m->tx.server, job->conns[r], &h, NULL, 0, NULL, NULL);
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                  */

static void in_release(coll_item_t *ci)
{
    ll_in_t *in = (ll_in_t *)ci;
    job_free_mem(ci->job->members, ci->job, in->buf, in->len);
    free(in);
}

/* The per-rank arrays and the collective itself (NULL, or arrays not made yet: nothing). */
static void coll_free_arrays(ll_coll_t *lc)
{
    if (lc == NULL)
        return;
    free(lc->in);
    free(lc->buf);
    free(lc->len);
    free(lc->credits);
    free(lc->v);
    free(lc);
}

static void coll_release(coll_item_t *ci)
{
    ll_coll_t *lc = (ll_coll_t *)ci;
    job_t *job = ci->job;
    for (int r = 0; r < job->nranks; r++)
        job_free_mem(job->members, job, lc->buf[r], lc->len[r]);
    job_free_mem(job->members, job, lc->offset, lc->offset_mem);
    coll_free_arrays(lc);
}

/* The collective is going: its LLs leave it (a dispatch's lives on while its forwards go), and
   so does its state (while its results go). */
static void ll_detach(coll_t *c)
{
    ll_coll_t *lc = c->state;
    c->state = NULL;
    for (int r = 0; r < lc->ci.job->nranks; r++) {
        if (lc->in[r] != NULL) {
            ll_in_t *in = lc->in[r];
            lc->in[r] = NULL;
            coll_item_leave(&in->ci);
        }
    }
    coll_item_leave(&lc->ci);
}

static void in_arrived(coll_item_t *ci, int from);
static void in_sent(coll_item_t *ci);
static void coll_sent(coll_item_t *ci);

static const coll_item_ops_t in_ops = {
    .arrived = in_arrived,
    .sent = in_sent,
    .release = in_release,
};

static const coll_item_ops_t coll_ops = {
    .arrived = NULL, /* LLs arrive into their own items */
    .sent = coll_sent,
    .release = coll_release,
};

static ll_coll_t *ll_state(membership_t *m, job_t *job, coll_t *c, int me)
{
    if (c->state != NULL)
        return c->state;
    const size_t n = (size_t)job->nranks;
    ll_coll_t *lc = calloc(1, sizeof(*lc));
    if (lc != NULL) {
        lc->in = calloc(n, sizeof(*lc->in));
        lc->buf = calloc(n, sizeof(*lc->buf));
        lc->len = calloc(n, sizeof(*lc->len));
        lc->credits = calloc(n, sizeof(*lc->credits));
        lc->v = calloc(n, sizeof(*lc->v));
    }
    if (lc == NULL || lc->in == NULL || lc->buf == NULL || lc->len == NULL || lc->credits == NULL ||
        lc->v == NULL) {
        coll_free_arrays(lc);
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
        return NULL;
    }
    coll_item_init(&lc->ci, &coll_ops, job, c); /* the collective's hold: c->state below */
    c->state = lc;
    return lc;
}

/* ------------------------------------------------------------------------ */
/* answers                                                                   */

/* The collective is over here: every LL answered and freed. */
static void ll_finish(coll_t *c)
{
    c->armed = 1;
    coll_check_done(((ll_coll_t *)c->state)->ci.job, c); /* may retire c */
}

/* The LL_FWD of source in->from for rank h->rank: the source's head and reason, the source
   rows of its rows for that rank, then those rows. */
static void dispatch_build(void *arg, const struct inc_wire_hdr *h, void *buf)
{
    const ll_in_t *in = arg;
    const inc_wire_ll_view_t *v = &in->v;
    const int d = (int)h->rank;
    const int nranks = (int)v->ll.nranks;
    inc_wire_ll_layout_t at;
    inc_wire_ll_layout(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, nranks, &v->ll, h->total, &at);
    memcpy(buf, in->buf, (size_t)(at.src_row != 0 ? at.src_row : at.length));
    if (at.src_row == 0)
        return; /* refused: the head and reason are all */
    char *out = buf;
    memset(out + at.src_row, 0, (size_t)(at.rows - at.src_row));
    uint64_t i = 0, network = 0;
    for (uint64_t j = 0; j < v->ll.rows; j++) {
        if (!inc_wire_ll_network_row(v, j, in->from))
            continue;
        if (inc_wire_ll_set_holds(v, j, d)) {
            uint32_t row = (uint32_t)j;
            memcpy(out + at.src_row + 4 * i, &row, sizeof(row));
            memcpy(out + at.rows + i * v->ll.row_bytes, v->rows + network * v->ll.row_bytes,
                   (size_t)v->ll.row_bytes);
            i++;
        }
        network++;
    }
}

static int dispatch_receives(const coll_item_t *ci, int p, const void *arg)
{
    (void)arg;
    return p != ((const ll_in_t *)ci)->from;
}

static void dispatch_send(coll_item_t *ci, int p, void *arg)
{
    (void)arg;
    ll_in_t *in = (ll_in_t *)ci;
    const inc_wire_ll_view_t *v = &in->v;
    job_t *job = ci->job;
    uint64_t n = 0;
    for (uint64_t j = 0; v->ll.status == 0 && j < v->ll.rows; j++)
        n += (uint64_t)inc_wire_ll_set_holds(v, j, p);
    inc_wire_ll_layout_t at;
    inc_wire_ll_layout(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, job->nranks, &v->ll, n, &at);
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_LL_FWD, job, ci->coll);
    h.rank = (uint32_t)p;
    h.root = (uint32_t)in->from;
    h.total = n;
    h.length = at.length;
    coll_item_send_built(ci, job->conns[p], EGRESS_RESULT, &h, dispatch_build);
}

/* A verdict LL_FWD to rank r on item ci: status and a NUL-terminated reason that lives as long
   as the item. */
static void send_verdict(coll_item_t *ci, int r, incmoe_status_t status, const char *reason)
{
    job_t *job = ci->job;
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_LL_FWD, job, ci->coll);
    h.rank = (uint32_t)r;
    h.root = (uint32_t)r;
    h.status = (int16_t)status;
    h.length = strlen(reason) + 1;
    coll_item_send(ci, job->conns[r], EGRESS_RESULT, &h, reason);
}

/* The ranks that send their LLs to this switch: all N, but for a job over a tree. */
static int ll_senders(const job_t *job)
{
    int n = 0;
    for (int r = 0; r < job->nranks; r++)
        n += job->conns[r] != NULL && job->conns[r]->role == CONN_RANK;
    return n;
}

/* Every answer of an LL item went (its forwards, or its tree verdict): free it, its credits
   go back, and the collective is over once every LL here was. */
static void in_sent(coll_item_t *ci)
{
    ll_in_t *in = (ll_in_t *)ci;
    coll_t *c = ci->coll;
    ll_coll_t *lc = c->state;
    job_t *job = ci->job;
    lc->in[in->from] = NULL;
    ll_send_credit(job, in->from, c->stream, c->epoch, in->credits);
    coll_item_leave(ci); /* the send's hold keeps it until this returns */
    if (++lc->nanswered < ll_senders(job))
        return;
    for (int r = 0; r < job->nranks; r++) /* over a tree: nobody waits for the others here */
        if (!c->posted[r])
            coll_post(job, c, r, 0);
    ll_finish(c);
}

/* ------------------------------------------------------------------------ */
/* combine                                                                   */

/* Rows of an owner's LL whose set holds d. */
static uint32_t rows_held(const inc_wire_ll_view_t *v, int d)
{
    uint32_t n = 0;
    for (uint64_t j = 0; j < v->ll.rows; j++)
        n += (uint32_t)inc_wire_ll_set_holds(v, j, d);
    return n;
}

/* The verdict of the N descriptions, then of every recvd count against its owner's sets. */
static void combine_verdict(ll_coll_t *lc, const coll_t *c)
{
    const int n = lc->ci.job->nranks;
    struct inc_wire_ll heads[INCMOE_MAX_RANKS] = {{0}};
    const char *reasons[INCMOE_MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        heads[r] = lc->v[r].ll;
        reasons[r] = lc->v[r].reason;
    }
    inc_wire_ll_verdict(INCMOE_STREAM_COMBINE, c->epoch, n, heads, reasons, &lc->verdict);
    for (int o = 0; o < n && lc->verdict.status == INCMOE_OK; o++) {
        for (int d = 0; d < n; d++) {
            if (d == o)
                continue;
            uint32_t held = rows_held(&lc->v[o], d), given = inc_wire_ll_recvd(&lc->v[d], o);
            if (held != given) {
                lc->verdict.status = INCMOE_ERR_MISMATCH;
                lc->verdict.rank = d;
                snprintf(lc->verdict.reason, sizeof(lc->verdict.reason),
                         "combine epoch %llu: rank %d gives %u partial rows for rank %d, whose "
                         "sets send it %u rows",
                         (unsigned long long)c->epoch, d, given, o, held);
                return;
            }
        }
    }
}

/* Where each rank d's partials for each owner o start in d's LL: after its partials for the
   owners before o.  0: out of memory (the job failed). */
static int combine_offsets(ll_coll_t *lc)
{
    job_t *job = lc->ci.job;
    const size_t n = (size_t)job->nranks;
    lc->offset_mem = n * n * sizeof(uint64_t);
    lc->offset = job_alloc(job->members, job, lc->offset_mem);
    if (lc->offset == NULL) {
        lc->offset_mem = 0;
        job_fail(job->members, job, INCMOE_ERR_NO_MEMORY, 0,
                 "switch memory bound reached for a low-latency combine");
        return 0;
    }
    for (size_t d = 0; d < n; d++) {
        uint64_t at = 0;
        for (size_t o = 0; o < n; o++) {
            lc->offset[d * n + o] = at;
            at += inc_wire_ll_recvd(&lc->v[d], (int)o);
        }
    }
    return 1;
}

/* Owner h->root's LL_FWD: its head, then each of its network rows reduced over the partials of
   the ranks its set names, ascending rank. */
static void combine_build(void *arg, const struct inc_wire_hdr *h, void *buf)
{
    const ll_coll_t *lc = arg;
    const int n = lc->ci.job->nranks, o = (int)h->root;
    const inc_wire_ll_view_t *own = &lc->v[o];
    const uint64_t rb = own->ll.row_bytes;
    memcpy(buf, &own->ll, sizeof(own->ll));
    char *out = (char *)buf + sizeof(own->ll);
    uint64_t cursor[INCMOE_MAX_RANKS] = {0};
    const void *srcs[INCMOE_MAX_RANKS];
    for (uint64_t j = 0; j < own->ll.rows; j++) {
        int k = 0;
        for (int d = 0; d < n; d++) {
            if (d == o || !inc_wire_ll_set_holds(own, j, d))
                continue;
            srcs[k++] = lc->v[d].rows + (lc->offset[(size_t)d * n + o] + cursor[d]++) * rb;
        }
        if (k == 0)
            continue;
        inc_reduce_ordered(out, srcs, k, (size_t)own->ll.row_count, (incmoe_dtype_t)own->ll.dtype,
                           (incmoe_redop_t)own->ll.redop);
        out += rb;
    }
}

/* All N LLs of the combine are in: every rank gets the verdict, or its reduction. */
static void combine_answer(ll_coll_t *lc, coll_t *c)
{
    job_t *job = lc->ci.job;
    const int n = job->nranks;
    combine_verdict(lc, c);
    if (lc->verdict.status == INCMOE_OK && !combine_offsets(lc))
        return;
    lc->ci.sending = n;
    coll_item_hold(&lc->ci); /* the sends may all complete inline, retire c and free lc */
    for (int o = 0; o < n && job->state == JOB_ACTIVE; o++) {
        if (lc->verdict.status != INCMOE_OK) {
            send_verdict(&lc->ci, o, lc->verdict.status, lc->verdict.reason);
            continue;
        }
        const inc_wire_ll_view_t *own = &lc->v[o];
        uint64_t rows = 0;
        for (uint64_t j = 0; j < own->ll.rows; j++)
            rows += (uint64_t)inc_wire_ll_network_row(own, j, o);
        struct inc_wire_hdr h;
        coll_hdr_init(&h, WIRE_MSG_LL_FWD, job, c);
        h.rank = (uint32_t)o;
        h.root = (uint32_t)o;
        h.total = rows;
        h.length = sizeof(struct inc_wire_ll) + rows * own->ll.row_bytes;
        coll_item_send_built(&lc->ci, job->conns[o], EGRESS_RESULT, &h, combine_build);
    }
    coll_item_put(&lc->ci);
}

/* Every answer of the combine went: its LLs are freed, their credits go back. */
static void coll_sent(coll_item_t *ci)
{
    ll_coll_t *lc = (ll_coll_t *)ci;
    job_t *job = ci->job;
    coll_t *c = ci->coll;
    for (int r = 0; r < job->nranks; r++) {
        job_free_mem(job->members, job, lc->buf[r], lc->len[r]);
        lc->buf[r] = NULL;
        lc->len[r] = 0;
        ll_send_credit(job, r, c->stream, c->epoch, lc->credits[r]);
    }
    ll_finish(c);
}

/* ------------------------------------------------------------------------ */
/* LL in                                                                     */

/* Rank in->from's LL is in: check it, then answer it (a dispatch, a tree) or keep it with the
   collective (a combine, answered once all N are). */
static void ll_took(ll_in_t *in, coll_t *c)
{
    job_t *job = in->ci.job;
    membership_t *m = job->members;
    ll_coll_t *lc = c->state;
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_LL, job, c);
    h.rank = (uint32_t)in->from;
    h.total = c->bytes[in->from];
    h.length = in->len;
    char why[200];
    if (inc_wire_ll_parse(&h, job->nranks, in->buf, in->len, &in->v, why, sizeof(why)) !=
        INCMOE_OK) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, in->from, "%s epoch %llu: %s",
                inc_wire_stream_name(c->stream), (unsigned long long)c->epoch, why);
        return;
    }
    lc->narrived++;
    if (job->tree) {
        in->ci.sending = 1;
        send_verdict(&in->ci, in->from, INCMOE_ERR_UNSUPPORTED, tree_reason);
        return;
    }
    if (c->stream == INCMOE_STREAM_DISPATCH) {
        coll_item_send_copies(&in->ci, dispatch_receives, dispatch_send, NULL);
        return;
    }
    const int r = in->from; /* the collective keeps the combine's LL */
    lc->buf[r] = in->buf;
    lc->len[r] = in->len;
    lc->credits[r] = in->credits;
    lc->v[r] = in->v;
    in->buf = NULL;
    in->len = 0;
    lc->in[r] = NULL;
    coll_item_leave(&in->ci);
    if (lc->narrived == job->nranks)
        combine_answer(lc, c);
}

static void in_arrived(coll_item_t *ci, int from)
{
    (void)from;
    ll_took((ll_in_t *)ci, ci->coll);
}

/* The credits an LL of length bytes takes: max(1, ceil(length / chunk_size)). */
static uint64_t ll_credits(uint64_t length, uint64_t chunk_size)
{
    uint64_t k = length / chunk_size + (length % chunk_size != 0);
    return k > 0 ? k : 1;
}

/* The collective an LL of rank me names, its form and state, and the item it arrives into, its
   credits taken; NULL: the job failed. */
static ll_in_t *ll_open(membership_t *m, job_t *job, conn_t *conn, const struct inc_wire_hdr *h,
                        size_t length)
{
    const int me = conn->rank;
    if (!job_admit_dc(m, job, me))
        return NULL;
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_set_form(m, job, conn, c, &ll_form) ||
        !coll_unposted(m, job, c, me, "sent"))
        return NULL;
    const uint64_t k = ll_credits(length, m->set->chunk_size);
    const uint32_t left = m->set->credits - job->inflight[me][h->stream];
    if (k > left) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d's LL of %zu bytes takes %llu credits of %s, it has %u left", me, length,
                (unsigned long long)k, inc_wire_stream_name(h->stream), left);
        return NULL;
    }
    ll_coll_t *lc = ll_state(m, job, c, me);
    ll_in_t *in = lc != NULL ? calloc(1, sizeof(*in)) : NULL;
    char *buf = in != NULL ? job_alloc(m, job, length) : NULL;
    if (buf == NULL) {
        free(in);
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return NULL;
    }
    coll_item_init(&in->ci, &in_ops, job, c); /* the collective's hold: lc->in below */
    in->from = me;
    in->buf = buf;
    in->len = length;
    in->credits = (uint32_t)k;
    lc->in[me] = in;
    job->inflight[me][h->stream] += (uint32_t)k;
    coll_post(job, c, me, h->total);
    return in;
}

static ucs_status_t on_ll(const coll_env_t *env, job_t *job, conn_t *conn,
                          const struct inc_wire_hdr *h, void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    membership_t *m = env->m;
    ll_in_t *in = ll_open(m, job, conn, h, length);
    if (in == NULL)
        return UCS_ERR_INVALID_PARAM; /* the job failed */
    m->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&in->ci, in->from, data, in->buf, length);
    memcpy(in->buf, data, length);
    coll_item_hold(&in->ci); /* answering may retire the collective and take in out of it */
    ll_took(in, in->ci.coll);
    coll_item_put(&in->ci);
    return UCS_OK;
}

/* What a stuck collective waits for: the LLs not in, or the answers still going. */
static void ll_stalled(const coll_t *c, char *why, size_t len)
{
    const ll_coll_t *lc = c->state;
    if (lc == NULL) {
        snprintf(why, len, "; no LL of it here");
        return;
    }
    snprintf(why, len, "; %d of %d LLs in, %d answered", lc->narrived, lc->ci.job->nranks,
             lc->nanswered);
}

const coll_form_t ll_form = {
    .what = "in the low-latency form (LL)",
    .ll = on_ll,
    .detach = ll_detach,
    .stalled = ll_stalled,
};
