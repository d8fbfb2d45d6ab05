/*
 * small.c - small collectives on the switch: every rank sends one SMALL (its
 * POST and its whole contribution, behind a table of the N window sizes) and
 * gets one SMALL_FWD back with everything it receives, which also returns the
 * credit its SMALL took.  The protocol is described in base/wire.h.
 *
 * Each SMALL is copied (or received, if rendezvous) into a buffer of the job
 * and checked against the header, the signature, the small rule and the
 * other ranks' tables.  When all N are in, the results are built in one
 * buffer (AllGather: the blocks twice over, so every rank's N-1 others are
 * one contiguous slice; ReduceScatter: every root's block reduced in
 * ascending rank order; AllReduce: the vector reduced likewise), the
 * contributions are freed and each rank gets its slice.  The reductions are
 * at most one chunk and run inline.
 *
 * Memory (see job_memory_bound in membership.c): a SMALL takes one credit and
 * holds at most 8 N + chunk_size bytes until the results are built; the
 * results buffer holds at most chunk_size bytes (an AllGather is small only
 * up to half a chunk, as its buffer holds the blocks twice) until every
 * SMALL_FWD has gone.  A rank gets its credit back with
 * its SMALL_FWD, so it cannot send the SMALL of a later collective before it
 * received this one's result: a stream has at most `credits` small
 * collectives whose results are still going out.
 */
#include "small.h"

#include <stdlib.h>
#include <string.h>

#include "coll_item.h"
#include "coll_table.h"
#include "tree.h"

#include "base/reduce.h"

typedef struct small {
    coll_item_t ci;   /* first: its lifetime (coll_item.c), its job and its collective */
    uint64_t *table;  /* [nranks] window sizes, from the first checked SMALL */
    void **in;        /* [nranks] each rank's SMALL payload (job memory) */
    size_t *in_len;   /* [nranks] */
    uint8_t *arrived; /* [nranks] by port key: payload complete and checked */
    int narrived;
    int up_sent;   /* tree: this side's contribution went to the parent */
    int completed; /* tree: the results are going to the ports */
    void *out;     /* the results */
    size_t out_len;
} small_t;

/* The state's last hold is gone (coll_item.c): the one place it is freed. */
static void small_release(coll_item_t *ci)
{
    small_t *s = (small_t *)ci;
    membership_t *m = ci->job->members;
    for (int r = 0; r < ci->job->nranks; r++)
        job_free_mem(m, ci->job, s->in[r], s->in_len[r]);
    job_free_mem(m, ci->job, s->out, s->out_len);
    free(s->table);
    free(s->in);
    free(s->in_len);
    free(s->arrived);
    free(s);
}

/* The collective is going: its state leaves it, and lives on while a receive or a send
   still holds it. */
static void small_detach(coll_t *c)
{
    small_t *s = c->state;
    c->state = NULL;
    coll_item_leave(&s->ci);
}

static void small_received(coll_item_t *ci, int from);
static void small_sent(coll_item_t *ci);

static const coll_item_ops_t small_ops = {
    .arrived = small_received,
    .sent = small_sent,
    .release = small_release,
};

static small_t *small_new(job_t *job, coll_t *c)
{
    const size_t n = (size_t)job->nranks;
    small_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->in = calloc(n, sizeof(void *));
    s->in_len = calloc(n, sizeof(size_t));
    s->arrived = calloc(n, 1);
    if (s->in == NULL || s->in_len == NULL || s->arrived == NULL) {
        free(s->in);
        free(s->in_len);
        free(s->arrived);
        free(s);
        return NULL;
    }
    coll_item_init(&s->ci, &small_ops, job, c); /* the collective's hold: c->state below */
    c->state = s;
    return s;
}

/* ------------------------------------------------------------------------ */
/* results                                                                   */

/* Byte offset of each window in the concatenation of all N; off[N] = the sum. */
static void window_offsets(const uint64_t *table, int n, uint64_t *off)
{
    off[0] = 0;
    for (int r = 0; r < n; r++)
        off[r + 1] = off[r] + table[r];
}

/* Build every result into s->out (the contributions are all in and checked). */
static int small_build(small_t *s, coll_t *c)
{
    const int n = s->ci.job->nranks;
    const size_t hdr = 8 * (size_t)n;
    uint64_t off[INCMOE_MAX_RANKS + 1];
    window_offsets(s->table, n, off);
    const uint64_t total = off[n];
    if (c->stream == INCMOE_STREAM_ALLGATHER)
        s->out_len = (size_t)(2 * total - s->table[n - 1]);
    else if (c->stream == INCMOE_STREAM_REDUCESCATTER)
        s->out_len = (size_t)total;
    else
        s->out_len = (size_t)s->table[0];
    s->out = job_alloc(s->ci.job->members, s->ci.job, s->out_len);
    if (s->out == NULL) {
        s->out_len = 0;
        return 0;
    }
    char *out = s->out;
    const void *srcs[INCMOE_MAX_RANKS];
    const incmoe_dtype_t dtype = (incmoe_dtype_t)c->dtype;
    const incmoe_redop_t redop = (incmoe_redop_t)c->redop;
    switch (c->stream) {
    case INCMOE_STREAM_ALLGATHER:
        /* Blocks 0..N-1, then 0..N-2 again: rank r's others start at block r+1. */
        for (int r = 0; r < n; r++)
            if (s->table[r] > 0)
                memcpy(out + off[r], (const char *)s->in[r] + hdr, (size_t)s->table[r]);
        if (total - s->table[n - 1] > 0)
            memcpy(out + total, out, (size_t)(total - s->table[n - 1]));
        break;
    case INCMOE_STREAM_REDUCESCATTER:
        for (int root = 0; root < n; root++) {
            if (s->table[root] == 0)
                continue;
            int k = 0;
            for (int q = 0; q < n; q++) {
                if (q == root)
                    continue;
                /* q's partials follow its table, ascending root, its own left out. */
                uint64_t at = hdr + off[root] - (q < root ? s->table[q] : 0);
                srcs[k++] = (const char *)s->in[q] + at;
            }
            inc_reduce_ordered(out + off[root], srcs, k,
                               (size_t)(s->table[root] / incmoe_dtype_size(dtype)), dtype, redop);
        }
        break;
    default:
        for (int q = 0; q < n; q++)
            srcs[q] = (const char *)s->in[q] + hdr;
        if (s->out_len > 0)
            inc_reduce_ordered(out, srcs, n, s->out_len / incmoe_dtype_size(dtype), dtype, redop);
        break;
    }
    return 1;
}

/* Every SMALL_FWD went out: the collective is done. */
static void small_sent(coll_item_t *ci)
{
    small_t *s = (small_t *)ci;
    coll_t *c = ci->coll;
    if (ci->job->tree && !s->completed)
        return; /* the send up went; the results have yet to */
    job_free_mem(ci->job->members, ci->job, s->out, s->out_len);
    s->out = NULL;
    s->out_len = 0;
    c->armed = 1;
    coll_check_done(ci->job, c); /* may retire c, and take s out of it */
}

/* All N are in: build the results, free the contributions, send each rank its slice. */
static void small_complete(small_t *s, coll_t *c)
{
    job_t *job = s->ci.job;
    membership_t *m = job->members;
    const int n = job->nranks;
    if (!small_build(s, c)) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, 0, "switch memory bound reached for a small %s",
                 inc_wire_stream_name(c->stream));
        return;
    }
    for (int r = 0; r < n; r++) {
        job_free_mem(m, job, s->in[r], s->in_len[r]);
        s->in[r] = NULL;
        s->in_len[r] = 0;
        /* The SMALL_FWD below is the credit: count it back before the rank can use it. */
        job->inflight[r][c->stream]--;
    }
    uint64_t off[INCMOE_MAX_RANKS + 1];
    window_offsets(s->table, n, off);
    const incmoe_stream_t stream = (incmoe_stream_t)c->stream;
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_SMALL_FWD, job, c);
    s->ci.sending = n;
    coll_item_hold(&s->ci); /* the sends may all complete inline, retire c and free s */
    for (int r = 0; r < n; r++) {
        /* AllGather: rank r's others start at block r+1; ReduceScatter: its own block. */
        uint64_t at = stream == INCMOE_STREAM_ALLGATHER       ? off[r + 1]
                      : stream == INCMOE_STREAM_REDUCESCATTER ? off[r]
                                                              : 0;
        h.rank = (uint32_t)r;
        h.length = inc_wire_small_result_length(stream, s->table, n, r);
        h.total = h.length;
        /* It carries the rank's credit: a result, ahead of multicast copies. */
        coll_item_send(&s->ci, job->conns[r], EGRESS_RESULT, &h, (const char *)s->out + at);
    }
    coll_item_put(&s->ci);
}

/* ------------------------------------------------------------------------ */
/* over a tree                                                               */

/*
 * Over a tree (base/wire.h, "Switch trees") every port's payload is its
 * table and its side's contribution: AllGather, the blocks of the ranks it
 * covers; ReduceScatter, its partial of every root it does not cover; AllReduce,
 * its vector, ascending rank throughout.  The parent's SMALL_FWD is the parent
 * port's, with this collective's table put in front.  What goes to a port is
 * built from them when its queue takes the send, so no results buffer is held.
 */

/* Does port p contribute to root r's window, and does it get its result?  The stream's rules
   (coll_streams) on ports: a port is the root's when it covers the root.  A shared window
   (AllReduce) is one vector, which every port sends and gets. */
static int port_contributes(const job_t *job, int stream, int p, int r)
{
    return coll_streams[stream].contributes(p, job->rep[r], job->nranks);
}

static int port_receives(const job_t *job, int stream, int p, int r)
{
    return coll_streams[stream].receives(p, job->rep[r], job->nranks);
}

/* Bytes of port p's contribution (after the table), and of what it receives. */
static uint64_t port_in_length(const job_t *job, int stream, const uint64_t *table, int p)
{
    if (coll_streams[stream].shared_window)
        return table[0];
    uint64_t n = 0;
    for (int r = 0; r < job->nranks; r++)
        if (port_contributes(job, stream, p, r))
            n += table[r];
    return n;
}

static uint64_t port_out_length(const job_t *job, int stream, const uint64_t *table, int p)
{
    if (coll_streams[stream].shared_window)
        return table[0];
    uint64_t n = 0;
    for (int r = 0; r < job->nranks; r++)
        if (port_receives(job, stream, p, r))
            n += table[r];
    return n;
}

/* Where rank r's block (AllGather) or root r's partial (ReduceScatter) is in port q's
   payload. */
static const char *port_piece(const small_t *s, int stream, int q, int r)
{
    const job_t *job = s->ci.job;
    uint64_t at = 8 * (uint64_t)job->nranks;
    for (int x = 0; x < r; x++)
        if (port_contributes(job, stream, q, x))
            at += s->table[x];
    return (const char *)s->in[q] + at;
}

/* Write what port p gets (its SMALL_FWD, or for the parent this side's SMALL after the
   table): the order of the ports' keys in every reduction. */
static void tree_result(const small_t *s, const coll_t *c, int p, char *out)
{
    const job_t *job = s->ci.job;
    const int n = job->nranks;
    const incmoe_dtype_t dtype = (incmoe_dtype_t)c->dtype;
    const incmoe_redop_t redop = (incmoe_redop_t)c->redop;
    const void *srcs[INCMOE_MAX_RANKS];
    if (c->stream == INCMOE_STREAM_ALLGATHER) {
        /* A rank's others from rank+1 on, wrapping, as on one switch; a switch's ascending. */
        int first = job->conns[p]->role == CONN_RANK ? p + 1 : 0;
        for (int i = 0; i < n; i++) {
            int r = (first + i) % n;
            if (!port_receives(job, c->stream, p, r) || s->table[r] == 0)
                continue;
            memcpy(out, port_piece(s, c->stream, job->rep[r], r), (size_t)s->table[r]);
            out += s->table[r];
        }
        return;
    }
    if (c->stream == INCMOE_STREAM_REDUCESCATTER) {
        for (int root = 0; root < n; root++) {
            if (!port_receives(job, c->stream, p, root) || s->table[root] == 0)
                continue;
            int k = 0;
            for (int q = 0; q < n; q++)
                if (job->rep[q] == q && q != p)
                    srcs[k++] = port_piece(s, c->stream, q, root);
            inc_reduce_ordered(out, srcs, k, (size_t)(s->table[root] / incmoe_dtype_size(dtype)),
                               dtype, redop);
            out += s->table[root];
        }
        return;
    }
    const size_t hdr = 8 * (size_t)n;
    if (p != job->parent_rep && job->parent_rep >= 0) { /* the root's result, unchanged */
        memcpy(out, (const char *)s->in[job->parent_rep] + hdr, (size_t)s->table[0]);
        return;
    }
    int k = 0; /* up: every port but the parent; at the root: every port */
    for (int q = 0; q < n; q++)
        if (job->rep[q] == q && q != job->parent_rep)
            srcs[k++] = (const char *)s->in[q] + hdr;
    inc_reduce_ordered(out, srcs, k, (size_t)(s->table[0] / incmoe_dtype_size(dtype)), dtype,
                       redop);
}

static void tree_build(void *arg, const struct inc_wire_hdr *h, void *buf)
{
    const small_t *s = arg;
    const job_t *job = s->ci.job;
    if (h->msg == WIRE_MSG_SMALL) { /* up: the table, then this side's contribution */
        memcpy(buf, s->table, 8 * (size_t)job->nranks);
        tree_result(s, s->ci.coll, job->parent_rep, (char *)buf + 8 * (size_t)job->nranks);
        return;
    }
    tree_result(s, s->ci.coll, (int)h->rank, buf);
}

/* Another port's payload is in: send this side's up once every port but the parent's is,
   and every port its result once all are. */
static void tree_step(small_t *s, coll_t *c)
{
    job_t *job = s->ci.job;
    membership_t *m = job->members;
    int ports = 0, local = 0, local_in = 0;
    for (int p = 0; p < job->nranks; p++) {
        if (job->rep[p] != p)
            continue;
        ports++;
        local += p != job->parent_rep;
        local_in += p != job->parent_rep && s->arrived[p];
    }
    struct inc_wire_hdr h;
    coll_hdr_init(&h, WIRE_MSG_SMALL_FWD, job, c);
    if (job->parent_rep >= 0 && !s->up_sent && local_in == local) {
        s->up_sent = 1;
        struct inc_wire_hdr up = h;
        up.msg = WIRE_MSG_SMALL;
        up.rank = (uint32_t)job->up_rank;
        up.total = port_out_length(job, c->stream, s->table, job->parent_rep);
        up.length = 8 * (uint64_t)job->nranks + up.total;
        s->ci.sending++; /* small_sent ignores it until the results go */
        tree_send_up(m, job, &s->ci, EGRESS_RESULT, &up, NULL, tree_build);
    }
    if (s->narrived < ports || s->completed || job->state != JOB_ACTIVE)
        return;
    s->completed = 1;
    s->ci.sending += local;
    coll_item_hold(&s->ci); /* the sends may all complete inline, retire c and free s */
    for (int p = 0; p < job->nranks; p++) {
        if (job->rep[p] != p || p == job->parent_rep)
            continue;
        job->inflight[p][c->stream]--; /* the SMALL_FWD is the credit */
        h.rank = (uint32_t)p;
        h.length = h.total = port_out_length(job, c->stream, s->table, p);
        coll_item_send_built(&s->ci, job->conns[p], EGRESS_RESULT, &h, tree_build);
    }
    coll_item_put(&s->ci);
}

/* ------------------------------------------------------------------------ */
/* SMALL in                                                                  */

/* Check rank me's payload against its header, the rule and the others; 0: the job failed. */
static int small_check(small_t *s, coll_t *c, int me, uint64_t total)
{
    job_t *job = s->ci.job;
    membership_t *m = job->members;
    const int n = job->nranks;
    const char *what = inc_wire_stream_name(c->stream);
    const unsigned long long epoch = (unsigned long long)c->epoch;
    uint64_t table[INCMOE_MAX_RANKS];
    memcpy(table, s->in[me], 8 * (size_t)n); /* its length was checked on arrival */
    const int is_rank = job->conns[me]->role == CONN_RANK;
    if (is_rank && table[me] != total) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "small %s epoch %llu: rank %d's table gives it %llu bytes, its header %llu", what,
                epoch, me, (unsigned long long)table[me], (unsigned long long)total);
        return 0;
    }
    if (inc_wire_signature((incmoe_stream_t)c->stream, (incmoe_dtype_t)c->dtype,
                           (incmoe_redop_t)c->redop, table, n) != c->sig) {
        JOB_BAD(m, job, INCMOE_ERR_MISMATCH, me,
                "small %s epoch %llu: rank %d's table of window sizes does not match its "
                "signature",
                what, epoch, me);
        return 0;
    }
    if (s->table != NULL && memcmp(s->table, table, 8 * (size_t)n) != 0) {
        JOB_BAD(m, job, INCMOE_ERR_MISMATCH, me,
                "small %s epoch %llu: rank %d's window sizes differ from the others'", what, epoch,
                me);
        return 0;
    }
    if (!inc_wire_is_small((incmoe_stream_t)c->stream, table, n, m->set->chunk_size)) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d sent %s epoch %llu as SMALL, but its windows exceed what a %llu-byte "
                "chunk allows",
                me, what, epoch, (unsigned long long)m->set->chunk_size);
        return 0;
    }
    const coll_stream_t *kind = &coll_streams[c->stream];
    size_t esize = kind->reduces ? incmoe_dtype_size((incmoe_dtype_t)c->dtype) : 1;
    for (int r = 0; r < n; r++) {
        if (table[r] % esize != 0 || (kind->shared_window && table[r] != table[0])) {
            JOB_BAD(m, job, kind->shared_window ? INCMOE_ERR_MISMATCH : INCMOE_ERR_PROTOCOL, me,
                    "small %s epoch %llu: rank %d gives rank %d a window of %llu bytes", what,
                    epoch, me, r, (unsigned long long)table[r]);
            return 0;
        }
    }
    uint64_t want = is_rank ? inc_wire_small_length((incmoe_stream_t)c->stream, table, n, me)
                            : 8 * (uint64_t)n + port_in_length(job, c->stream, table, me);
    if (s->in_len[me] != want) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "small %s epoch %llu: rank %d sent %zu bytes, its table calls for %llu", what,
                epoch, me, s->in_len[me], (unsigned long long)want);
        return 0;
    }
    if (s->table == NULL) {
        s->table = malloc(8 * (size_t)n);
        if (s->table == NULL) {
            job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
            return 0;
        }
        memcpy(s->table, table, 8 * (size_t)n);
    }
    return 1;
}

/* Rank me's payload is in: check it, and complete the collective if it was the last. */
static void small_arrived(small_t *s, int me, uint64_t total)
{
    coll_t *c = s->ci.coll;
    job_t *job = s->ci.job;
    if (me != job->parent_rep && !small_check(s, c, me, total)) /* the parent's: on arrival */
        return;
    s->arrived[me] = 1;
    s->narrived++;
    if (job->tree)
        tree_step(s, c);
    else if (s->narrived == job->nranks)
        small_complete(s, c);
}

static void small_received(coll_item_t *ci, int from)
{
    /* The header's total was checked against the collective's bytes on arrival. */
    small_arrived((small_t *)ci, from, ci->coll->bytes[from]);
}

static ucs_status_t on_small(const coll_env_t *env, job_t *job, conn_t *conn,
                             const struct inc_wire_hdr *h, void *data, size_t length,
                             const ucp_am_recv_param_t *param)
{
    membership_t *m = env->m;
    const int me = conn->rank;
    const int n = job->nranks;
    coll_t *c = coll_get(m, job, conn, h->stream, h->epoch);
    if (c == NULL || !coll_describe(m, job, conn, c, h) ||
        !coll_set_form(m, job, conn, c, &small_form) || !coll_unposted(m, job, c, me, "sent") ||
        !coll_credit_left(m, job, me, h->stream))
        return UCS_ERR_INVALID_PARAM;
    if (length < 8 * (size_t)n || length - 8 * (size_t)n > m->set->chunk_size) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, me,
                "rank %d sent a SMALL of %zu bytes; it holds a table of %d sizes and at most "
                "%llu bytes of data",
                me, length, n, (unsigned long long)m->set->chunk_size);
        return UCS_ERR_INVALID_PARAM;
    }
    small_t *s = c->state;
    if (s == NULL && (s = small_new(job, c)) == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch out of memory");
        return UCS_ERR_NO_MEMORY;
    }
    void *buf = job_alloc(m, job, length);
    if (buf == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, me, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    s->in[me] = buf;
    s->in_len[me] = length;
    if (conn->role == CONN_RANK) {
        coll_post(job, c, me, h->total);
    } else { /* a child switch: every rank beneath it (the sizes are checked on arrival) */
        for (int r = 0; r < n; r++)
            if (job->conns[r] == conn)
                coll_post(job, c, r, 0);
    }
    job->inflight[me][h->stream]++;
    m->stats->bytes_in += length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&s->ci, me, data, buf, length);
    memcpy(buf, data, length);
    coll_item_hold(&s->ci); /* completing may retire the collective and take s out of it */
    small_arrived(s, me, h->total);
    coll_item_put(&s->ci);
    return UCS_OK;
}

static ucs_status_t on_parent_result(const coll_env_t *env, job_t *job, conn_t *conn,
                                     const struct inc_wire_hdr *h, void *data, size_t length,
                                     const ucp_am_recv_param_t *param)
{
    membership_t *m = env->m;
    const int p = job->parent_rep, n = job->nranks;
    coll_t *c = NULL;
    for (c = job->colls[h->stream]; c != NULL && c->epoch != h->epoch; c = c->next)
        ;
    small_t *s = c != NULL && c->form == &small_form ? c->state : NULL;
    if (p < 0 || s == NULL || !s->up_sent || s->arrived[p] || s->in[p] != NULL ||
        length != port_in_length(job, c->stream, s->table, p)) {
        JOB_BAD(m, job, INCMOE_ERR_PROTOCOL, 0,
                "the parent switch sent a SMALL_FWD of %zu bytes for %s epoch %llu, which this "
                "switch did not send up as small",
                length, inc_wire_stream_name(h->stream), (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    (void)conn;
    const size_t hdr = 8 * (size_t)n;
    char *buf = job_alloc(m, job, hdr + length);
    if (buf == NULL) {
        job_fail(m, job, INCMOE_ERR_NO_MEMORY, 0, "switch memory bound reached");
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(buf, s->table, hdr);
    s->in[p] = buf;
    s->in_len[p] = hdr + length;
    for (int r = 0; r < n; r++)
        if (job->rep[r] == p)
            coll_post(job, c, r, s->table[r]);
    tree_up_credit(m, job, h->stream, 1); /* a SMALL_FWD returns the SMALL's credit */
    m->stats->bytes_in += length;
    if (job->state != JOB_ACTIVE)
        return UCS_ERR_CANCELED;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        return coll_item_receive(&s->ci, p, data, buf + hdr, length);
    memcpy(buf + hdr, data, length);
    coll_item_hold(&s->ci); /* completing may retire the collective and take s out of it */
    small_arrived(s, p, 0);
    coll_item_put(&s->ci);
    return UCS_OK;
}

const coll_form_t small_form = {
    .what = "small (SMALL)",
    .small = on_small,
    .result_msg = WIRE_MSG_SMALL_FWD,
    .parent_result = on_parent_result,
    .detach = small_detach,
};
