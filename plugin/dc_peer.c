/*
 * dc_peer.c - dispatch and combine point to point over the mesh (mesh.c), for
 * the ring and a2a algorithms (base/wire.h, "Dispatch and combine between the
 * ranks").  What every algorithm shares (the kept dispatch, the plan applied,
 * the local rows, the owner's own partial last) is dc_shared.c's.
 *
 *   Plan     at start every rank sends every other a PEER_PLAN, rows or not,
 *            and waits for the N - 1 others' (its collective cannot complete
 *            before every rank posted it); from the N plans each computes the
 *            same verdict.  A dispatch's plan lists the source rows the peer
 *            gets, so the rows themselves travel bare.
 *   Dispatch after an OK verdict a source sends each receiver the rows whose
 *            set holds it, in row order, max(1, chunk_size / row bytes) per
 *            PEER_ROWS (packed into one buffer when they are not contiguous,
 *            at most `credits` messages of a collective in flight); the
 *            receiver lands them at their final place (a rendezvous straight
 *            there).
 *   Combine  a contributor sends each owner its partials of the owner's rows,
 *            one PEER_PARTIALS per owner chunk (max(1, chunk_size / row
 *            bytes) of the owner's rows; the partials are contiguous in the
 *            contributor's received order), each taking a credit toward that
 *            owner; the owner stages a chunk until every contributor's piece
 *            landed, reduces each row over its contributors in ascending rank
 *            order (inc_reduce_ordered, as the switch does), applies its own
 *            partial last (dc_shared.c), and returns the credits.  A contributor
 *            sends an owner its pieces in (epoch, chunk) order, so the owner's
 *            oldest incomplete chunk always has every contributor able to send
 *            its piece: the credits cannot deadlock, and an owner stages at
 *            most N - 1 times credits chunks.
 *
 * Messages for a collective this rank has not started, or rows before its
 * verdict, wait as kept messages (bounded: plans by the stream's window, rows
 * by the verdict every sender waits for too, partials by the credits).
 */
#include "dc_peer.h"
#include "client.h"
#include "coll.h"
#include "dc_shared.h"
#include "mesh.h"
#include "notify.h"
#include "send.h"
#include "base/log.h"
#include "base/reduce.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Owner side of one combine chunk. */
typedef struct {
    char *stage;     /* its contributors' pieces, ascending rank, or NULL before the first */
    uint32_t landed; /* pieces in the stage */
} dcp_chunk_t;

/* This rank's part of one dispatch or combine, from its start until every row it sends went
   out and every row it expects came (it holds op for that long). */
typedef struct dcp_rec {
    struct dcp_rec *next;
    coll_op_t *op;
    int nplans;          /* peers' plans in */
    char **plan;         /* [nranks] each peer's PEER_PLAN payload (own: NULL) */
    int decided, ok;     /* the verdict was applied; it let rows move */
    uint64_t *cursor;    /* [nranks] dispatch: next own row to look at for the peer; combine:
                            next position in the peer's block */
    uint64_t *sent;      /* [nranks] rows sent to the peer */
    uint64_t *next_in;   /* [nranks] rows expected next from the peer (their offset) */
    size_t rpc;          /* rows per chunk */
    size_t nchunks;      /* combine, owner side: chunks of this rank's rows */
    uint32_t *cnt;       /* [nchunks * nranks] rows of chunk c whose set holds d */
    dcp_chunk_t *chunks; /* [nchunks] */
} dcp_rec_t;

/* A rendezvous payload on its way into place. */
typedef struct dcp_recv {
    struct dcp_recv *next, *prev; /* dcp->landing */
    incmoe_comm_t *comm;
    struct client_dc_peer *dcp; /* NULL once closed: the callback only frees */
    dcp_rec_t *rec;
    int from;
    uint64_t rows; /* dispatch: rows landing */
    size_t chunk;  /* combine: the owner chunk */
    int plan;      /* a plan, landing in rec->plan[from] */
    struct inc_wire_hdr hdr;
} dcp_recv_t;

struct client_dc_peer {
    dcp_rec_t *recs;      /* started, unfinished, in start order */
    client_kept_t *early; /* for a collective not started or not decided, in arrival order */
    dcp_recv_t *landing;  /* rendezvous receives in flight */
    uint32_t *credits;    /* [nranks] combine pieces this rank may still send each owner */
    uint32_t window;      /* the credits' bound, and a dispatch's messages in flight */
};

static int is_dispatch(const coll_op_t *op)
{
    return op->stream == INCMOE_STREAM_DISPATCH;
}

/* ------------------------------------------------------------------------ */
/* records                                                                   */

client_dc_peer_t *client_dc_peer_open(incmoe_comm_t *comm)
{
    client_dc_peer_t *dcp = calloc(1, sizeof(*dcp));
    if (dcp == NULL)
        return NULL;
    dcp->credits = calloc((size_t)comm->nranks, sizeof(uint32_t));
    if (dcp->credits == NULL) {
        free(dcp);
        return NULL;
    }
    return dcp;
}

/* The grant is known once the job formed: JOIN_ACK's credits. */
static void dcp_init_credits(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    if (dcp->window != 0)
        return;
    dcp->window = comm->credits;
    for (int r = 0; r < comm->nranks; r++)
        dcp->credits[r] = dcp->window;
}

static void rec_free(dcp_rec_t *rec, int nranks)
{
    for (int r = 0; rec->plan != NULL && r < nranks; r++)
        free(rec->plan[r]);
    for (size_t c = 0; rec->chunks != NULL && c < rec->nchunks; c++)
        free(rec->chunks[c].stage);
    free(rec->plan);
    free(rec->cursor);
    free(rec->sent);
    free(rec->next_in);
    free(rec->cnt);
    free(rec->chunks);
    free(rec);
}

static dcp_rec_t *rec_find(client_dc_peer_t *dcp, unsigned stream, uint64_t epoch)
{
    for (dcp_rec_t *rec = dcp->recs; rec != NULL; rec = rec->next)
        if (rec->op->stream == stream && rec->op->epoch == epoch)
            return rec;
    return NULL;
}

/* A failure mid-collective: the other ranks wait for this one's rows, so the job fails for
   them too, with the reason. */
static void dcp_fail(incmoe_comm_t *comm, incmoe_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void dcp_fail(incmoe_comm_t *comm, incmoe_status_t st, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    client_fail_job(comm, st, text);
}

/* A peer broke the protocol.  Returns what the message's handler answers UCX. */
static ucs_status_t dcp_refuse(incmoe_comm_t *comm, const struct inc_wire_hdr *h, int from,
                               const char *what)
{
    dcp_fail(comm, INCMOE_ERR_PROTOCOL, "%s from rank %d for %s epoch %llu: %s",
             inc_wire_msg_name(h->msg), from, inc_wire_stream_name(h->stream),
             (unsigned long long)h->epoch, what);
    return UCS_ERR_INVALID_PARAM;
}

/* ------------------------------------------------------------------------ */
/* plans                                                                     */

static const struct inc_wire_dc_post *plan_head(const char *plan)
{
    return (const struct inc_wire_dc_post *)plan;
}

static const uint32_t *plan_count(const char *plan)
{
    return (const uint32_t *)(plan + sizeof(struct inc_wire_dc_post));
}

/* After count[N]: the dispatch's source rows for the receiver, or the combine's recvd[N]. */
static const uint32_t *plan_tail(const char *plan, int nranks)
{
    return plan_count(plan) + nranks;
}

/* After the tail: a refusal's reason, head->refused bytes (incmoe.h, "A refusal"). */
static const char *plan_refusal(const char *plan, int nranks, size_t tail)
{
    return (const char *)(plan_tail(plan, nranks) + tail);
}

/* This rank's plan for peer: its part of the plan, and for a dispatch its rows for the
   peer; a refusal's reason last. */
static void send_plan(incmoe_comm_t *comm, coll_op_t *op, int peer)
{
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks;
    size_t tail = is_dispatch(op) ? dc->sent[peer] : (size_t)n;
    size_t refused = op->refused != NULL ? strlen(op->refused) : 0;
    size_t len = sizeof(struct inc_wire_dc_post) + ((size_t)n + tail) * sizeof(uint32_t) + refused;
    char *payload = malloc(len);
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_PEER_PLAN);
    if (payload == NULL || ctx == NULL) {
        free(payload);
        free(ctx);
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_PLAN");
        return;
    }
    struct inc_wire_dc_post head = {.rows = dc->nrows,
                                    .row_bytes = op->row_bytes,
                                    .nranks = (uint32_t)n,
                                    .refused = (uint16_t)refused};
    if (is_dispatch(op)) {
        head.capacity = op->capacity;
    } else {
        head.dispatch_epoch = dc->epoch;
        head.row_count = op->row_bytes / incmoe_dtype_size(op->dtype);
        head.dtype = (uint8_t)op->dtype;
        head.redop = (uint8_t)op->redop;
    }
    memcpy(payload, &head, sizeof(head));
    uint32_t *count = (uint32_t *)(payload + sizeof(head)), *rows = count + n;
    memcpy(count, dc->sent, (size_t)n * sizeof(uint32_t));
    if (is_dispatch(op)) {
        size_t k = 0;
        for (size_t i = 0; i < dc->nrows && k < tail; i++)
            if (client_dc_in_set(dc, i, peer))
                rows[k++] = (uint32_t)i;
    } else {
        memcpy(rows, dc->recvd, (size_t)n * sizeof(uint32_t));
    }
    if (refused > 0)
        memcpy((char *)(rows + tail), op->refused, refused);
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.length = len;
    ctx->payload_owned = payload;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, payload, len, NULL, &op->sent);
}

/* A peer's plan, whole, checked against this rank's view; NULL (nothing changed) or a reason
   in why. */
static const char *check_plan(const incmoe_comm_t *comm, const coll_op_t *op, const char *plan,
                              size_t len, char *why, size_t why_len)
{
    const int n = comm->nranks, me = comm->rank;
    const struct inc_wire_dc_post *head = plan_head(plan);
    size_t fixed = sizeof(*head) + (size_t)n * sizeof(uint32_t);
    if (head->nranks != (uint32_t)n || len < fixed) {
        snprintf(why, why_len, "a plan for %u ranks in %zu bytes, this job has %d", head->nranks,
                 len, n);
        return why;
    }
    const uint32_t *count = plan_count(plan), *tail = plan_tail(plan, n);
    if (head->refused >= INCMOE_REFUSAL_MAX || (head->refused > 0 && head->rows != 0)) {
        snprintf(why, why_len, "a refusal of %u bytes with %llu rows", head->refused,
                 (unsigned long long)head->rows);
        return why;
    }
    size_t want = fixed + (is_dispatch(op) ? (size_t)count[me] : (size_t)n) * sizeof(uint32_t) +
                  head->refused;
    if (len != want) {
        snprintf(why, why_len, "a plan of %zu bytes, its counts make it %zu", len, want);
        return why;
    }
    if (!is_dispatch(op))
        return NULL;
    for (uint32_t k = 0; k < count[me]; k++) {
        if (tail[k] >= head->rows || (k > 0 && tail[k] <= tail[k - 1])) {
            snprintf(why, why_len,
                     "source row %u (the %u-th for this rank) of %llu rows is out "
                     "of order or range",
                     tail[k], k, (unsigned long long)head->rows);
            return why;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the verdict                                                               */

/* The owner's chunks of a combine: which peers hold how many rows of each. */
static int owner_chunks(incmoe_comm_t *comm, dcp_rec_t *rec)
{
    const client_dc_t *dc = rec->op->dc;
    const int n = comm->nranks, me = comm->rank;
    rec->nchunks = (dc->nrows + rec->rpc - 1) / rec->rpc;
    rec->cnt = calloc(rec->nchunks * (size_t)n + 1, sizeof(uint32_t));
    rec->chunks = calloc(rec->nchunks + 1, sizeof(dcp_chunk_t));
    if (rec->cnt == NULL || rec->chunks == NULL)
        return 0;
    for (size_t i = 0; i < dc->nrows; i++)
        for (int d = 0; d < n; d++)
            if (d != me && client_dc_in_set(dc, i, d))
                rec->cnt[(i / rec->rpc) * (size_t)n + (size_t)d]++;
    return 1;
}

static void replay_early(incmoe_comm_t *comm, client_dc_peer_t *dcp, unsigned stream,
                         uint64_t epoch);

/* The lowest rank that refused its arguments (this one's op->refused, the others' from their
   plans), its reason into buf: the verdict names no other.  -1 when none did. */
static int first_refusal(const incmoe_comm_t *comm, const dcp_rec_t *rec, char *buf)
{
    const int n = comm->nranks, me = comm->rank;
    for (int r = 0; r < n; r++) {
        if (r == me) {
            if (rec->op->refused == NULL)
                continue;
            snprintf(buf, INCMOE_REFUSAL_MAX, "%s", rec->op->refused);
            return r;
        }
        const struct inc_wire_dc_post *head = plan_head(rec->plan[r]);
        if (head->refused == 0)
            continue;
        size_t tail = is_dispatch(rec->op) ? plan_count(rec->plan[r])[me] : (size_t)n;
        memcpy(buf, plan_refusal(rec->plan[r], n, tail), head->refused);
        buf[head->refused] = '\0';
        return r;
    }
    return -1;
}

/* The dispatch's verdict from the N plans, applied (dc_shared.c); the sources of the rows to come.
 */
static int decide_dispatch(incmoe_comm_t *comm, dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    inc_dc_dispatch_in_t in[INCMOE_MAX_RANKS] = {{0}};
    uint32_t recvd[INCMOE_MAX_RANKS];
    inc_dc_verdict_t v;
    char refused[INCMOE_REFUSAL_MAX];
    int refuser = first_refusal(comm, rec, refused);
    for (int s = 0; s < n; s++) {
        if (s == me) {
            in[s] = (inc_dc_dispatch_in_t){op->row_bytes, op->capacity, dc->sent};
        } else {
            const struct inc_wire_dc_post *head = plan_head(rec->plan[s]);
            in[s] =
                (inc_dc_dispatch_in_t){head->row_bytes, head->capacity, plan_count(rec->plan[s])};
        }
        recvd[s] = in[s].count[me];
    }
    if (refuser >= 0)
        in[refuser].refused = refused;
    inc_dc_dispatch_verdict(op->epoch, n, in, &v);
    if (client_dc_plan_dispatch(comm, op, recvd, &v) != INCMOE_OK)
        return 0;
    rec->ok = v.status == INCMOE_OK;
    for (int s = 0; rec->ok && s < n; s++)
        if (s != me && recvd[s] > 0)
            client_dc_set_sources(op, s, 0, recvd[s], plan_tail(rec->plan[s], n));
    return 1;
}

/* The combine's verdict from the N plans, applied (dc_shared.c); the owner's chunks. */
static int decide_combine(incmoe_comm_t *comm, dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    inc_dc_combine_in_t in[INCMOE_MAX_RANKS] = {{0}};
    inc_dc_verdict_t v;
    char refused[INCMOE_REFUSAL_MAX];
    int refuser = first_refusal(comm, rec, refused);
    for (int r = 0; r < n; r++) {
        if (r == me) {
            in[r] = (inc_dc_combine_in_t){dc->epoch,
                                          op->row_bytes / incmoe_dtype_size(op->dtype),
                                          (uint32_t)op->dtype,
                                          (uint32_t)op->redop,
                                          dc->sent,
                                          dc->recvd};
        } else {
            const struct inc_wire_dc_post *head = plan_head(rec->plan[r]);
            in[r] = (inc_dc_combine_in_t){
                head->dispatch_epoch, head->row_count,          head->dtype,
                head->redop,          plan_count(rec->plan[r]), plan_tail(rec->plan[r], n)};
        }
    }
    if (refuser >= 0)
        in[refuser].refused = refused;
    inc_dc_combine_verdict(op->epoch, n, in, &v);
    client_dc_plan_combine(comm, op, &v);
    rec->ok = v.status == INCMOE_OK;
    if (rec->ok && !owner_chunks(comm, rec)) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "combine epoch %llu: no memory for its chunks",
                 (unsigned long long)op->epoch);
        return 0;
    }
    return 1;
}

static void rec_decide(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec)
{
    rec->decided = 1;
    if (is_dispatch(rec->op) ? decide_dispatch(comm, rec) : decide_combine(comm, rec))
        replay_early(comm, dcp, rec->op->stream, rec->op->epoch);
}

/* A peer's plan landed in rec->plan[from]: checked; the verdict once all are in. */
static void plan_arrived(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, int from,
                         size_t len)
{
    char why[160];
    const char *bad = check_plan(comm, rec->op, rec->plan[from], len, why, sizeof(why));
    if (bad != NULL) {
        dcp_fail(comm, INCMOE_ERR_PROTOCOL, "PEER_PLAN from rank %d for %s epoch %llu: %s", from,
                 inc_wire_stream_name(rec->op->stream), (unsigned long long)rec->op->epoch, bad);
        return;
    }
    if (++rec->nplans == comm->nranks - 1)
        rec_decide(comm, dcp, rec);
}

/* ------------------------------------------------------------------------ */
/* rows out                                                                  */

static void send_piece(incmoe_comm_t *comm, coll_op_t *op, inc_wire_msg_t msg, int peer,
                       const struct inc_wire_hdr *fields, const void *payload, ucp_mem_h memh,
                       void *owned)
{
    send_ctx_t *ctx = client_ctx(comm, msg);
    if (ctx == NULL) {
        free(owned);
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s", inc_wire_msg_name(msg));
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.root = fields->root;
    ctx->hdr.offset = fields->offset;
    ctx->hdr.length = fields->length;
    ctx->hdr.total = fields->total;
    ctx->hdr.chunk = fields->chunk;
    ctx->hdr.dtype = (uint8_t)op->dtype;
    ctx->hdr.redop = (uint8_t)op->redop;
    ctx->payload_owned = owned;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, payload, fields->length, memh, &op->sent);
}

/* The next chunk of a dispatch's rows for peer: straight from the send range when they lie
   side by side, else packed.  0 when none is left. */
static int send_rows_chunk(incmoe_comm_t *comm, dcp_rec_t *rec, int peer)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const uint64_t total = dc->sent[peer];
    if (rec->sent[peer] >= total)
        return 0;
    const uint64_t n = total - rec->sent[peer] < rec->rpc ? total - rec->sent[peer] : rec->rpc;
    size_t first = SIZE_MAX, last = 0;
    uint64_t k = 0;
    for (size_t i = (size_t)rec->cursor[peer]; k < n; i++) {
        if (client_dc_in_set(dc, i, peer)) {
            first = k++ == 0 ? i : first;
            last = i;
        }
    }
    struct inc_wire_hdr f = {.root = (uint32_t)peer,
                             .offset = rec->sent[peer],
                             .total = total,
                             .length = n * op->row_bytes,
                             .chunk = (uint32_t)(rec->sent[peer] / rec->rpc)};
    rec->cursor[peer] = last + 1;
    rec->sent[peer] += n;
    if (last - first + 1 == n) {
        send_piece(comm, op, WIRE_MSG_PEER_ROWS, peer, &f, op_send_at(op, first * op->row_bytes),
                   op->send_memh, NULL);
        return 1;
    }
    char *pack = malloc(f.length);
    if (pack == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "dispatch epoch %llu: no memory to pack %llu rows",
                 (unsigned long long)op->epoch, (unsigned long long)n);
        return 0;
    }
    k = 0;
    for (size_t i = first; i <= last; i++)
        if (client_dc_in_set(dc, i, peer))
            memcpy(pack + k++ * op->row_bytes, op_send_at(op, i * op->row_bytes), op->row_bytes);
    send_piece(comm, op, WIRE_MSG_PEER_ROWS, peer, &f, pack, NULL, pack);
    return 1;
}

/* Issue a dispatch's rows, round robin from the right neighbour on, while fewer than the
   window of its messages are in flight. */
static void pump_dispatch(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec)
{
    const int n = comm->nranks;
    int more = 1;
    while (more && rec->op->sent.count < dcp->window && atomic_load(&comm->error) == 0) {
        more = 0;
        for (int k = 1; k < n && rec->op->sent.count < dcp->window; k++)
            more |= send_rows_chunk(comm, rec, (comm->rank + k) % n);
    }
}

/* The owner chunk of a received row of owner s at position pos of its block. */
static size_t owner_chunk_of(const dcp_rec_t *rec, int s, uint64_t pos)
{
    const client_dc_t *dc = rec->op->dc;
    return dc->source[2 * (dc->base[s] + pos) + 1] / rec->rpc;
}

/* A combine's next piece for owner s: its partials of one owner chunk.  0 when none is left
   or no credit. */
static int send_partials_piece(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, int s)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const uint64_t total = dc->recvd[s], pos = rec->cursor[s];
    if (!rec->ok || pos >= total || dcp->credits[s] == 0)
        return 0; /* a failed verdict moves no partials */
    size_t c = owner_chunk_of(rec, s, pos);
    uint64_t end = pos + 1;
    while (end < total && owner_chunk_of(rec, s, end) == c)
        end++;
    struct inc_wire_hdr f = {.root = (uint32_t)s,
                             .offset = pos,
                             .total = total,
                             .length = (end - pos) * op->row_bytes,
                             .chunk = (uint32_t)c};
    rec->cursor[s] = end;
    dcp->credits[s]--;
    send_piece(comm, op, WIRE_MSG_PEER_PARTIALS, s, &f,
               op_send_at(op, (size_t)(dc->base[s] + pos) * op->row_bytes), op->send_memh, NULL);
    return 1;
}

/* Has the combine pieces left for owner s? */
static int partials_left(const dcp_rec_t *rec, int s)
{
    return rec->decided && rec->ok && rec->cursor[s] < rec->op->dc->recvd[s];
}

/* ------------------------------------------------------------------------ */
/* rows in                                                                   */

static void rec_check_done(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec);

static void credit_back(incmoe_comm_t *comm, coll_op_t *op, int peer)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_PEER_CREDIT);
    if (ctx == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_CREDIT");
        return;
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.length = 1;
    ctx->to = peer;
    client_send_ep(comm, client_mesh_ep(comm, peer), ctx, NULL, 0, NULL, &op->sent);
}

/* Every piece of owner chunk c landed: reduce each row over its other contributors in
   ascending rank order, then this rank's own partial (dc_shared.c); credits back. */
static void reduce_chunk(incmoe_comm_t *comm, dcp_rec_t *rec, size_t c)
{
    coll_op_t *op = rec->op;
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks, me = comm->rank;
    const uint32_t *cnt = &rec->cnt[c * (size_t)n];
    size_t slot[INCMOE_MAX_RANKS], at = 0;
    for (int d = 0; d < n; d++) {
        slot[d] = at; /* where d's piece starts in the stage, then its next partial */
        at += cnt[d];
    }
    const void *srcs[INCMOE_MAX_RANKS];
    size_t end = (c + 1) * rec->rpc < dc->nrows ? (c + 1) * rec->rpc : dc->nrows;
    uint64_t rows = 0;
    char *stage = rec->chunks[c].stage;
    for (size_t i = c * rec->rpc; i < end; i++) {
        int k = 0;
        for (int d = 0; d < n; d++)
            if (d != me && client_dc_in_set(dc, i, d))
                srcs[k++] = stage + slot[d]++ * op->row_bytes;
        if (k == 0)
            continue; /* written at the plan (dc_shared.c) */
        char *dst = op_recv_at(op, i * op->row_bytes);
        inc_reduce_ordered(dst, srcs, k, op->row_bytes / incmoe_dtype_size(op->dtype), op->dtype,
                           op->redop);
        client_dc_combine_row(comm, op, i, dst);
        rows++;
    }
    free(stage);
    rec->chunks[c].stage = NULL;
    op->recv_done += rows;
    for (int d = 0; d < n; d++)
        if (cnt[d] > 0)
            credit_back(comm, op, d);
}

static void piece_landed(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, size_t c)
{
    const int n = comm->nranks;
    uint32_t pieces = 0;
    for (int d = 0; d < n; d++)
        pieces += rec->cnt[c * (size_t)n + (size_t)d] > 0;
    if (++rec->chunks[c].landed == pieces)
        reduce_chunk(comm, rec, c);
    rec_check_done(comm, dcp, rec);
}

static void landing_unlink(dcp_recv_t *rr)
{
    if (rr->prev != NULL)
        rr->prev->next = rr->next;
    else if (rr->dcp != NULL)
        rr->dcp->landing = rr->next;
    if (rr->next != NULL)
        rr->next->prev = rr->prev;
}

static void recv_landed_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    dcp_recv_t *rr = user_data;
    incmoe_comm_t *comm = rr->comm;
    client_dc_peer_t *dcp = rr->dcp;
    if (request != NULL)
        ucp_request_free(request);
    if (dcp == NULL || comm->freeing) { /* closed: its records are gone */
        free(rr);
        return;
    }
    landing_unlink(rr);
    if (status != UCS_OK) {
        dcp_fail(comm, inc_ucx_status(status), "%s from rank %d: the receive failed: %s",
                 inc_wire_msg_name(rr->hdr.msg), rr->from, ucs_status_string(status));
    } else if (rr->plan) {
        plan_arrived(comm, dcp, rr->rec, rr->from, length);
    } else if (rr->hdr.msg == WIRE_MSG_PEER_ROWS) {
        rr->rec->op->recv_done += rr->rows;
        rec_check_done(comm, dcp, rr->rec);
    } else {
        piece_landed(comm, dcp, rr->rec, rr->chunk);
    }
    free(rr);
}

/* Land a payload at dst: copied now (eager), or received there (rendezvous; rr says what it
   is, and is freed by the callback).  1 when it landed now. */
static int land(incmoe_comm_t *comm, void *data, size_t length, int rndv, char *dst, ucp_mem_h memh,
                dcp_recv_t *rr)
{
    if (!rndv) {
        memcpy(dst, data, length);
        free(rr);
        return 1;
    }
    client_dc_peer_t *dcp = rr->dcp;
    rr->next = dcp->landing;
    if (dcp->landing != NULL)
        dcp->landing->prev = rr;
    dcp->landing = rr;
    inc_ucx_am_recv_data(comm->node.worker, data, dst, length, memh, recv_landed_cb, rr);
    return 0;
}

static dcp_recv_t *recv_ctx(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, int from,
                            const struct inc_wire_hdr *h)
{
    dcp_recv_t *rr = calloc(1, sizeof(*rr));
    if (rr == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a receive");
        return NULL;
    }
    rr->comm = comm;
    rr->dcp = dcp;
    rr->rec = rec;
    rr->from = from;
    rr->hdr = *h;
    return rr;
}

static ucs_status_t on_rows(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, int from,
                            const struct inc_wire_hdr *h, void *data, size_t length, int rndv)
{
    coll_op_t *op = rec->op;
    uint64_t n = length / op->row_bytes;
    char *dst = NULL;
    if (length % op->row_bytes == 0 && h->offset == rec->next_in[from] &&
        h->total == op->dc->recvd[from] && n <= rec->rpc)
        dst = client_dc_recv_rows(op, from, h->offset, n);
    if (dst == NULL)
        return dcp_refuse(comm, h, from, "rows this rank's plan does not expect there");
    rec->next_in[from] += n;
    dcp_recv_t *rr = recv_ctx(comm, dcp, rec, from, h);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    rr->rows = n;
    if (!land(comm, data, length, rndv, dst, op->recv_memh, rr))
        return UCS_INPROGRESS;
    op->recv_done += n;
    rec_check_done(comm, dcp, rec);
    return UCS_OK;
}

static ucs_status_t on_partials(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec,
                                int from, const struct inc_wire_hdr *h, void *data, size_t length,
                                int rndv)
{
    coll_op_t *op = rec->op;
    const int n = comm->nranks;
    size_t c = h->chunk;
    const uint32_t *cnt = c < rec->nchunks ? &rec->cnt[c * (size_t)n] : NULL;
    if (cnt == NULL || cnt[from] == 0 || h->offset != rec->next_in[from] ||
        h->total != op->dc->sent[from] || length != (size_t)cnt[from] * op->row_bytes ||
        h->dtype != op->dtype || h->redop != op->redop)
        return dcp_refuse(comm, h, from, "partials this rank's plan does not expect there");
    dcp_chunk_t *ch = &rec->chunks[c];
    size_t at = 0, all = 0;
    for (int d = 0; d < n; d++) {
        at += d < from ? cnt[d] : 0;
        all += cnt[d];
    }
    if (ch->stage == NULL && (ch->stage = malloc(all * op->row_bytes)) == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "combine epoch %llu: no memory to stage a chunk",
                 (unsigned long long)op->epoch);
        return UCS_ERR_NO_MEMORY;
    }
    rec->next_in[from] += cnt[from];
    dcp_recv_t *rr = recv_ctx(comm, dcp, rec, from, h);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    rr->chunk = c;
    if (!land(comm, data, length, rndv, ch->stage + at * op->row_bytes, NULL, rr))
        return UCS_INPROGRESS;
    piece_landed(comm, dcp, rec, c);
    return UCS_OK;
}

static ucs_status_t on_plan(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec, int from,
                            const struct inc_wire_hdr *h, void *data, size_t length, int rndv)
{
    if (rec->plan[from] != NULL)
        return dcp_refuse(comm, h, from, "a second plan");
    char *plan = malloc(length);
    if (plan == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a PEER_PLAN");
        return UCS_ERR_NO_MEMORY;
    }
    rec->plan[from] = plan; /* from here the record's, landed or not: a second one is refused */
    dcp_recv_t *rr = recv_ctx(comm, dcp, rec, from, h);
    if (rr == NULL)
        return UCS_ERR_NO_MEMORY;
    rr->plan = 1;
    if (!land(comm, data, length, rndv, plan, NULL, rr))
        return UCS_INPROGRESS;
    plan_arrived(comm, dcp, rec, from, length);
    return UCS_OK;
}

/* ------------------------------------------------------------------------ */
/* the algorithm's entries                                                   */

/* Keep a message until its collective started or decided. */
static ucs_status_t keep_early(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                               const struct inc_wire_hdr *h, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    client_kept_t *k = client_kept_new(h, data, length, param);
    if (k == NULL) {
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for an early %s",
                 inc_wire_msg_name(h->msg));
        return UCS_ERR_NO_MEMORY;
    }
    k->hdr.rank = (uint32_t)from; /* the rank the mesh bound its endpoint to */
    client_kept_t **tail = &dcp->early;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = k;
    return k->desc != NULL ? UCS_INPROGRESS : UCS_OK;
}

ucs_status_t client_dc_peer_on_message(incmoe_comm_t *comm, client_dc_peer_t *dcp, int from,
                                       const struct inc_wire_hdr *h, void *data, size_t length,
                                       const ucp_am_recv_param_t *param)
{
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    dcp_init_credits(comm, dcp);
    if (h->msg == WIRE_MSG_PEER_CREDIT) {
        if (h->length > dcp->window - dcp->credits[from])
            return dcp_refuse(comm, h, from, "more credits than this rank used");
        dcp->credits[from] += (uint32_t)h->length;
        return UCS_OK;
    }
    dcp_rec_t *rec = rec_find(dcp, h->stream, h->epoch);
    if (rec == NULL) {
        const uint64_t done = client_stream_completed(&comm->streams[h->stream]);
        if (h->epoch <= done || client_find_op(comm, h->stream, h->epoch) != NULL)
            return dcp_refuse(comm, h, from, "the collective is over here");
        if (h->epoch > done + INCMOE_WIRE_OPEN_EPOCHS)
            return dcp_refuse(comm, h, from, "an epoch past the window");
        return keep_early(comm, dcp, from, h, data, length, param);
    }
    if (h->msg == WIRE_MSG_PEER_PLAN)
        return on_plan(comm, dcp, rec, from, h, data, length, rndv);
    if (!rec->decided)
        return keep_early(comm, dcp, from, h, data, length, param);
    if (!rec->ok)
        return dcp_refuse(comm, h, from, "rows after a failed verdict");
    if (h->msg == WIRE_MSG_PEER_ROWS)
        return on_rows(comm, dcp, rec, from, h, data, length, rndv);
    return on_partials(comm, dcp, rec, from, h, data, length, rndv);
}

/* The kept messages of (stream, epoch) once more, in their order. */
static void replay_early(incmoe_comm_t *comm, client_dc_peer_t *dcp, unsigned stream,
                         uint64_t epoch)
{
    client_kept_t *mine = NULL, **mine_tail = &mine, **pp = &dcp->early;
    while (*pp != NULL) {
        client_kept_t *k = *pp;
        if (k->hdr.stream == stream && k->hdr.epoch == epoch) {
            *pp = k->next;
            k->next = NULL;
            *mine_tail = k;
            mine_tail = &k->next;
        } else {
            pp = &k->next;
        }
    }
    while (mine != NULL) {
        client_kept_t *k = mine;
        mine = k->next;
        /* keep_early wrote the sender's bound rank into the header. */
        ucp_am_recv_param_t param = {.recv_attr = k->desc != NULL ? UCP_AM_RECV_ATTR_FLAG_RNDV : 0};
        ucs_status_t st =
            atomic_load(&comm->error) != 0
                ? UCS_ERR_CANCELED
                : client_dc_peer_on_message(comm, dcp, (int)k->hdr.rank, &k->hdr,
                                            k->desc ? k->desc : k->copy, k->length, &param);
        if (st == UCS_INPROGRESS)
            k->desc = NULL; /* a receive or the early list holds it now */
        client_kept_free(comm, k);
    }
}

static void rec_check_done(incmoe_comm_t *comm, client_dc_peer_t *dcp, dcp_rec_t *rec)
{
    coll_op_t *op = rec->op;
    if (!rec->decided)
        return;
    if (rec->ok) {
        const int n = comm->nranks;
        for (int r = 0; r < n; r++)
            if (r != comm->rank && (is_dispatch(op) ? rec->sent[r] < op->dc->sent[r]
                                                    : rec->cursor[r] < op->dc->recvd[r]))
                return;
        if (op->recv_done != op->recv_expected)
            return;
    }
    for (dcp_rec_t **pp = &dcp->recs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == rec) {
            *pp = rec->next;
            break;
        }
    }
    rec_free(rec, comm->nranks);
    op->holds--;
    client_op_progressed(comm, op); /* may free op */
}

void client_dc_peer_start(incmoe_comm_t *comm, client_dc_peer_t *dcp, coll_op_t *op)
{
    const int n = comm->nranks;
    dcp_init_credits(comm, dcp);
    op->all_issued = 1; /* the record holds op until its sends are issued */
    if (client_mesh_open_all(comm) != INCMOE_OK)
        return;
    dcp_rec_t *rec = calloc(1, sizeof(*rec));
    if (rec != NULL) {
        rec->plan = calloc((size_t)n, sizeof(char *));
        rec->cursor = calloc((size_t)n, sizeof(uint64_t));
        rec->sent = calloc((size_t)n, sizeof(uint64_t));
        rec->next_in = calloc((size_t)n, sizeof(uint64_t));
    }
    if (rec == NULL || rec->plan == NULL || rec->cursor == NULL || rec->sent == NULL ||
        rec->next_in == NULL) {
        if (rec != NULL)
            rec_free(rec, n);
        dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s",
                 inc_wire_stream_name(op->stream));
        return;
    }
    rec->op = op;
    /* A refusal has no rows, and rows of 0 bytes: it moves none. */
    const size_t rb = op->row_bytes > 0 ? op->row_bytes : 1;
    rec->rpc = comm->chunk_size / rb > 0 ? comm->chunk_size / rb : 1;
    op->holds++;
    dcp_rec_t **tail = &dcp->recs;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = rec;
    for (int k = 1; k < n; k++)
        send_plan(comm, op, (comm->rank + k) % n);
    replay_early(comm, dcp, op->stream, op->epoch);
    client_dc_peer_progress(comm, dcp);
}

void client_dc_peer_progress(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    const int n = comm->nranks;
    /* An owner takes a contributor's pieces in (epoch, chunk) order: a later combine sends it
       nothing while an earlier one still has pieces for it. */
    uint8_t blocked[INCMOE_MAX_RANKS] = {0};
    dcp_rec_t *rec = dcp->recs;
    while (rec != NULL && atomic_load(&comm->error) == 0) {
        dcp_rec_t *next = rec->next;
        if (rec->decided && rec->ok && is_dispatch(rec->op)) {
            pump_dispatch(comm, dcp, rec);
        } else if (rec->op->stream == INCMOE_STREAM_COMBINE) {
            for (int k = 1; k < n; k++) {
                int s = (comm->rank + k) % n;
                if (blocked[s] || !rec->decided)
                    blocked[s] = 1; /* an undecided combine may still have pieces for s */
                else if (rec->ok)   /* a failed verdict: nothing moves */
                    while (send_partials_piece(comm, dcp, rec, s))
                        ;
                blocked[s] |= partials_left(rec, s);
            }
        }
        rec_check_done(comm, dcp, rec); /* may free rec */
        rec = next;
    }
}

void client_dc_peer_close(incmoe_comm_t *comm, client_dc_peer_t *dcp)
{
    if (dcp == NULL)
        return;
    while (dcp->recs != NULL) {
        dcp_rec_t *rec = dcp->recs;
        dcp->recs = rec->next;
        rec_free(rec, comm->nranks);
    }
    while (dcp->early != NULL) {
        client_kept_t *k = dcp->early;
        dcp->early = k->next;
        client_kept_free(comm, k);
    }
    for (dcp_recv_t *rr = dcp->landing; rr != NULL; rr = rr->next)
        rr->dcp = NULL; /* its callback, when the worker goes, only frees it */
    free(dcp->credits);
    free(dcp);
}
