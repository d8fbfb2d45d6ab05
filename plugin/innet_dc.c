/*
 * innet_dc.c - dispatch and combine through the switch (base/wire.h,
 * "Dispatch and combine").  A started collective sends its POST (its plan
 * fields) and waits for the PLAN, the verdict every rank shares; only after an
 * OK plan does its DATA go, in (chunk, root) order within the stream's
 * credits.  A collective whose whole contribution is small goes as one SMALL
 * instead (POST and every DATA), so it takes no round trip.  The switch's FWD
 * are checked against the plan and land in place (dc_shared.c places dispatched rows
 * and applies the owner's own partial last).
 *
 * DATA: a dispatch chunk is its rows' sets then its network rows (those whose
 * set holds another rank), copied together; a combine sends its set chunks
 * from the record and its partials straight from the registered buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "dc_shared.h"
#include "innet.h"
#include "notify.h"
#include "send.h"

#include "base/log.h"
#include "base/text.h"

/* One DATA of this rank (or a piece of its SMALL). */
typedef struct {
    struct inc_wire_dc_piece h;
    const char *at; /* its bytes (a combine's), or NULL: built from the rows (a dispatch's) */
    ucp_mem_h memh; /* at's registration, if any */
} dc_piece_t;

/* Where the next piece is looked for: chunk, then root. */
typedef struct {
    uint64_t chunk;
    int root;
} dc_cursor_t;

static uint64_t rows_per_chunk(const incmoe_comm_t *comm, const coll_op_t *op)
{
    return inc_wire_dc_rows_per_chunk(op->row_bytes, comm->nranks, comm->chunk_size);
}

static uint64_t nchunks(uint64_t rows, uint64_t per)
{
    return (rows + per - 1) / per;
}

/* The first position in the block of s whose source row is at least row. */
static uint64_t block_lower_bound(const client_dc_t *dc, int s, uint64_t row)
{
    uint64_t lo = 0, hi = dc->recvd[s];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (dc->source[2 * (dc->base[s] + mid) + 1] < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ------------------------------------------------------------------------ */
/* pieces                                                                    */

/* A dispatch's chunk c. */
static void dispatch_piece(const incmoe_comm_t *comm, const coll_op_t *op, uint64_t c,
                           dc_piece_t *p)
{
    const client_dc_t *dc = op->dc;
    const uint64_t per = rows_per_chunk(comm, op), first = c * per;
    const uint64_t k = dc->nrows - first < per ? dc->nrows - first : per;
    uint64_t net = 0;
    for (uint64_t j = 0; j < k; j++)
        net += (uint64_t)client_dc_goes_out(dc, (size_t)(first + j), comm->rank);
    *p = (dc_piece_t){.h = {.root = (uint32_t)comm->rank,
                            .chunk = (uint32_t)c,
                            .offset = first,
                            .total = dc->nrows,
                            .length = 8 * dc->words * k + net * op->row_bytes}};
}

/* Write a dispatch piece: the chunk's sets, then its network rows. */
static void dispatch_fill(const incmoe_comm_t *comm, const coll_op_t *op, const dc_piece_t *p,
                          char *dst)
{
    const client_dc_t *dc = op->dc;
    const uint64_t per = rows_per_chunk(comm, op), first = p->h.offset;
    const uint64_t k = dc->nrows - first < per ? dc->nrows - first : per;
    memcpy(dst, dc->sets + first * dc->words, (size_t)(8 * dc->words * k));
    dst += 8 * dc->words * k;
    for (uint64_t j = 0; j < k; j++) {
        size_t row = (size_t)(first + j);
        if (!client_dc_goes_out(dc, row, comm->rank))
            continue;
        memcpy(dst, op_send_at(op, row * op->row_bytes), op->row_bytes);
        dst += op->row_bytes;
    }
}

/* The last chunk of any owner this rank gives a combine something for. */
static uint64_t combine_last_chunk(const incmoe_comm_t *comm, const coll_op_t *op)
{
    const client_dc_t *dc = op->dc;
    const uint64_t per = rows_per_chunk(comm, op);
    uint64_t last = nchunks(dc->nrows, per);
    for (int s = 0; s < comm->nranks; s++)
        if (s != comm->rank && dc->recvd[s] > 0) {
            uint64_t row = dc->source[2 * (dc->base[s] + dc->recvd[s] - 1) + 1];
            if (row / per + 1 > last)
                last = row / per + 1;
        }
    return last; /* one past */
}

/* A combine's piece at (chunk, root), if it has one: its set chunk (root == this rank), or its
   partials of the rows of root's chunk it holds. */
static int combine_piece(const incmoe_comm_t *comm, const coll_op_t *op, uint64_t c, int s,
                         dc_piece_t *p)
{
    const client_dc_t *dc = op->dc;
    const uint64_t per = rows_per_chunk(comm, op), first = c * per;
    if (s == comm->rank) {
        if (first >= dc->nrows)
            return 0;
        const uint64_t k = dc->nrows - first < per ? dc->nrows - first : per;
        *p = (dc_piece_t){.h = {.root = (uint32_t)s,
                                .chunk = (uint32_t)c,
                                .offset = first,
                                .total = dc->nrows,
                                .length = 8 * dc->words * k},
                          .at = (const char *)(dc->sets + first * dc->words)};
        return 1;
    }
    uint64_t lo = block_lower_bound(dc, s, first), hi = block_lower_bound(dc, s, first + per);
    if (hi == lo)
        return 0;
    *p = (dc_piece_t){.h = {.root = (uint32_t)s,
                            .chunk = (uint32_t)c,
                            .offset = first,
                            .total = dc->recvd[s],
                            .length = (hi - lo) * op->row_bytes},
                      .at = op_send_at(op, (size_t)(dc->base[s] + lo) * op->row_bytes),
                      .memh = op->send_memh};
    return 1;
}

/* The first chunk at or after c that holds a combine piece of any root (this rank's sets, or
   partials of rows received from another), or last.  The received rows of a root may be few
   and far apart in its rows, so the chunks between them are skipped, not visited: the cost of
   a combine's pieces follows the rows it received, not the source row numbers. */
static uint64_t next_busy_chunk(const incmoe_comm_t *comm, const coll_op_t *op, uint64_t c,
                                uint64_t last)
{
    const client_dc_t *dc = op->dc;
    const uint64_t per = rows_per_chunk(comm, op);
    uint64_t best = c < nchunks(dc->nrows, per) ? c : last;
    for (int s = 0; s < comm->nranks && best > c; s++) {
        if (s == comm->rank || dc->recvd[s] == 0)
            continue;
        const uint64_t lo = block_lower_bound(dc, s, c * per);
        if (lo < dc->recvd[s]) {
            const uint64_t chunk = dc->source[2 * (dc->base[s] + lo) + 1] / per;
            if (chunk < best)
                best = chunk;
        }
    }
    return best;
}

/* The piece at the cursor or after it, the cursor moved past it; 0 when none is left. */
static int next_piece(const incmoe_comm_t *comm, const coll_op_t *op, dc_cursor_t *cur,
                      dc_piece_t *p)
{
    if (op->stream == INCMOE_STREAM_DISPATCH) {
        if (cur->chunk >= nchunks(op->dc->nrows, rows_per_chunk(comm, op)))
            return 0;
        dispatch_piece(comm, op, cur->chunk++, p);
        return 1;
    }
    const uint64_t last = combine_last_chunk(comm, op);
    while (cur->chunk < last) {
        while (cur->root < comm->nranks)
            if (combine_piece(comm, op, cur->chunk, cur->root++, p))
                return 1;
        cur->chunk = next_busy_chunk(comm, op, cur->chunk + 1, last);
        cur->root = 0;
    }
    return 0;
}

static void piece_fill(const incmoe_comm_t *comm, const coll_op_t *op, const dc_piece_t *p,
                       char *dst)
{
    if (p->at != NULL)
        memcpy(dst, p->at, (size_t)p->h.length);
    else
        dispatch_fill(comm, op, p, dst);
}

/* ------------------------------------------------------------------------ */
/* POST, SMALL, DATA                                                         */

/* Bytes of the plan fields: a refusal carries its reason (dc_post.c made it at most
   INCMOE_REFUSAL_MAX - 1 bytes, never empty). */
static uint64_t post_length(const incmoe_comm_t *comm, const coll_op_t *op)
{
    unsigned refused = op->refused != NULL ? (unsigned)strlen(op->refused) : 0;
    return inc_wire_dc_post_length(op->stream, comm->nranks, refused);
}

/* The plan fields (struct inc_wire_dc_post, the counts, a refusal's reason) into dst; their
   length. */
static size_t write_post(const incmoe_comm_t *comm, const coll_op_t *op, char *dst)
{
    const client_dc_t *dc = op->dc;
    const int n = comm->nranks, combine = op->stream == INCMOE_STREAM_COMBINE;
    struct inc_wire_dc_post p = {
        .rows = dc->nrows,
        .row_bytes = op->row_bytes,
        .capacity = combine ? 0 : op->capacity,
        .dispatch_epoch = combine ? dc->epoch : 0,
        .row_count = combine ? op->row_bytes / incmoe_dtype_size(op->dtype) : 0,
        .nranks = (uint32_t)n,
        .dtype = (uint8_t)(combine ? op->dtype : 0),
        .redop = (uint8_t)(combine ? op->redop : 0),
        .refused = (uint16_t)(op->refused != NULL ? strlen(op->refused) : 0),
    };
    memcpy(dst, &p, sizeof(p));
    memcpy(dst + sizeof(p), dc->sent, 4 * (size_t)n);
    if (combine)
        memcpy(dst + sizeof(p) + 4 * (size_t)n, dc->recvd, 4 * (size_t)n);
    if (p.refused > 0)
        memcpy(dst + sizeof(p) + 4 * (size_t)n * (combine ? 2 : 1), op->refused, p.refused);
    return (size_t)post_length(comm, op);
}

/* Bytes of the SMALL that would carry the whole contribution; once its pieces pass a chunk
   (too many for a SMALL) the count stops there, so deciding costs at most a chunk's pieces. */
static uint64_t small_length(const incmoe_comm_t *comm, const coll_op_t *op)
{
    const uint64_t fields = post_length(comm, op);
    uint64_t len = fields;
    dc_cursor_t cur = {0, 0};
    dc_piece_t p;
    while (len - fields <= comm->chunk_size && next_piece(comm, op, &cur, &p))
        len += inc_wire_dc_piece_length(p.h.length);
    return len;
}

/* POST or SMALL: the plan fields, and for a SMALL every piece.  0: out of memory. */
static int send_post(incmoe_comm_t *comm, coll_op_t *op)
{
    const uint64_t len = op->small ? small_length(comm, op) : post_length(comm, op);
    send_ctx_t *ctx = client_ctx(comm, op->small ? WIRE_MSG_SMALL : WIRE_MSG_POST);
    char *buf = ctx != NULL ? calloc(1, (size_t)len) : NULL;
    if (buf == NULL) {
        free(ctx);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory to post a %s",
                    inc_wire_stream_name(op->stream));
        return 0;
    }
    size_t at = write_post(comm, op, buf);
    dc_cursor_t cur = {0, 0};
    dc_piece_t p;
    while (op->small && next_piece(comm, op, &cur, &p)) {
        memcpy(buf + at, &p.h, sizeof(p.h));
        piece_fill(comm, op, &p, buf + at + sizeof(p.h));
        at += (size_t)inc_wire_dc_piece_length(p.h.length);
    }
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.total = op->dc->nrows;
    ctx->hdr.sig = op->sig;
    ctx->hdr.length = len;
    ctx->payload_owned = buf;
    ctx->eager = !op->small; /* the switch takes a POST eager only */
    client_send(comm, ctx, buf, (size_t)len, NULL, &op->sent);
    return 1;
}

/* One DATA; 0: out of memory. */
static int send_piece(incmoe_comm_t *comm, coll_op_t *op, const dc_piece_t *p)
{
    send_ctx_t *ctx = client_ctx(comm, WIRE_MSG_DATA);
    char *built = ctx != NULL && p->at == NULL ? malloc((size_t)p->h.length) : NULL;
    if (ctx == NULL || (p->at == NULL && built == NULL)) {
        free(ctx);
        client_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a %s DATA message",
                    inc_wire_stream_name(op->stream));
        return 0;
    }
    if (built != NULL)
        dispatch_fill(comm, op, p, built);
    ctx->hdr.stream = (uint8_t)op->stream;
    ctx->hdr.epoch = op->epoch;
    ctx->hdr.root = p->h.root;
    ctx->hdr.chunk = p->h.chunk;
    ctx->hdr.offset = p->h.offset;
    ctx->hdr.total = p->h.total;
    ctx->hdr.length = p->h.length;
    ctx->hdr.sig = op->sig;
    if (op->stream == INCMOE_STREAM_COMBINE) {
        ctx->hdr.dtype = (uint8_t)op->dtype;
        ctx->hdr.redop = (uint8_t)op->redop;
    }
    ctx->payload_owned = built;
    client_send(comm, ctx, built != NULL ? built : p->at, (size_t)p->h.length,
                built != NULL ? NULL : p->memh, &op->sent);
    return 1;
}

incmoe_status_t innet_dc_check(incmoe_comm_t *comm, const coll_op_t *op, char *why, size_t why_len)
{
    const uint64_t sets = 8 * (uint64_t)INCMOE_SET_WORDS(comm->nranks);
    if (op->row_bytes + sets <= comm->chunk_size)
        return INCMOE_OK;
    snprintf(why, why_len,
             "a row of %zu bytes and its %llu-byte set exceed the switch's %llu-byte "
             "chunk",
             op->row_bytes, (unsigned long long)sets, (unsigned long long)comm->chunk_size);
    return INCMOE_ERR_INVALID_ARG;
}

void innet_dc_start(incmoe_comm_t *comm, coll_op_t *op)
{
    op->small =
        inc_wire_dc_is_small(small_length(comm, op) - post_length(comm, op), comm->chunk_size);
    op->next_chunk = 0;
    op->next_root = 0;
}

int innet_dc_pump(incmoe_comm_t *comm, coll_op_t *op, uint32_t *credits)
{
    if (!op->dc_posted) {
        if (*credits == 0)
            return 1;
        if (!send_post(comm, op))
            return 0;
        (*credits)--;
        op->dc_posted = 1;
        if (op->small)
            op->all_issued = 1; /* every piece went with it */
    }
    if (op->all_issued || !op->planned)
        return 1; /* DATA goes only after an OK plan */
    for (;;) {
        /* Look for the next piece even without a credit: with none left it is all issued. */
        dc_cursor_t cur = {op->next_chunk, op->next_root};
        dc_piece_t p;
        if (op->status != INCMOE_OK || !next_piece(comm, op, &cur, &p)) {
            op->all_issued = 1;
            return 1;
        }
        if (*credits == 0)
            return 1;
        if (!send_piece(comm, op, &p))
            return 0;
        (*credits)--;
        op->next_chunk = cur.chunk;
        op->next_root = cur.root;
    }
}

/* ------------------------------------------------------------------------ */
/* PLAN                                                                      */

static ucs_status_t on_plan(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                            const char *data, size_t length)
{
    innet_t *in = comm->algo;
    const int n = comm->nranks;
    const size_t want = sizeof(struct inc_wire_dc_plan) +
                        (op->stream == INCMOE_STREAM_DISPATCH ? 4 * (size_t)n : 0);
    struct inc_wire_dc_plan plan;
    if (length != want) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s epoch %llu: a PLAN of %zu bytes, not %zu",
                    inc_wire_stream_name(op->stream), (unsigned long long)op->epoch, length, want);
        return UCS_ERR_INVALID_PARAM;
    }
    memcpy(&plan, data, sizeof(plan));
    if (plan.nranks != (uint32_t)n || plan.status > 0 || plan.status < INT16_MIN ||
        (plan.status != INCMOE_OK && plan.rank >= (uint32_t)n)) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s epoch %llu: a PLAN for %u ranks, status %d",
                    inc_wire_stream_name(op->stream), (unsigned long long)op->epoch, plan.nranks,
                    plan.status);
        return UCS_ERR_INVALID_PARAM;
    }
    if (!op->small && in->credits[op->stream] >= comm->credits) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "switch returned a %s credit too many",
                    inc_wire_stream_name(op->stream));
        return UCS_ERR_INVALID_PARAM;
    }
    if (!op->small)
        in->credits[op->stream]++; /* its POST's */
    inc_dc_verdict_t v = {.status = (incmoe_status_t)plan.status, .rank = (int)plan.rank};
    /* The switch relays a reason it made: printable and bounded before anyone reads it. */
    inc_text_sanitize(v.reason, sizeof(v.reason), plan.reason,
                      strnlen(plan.reason, sizeof(plan.reason)));
    if (v.status == INCMOE_OK)
        v.rank = -1;
    if (op->stream == INCMOE_STREAM_DISPATCH) {
        uint32_t col[INCMOE_MAX_RANKS];
        memcpy(col, data + sizeof(plan), 4 * (size_t)n);
        if (client_dc_plan_dispatch(comm, op, col, &v) != INCMOE_OK)
            return UCS_ERR_INVALID_PARAM;
    } else {
        client_dc_plan_combine(comm, op, &v);
    }
    if (v.status != INCMOE_OK)
        op->all_issued = 1;
    client_op_progressed(comm, op);
    return UCS_OK;
}

/* ------------------------------------------------------------------------ */
/* FWD                                                                       */

/* Rows of the owner's chunk that another rank contributed to (the switch's result rows). */
static uint64_t combine_rows_with_others(const incmoe_comm_t *comm, const coll_op_t *op,
                                         uint64_t first, uint64_t k)
{
    uint64_t rows = 0;
    for (uint64_t j = 0; j < k; j++)
        rows += (uint64_t)client_dc_goes_out(op->dc, (size_t)(first + j), comm->rank);
    return rows;
}

/* How many rows a FWD brings, checked against the plan; 0 (and the communicator failed) if
   it does not fit. */
static uint64_t fwd_rows(incmoe_comm_t *comm, const coll_op_t *op, const struct inc_wire_hdr *h)
{
    const client_dc_t *dc = op->dc;
    const int me = comm->rank;
    uint64_t rows = 0;
    int ok = h->root < (uint32_t)comm->nranks;
    if (ok && op->stream == INCMOE_STREAM_DISPATCH) {
        rows = h->length / (4 + op->row_bytes);
        ok = (int)h->root != me && h->length % (4 + op->row_bytes) == 0 &&
             h->total == dc->recvd[h->root] &&
             client_dc_recv_rows((coll_op_t *)op, (int)h->root, h->offset, rows) != NULL;
    } else if (ok) {
        const uint64_t per = rows_per_chunk(comm, op), first = (uint64_t)h->chunk * per;
        ok = (int)h->root == me && h->offset == first && first < dc->nrows &&
             h->total == dc->nrows && h->dtype == op->dtype && h->redop == op->redop;
        if (ok) {
            uint64_t k = dc->nrows - first < per ? dc->nrows - first : per;
            rows = combine_rows_with_others(comm, op, first, k);
            ok = h->length == rows * op->row_bytes;
        }
    }
    if (ok && rows > 0 && op->recv_accepted + rows <= op->recv_expected)
        return rows;
    client_fail(comm, INCMOE_ERR_MISMATCH,
                "%s epoch %llu: a result of %llu bytes from rank %u (chunk %u, rows %llu of "
                "%llu) does not fit this rank's plan",
                inc_wire_stream_name(op->stream), (unsigned long long)op->epoch,
                (unsigned long long)h->length, h->root, h->chunk, (unsigned long long)h->offset,
                (unsigned long long)h->total);
    return 0;
}

/* Land a FWD's rows (checked by fwd_rows): dispatched rows at their place with their source
   rows; a combine's reduced rows, each with this rank's own partial applied last. */
static void fwd_land(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                     uint64_t rows, const char *data)
{
    if (op->stream == INCMOE_STREAM_DISPATCH) {
        uint32_t src[256];
        for (uint64_t done = 0; done < rows;) {
            uint64_t n = rows - done < 256 ? rows - done : 256;
            memcpy(src, data + 4 * done, (size_t)(4 * n));
            client_dc_set_sources(op, (int)h->root, h->offset + done, n, src);
            done += n;
        }
        memcpy(client_dc_recv_rows(op, (int)h->root, h->offset, rows), data + 4 * rows,
               (size_t)(rows * op->row_bytes));
    } else {
        const uint64_t per = rows_per_chunk(comm, op), first = (uint64_t)h->chunk * per;
        const uint64_t k = op->dc->nrows - first < per ? op->dc->nrows - first : per;
        const char *row = data;
        for (uint64_t j = 0; j < k; j++) {
            if (!client_dc_goes_out(op->dc, (size_t)(first + j), comm->rank))
                continue;
            client_dc_combine_row(comm, op, (size_t)(first + j), row);
            row += op->row_bytes;
        }
    }
    op->recv_done += rows;
    client_op_progressed(comm, op);
}

static ucs_status_t on_fwd(incmoe_comm_t *comm, coll_op_t *op, const struct inc_wire_hdr *h,
                           void *data, size_t length, const ucp_am_recv_param_t *param)
{
    if (!op->planned || op->status != INCMOE_OK) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s epoch %llu: a result before an OK plan",
                    inc_wire_stream_name(op->stream), (unsigned long long)op->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    uint64_t rows = fwd_rows(comm, op, h);
    if (rows == 0)
        return UCS_ERR_INVALID_PARAM;
    /* Counted now, not when it lands: a result still landing keeps the collective from
       retiring, and one beyond what is expected is refused above. */
    op->recv_accepted += rows;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        fwd_land(comm, op, h, rows, data);
        return UCS_OK;
    }
    return client_op_recv_rndv(comm, op, h, rows, data, length, fwd_land);
}

ucs_status_t innet_dc_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    coll_op_t *op = client_find_op(comm, h->stream, h->epoch);
    if (op == NULL || !op->started || !op->dc_posted ||
        (h->msg == WIRE_MSG_PLAN &&
         (op->planned || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)))) {
        client_fail(comm, INCMOE_ERR_PROTOCOL, "%s for %s epoch %llu, which awaits none",
                    inc_wire_msg_name(h->msg), inc_wire_stream_name(h->stream),
                    (unsigned long long)h->epoch);
        return UCS_ERR_INVALID_PARAM;
    }
    if (h->msg == WIRE_MSG_PLAN)
        return on_plan(comm, op, h, data, length);
    return on_fwd(comm, op, h, data, length, param);
}
