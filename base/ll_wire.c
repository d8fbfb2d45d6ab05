/* ll_wire.c - layout, parser and verdict of the low-latency payloads (see ll_wire.h). */
#include "ll_wire.h"

#include <stdio.h>

#include "dtype.h"

#define PAD8(x) (((x) + 7) & ~(uint64_t)7)

/* a + b * c into *out; 0 on overflow. */
static int add_mul(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    uint64_t p;
    if (__builtin_mul_overflow(b, c, &p) || __builtin_add_overflow(a, p, out))
        return 0;
    return 1;
}

int inc_wire_ll_layout(unsigned msg, unsigned stream, int nranks, const struct inc_wire_ll *ll,
                       uint64_t n, inc_wire_ll_layout_t *layout)
{
    memset(layout, 0, sizeof(*layout));
    uint64_t at = sizeof(struct inc_wire_ll);
    layout->reason = at;
    at += PAD8((uint64_t)ll->refused);
    if (ll->status != 0) {
        layout->length = at;
        return 0;
    }
    int dispatch = stream == INCMOE_STREAM_DISPATCH;
    if (msg == WIRE_MSG_LL) {
        layout->sets = at;
        if (!add_mul(at, ll->rows, 8 * (uint64_t)INCMOE_SET_WORDS(nranks), &at))
            return -1;
        if (!dispatch) {
            layout->recvd = at;
            at += PAD8(4 * (uint64_t)nranks);
        }
    } else if (dispatch) {
        layout->src_row = at;
        if (n > UINT64_MAX / 4 - 8)
            return -1;
        at += PAD8(4 * n);
    }
    layout->rows = at;
    if (!add_mul(at, n, ll->row_bytes, &layout->length))
        return -1;
    return 0;
}

#define FAIL(...) return inc_wire_reject(why, why_len, __VA_ARGS__)

static int all_zero(const char *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* The switch's verdict in an LL_FWD: a NUL-terminated reason and nothing else. */
static incmoe_status_t parse_verdict(const struct inc_wire_hdr *h, const char *p, uint64_t length,
                                     inc_wire_ll_view_t *v, char *why, size_t why_len, int nranks)
{
    if (h->status > 0)
        FAIL("LL_FWD with status %d", h->status);
    if (h->root >= (uint32_t)nranks)
        FAIL("LL_FWD verdict for rank %u of %d", h->root, nranks);
    if (length == 0 || length > INCMOE_WIRE_MAX_TEXT || p[length - 1] != '\0')
        FAIL("LL_FWD verdict of %llu bytes: not a NUL-terminated reason of at most %d",
             (unsigned long long)length, INCMOE_WIRE_MAX_TEXT);
    if (h->total != 0)
        FAIL("LL_FWD verdict says it carries %llu rows", (unsigned long long)h->total);
    v->verdict = (incmoe_status_t)h->status;
    v->reason = p;
    v->reason_len = strlen(p);
    v->sender = (int)h->root;
    return INCMOE_OK;
}

/* The head's own fields, for the stream. */
static incmoe_status_t check_head(const struct inc_wire_ll *ll, unsigned stream, int nranks,
                                  char *why, size_t why_len)
{
    if (ll->nranks != (uint32_t)nranks)
        FAIL("describes %u ranks in a job of %d", ll->nranks, nranks);
    if (ll->reserved != 0)
        FAIL("reserved field %u, not 0", ll->reserved);
    if (ll->status != 0 && ll->status != INCMOE_ERR_INVALID_ARG &&
        ll->status != INCMOE_ERR_NO_MEMORY)
        FAIL("refusal status %d (only %d or %d refuse)", ll->status, INCMOE_ERR_INVALID_ARG,
             INCMOE_ERR_NO_MEMORY);
    if (ll->refused > INCMOE_REFUSAL_MAX - 1)
        FAIL("refusal's reason of %u bytes, at most %d", ll->refused, INCMOE_REFUSAL_MAX - 1);
    if (ll->status != 0) {
        if (ll->rows != 0)
            FAIL("refused with %llu rows", (unsigned long long)ll->rows);
        return INCMOE_OK;
    }
    if (ll->refused != 0)
        FAIL("a reason of %u bytes without a refusal", ll->refused);
    if (ll->max_tokens == 0)
        FAIL("max_tokens 0");
    if (ll->rows > ll->max_tokens)
        FAIL("%llu rows, over max_tokens %llu", (unsigned long long)ll->rows,
             (unsigned long long)ll->max_tokens);
    if (ll->row_bytes == 0)
        FAIL("rows of 0 bytes");
    if (ll->layout > 1)
        FAIL("layout %u", ll->layout);
    if (ll->layout == 0 && (ll->topk != 0 || ll->layout_sig != 0))
        FAIL("by source with topk %u, layout signature %llu", ll->topk,
             (unsigned long long)ll->layout_sig);
    if (ll->layout == 1 && (ll->topk == 0 || ll->topk > INCMOE_MAX_TOPK))
        FAIL("by expert with topk %u", ll->topk);
    if (stream == INCMOE_STREAM_DISPATCH) {
        if (ll->dtype != 0 || ll->redop != 0 || ll->row_count != 0 || ll->dispatch_epoch != 0)
            FAIL("a dispatch with combine fields (dtype %u, op %u, row_count %llu, dispatch "
                 "epoch %llu)",
                 ll->dtype, ll->redop, (unsigned long long)ll->row_count,
                 (unsigned long long)ll->dispatch_epoch);
        if (ll->layout == 1 && ll->row_bytes <= 4 * (uint64_t)ll->topk)
            FAIL("rows of %llu bytes cannot hold %u expert ids", (unsigned long long)ll->row_bytes,
                 ll->topk);
        return INCMOE_OK;
    }
    if (ll->dtype >= INC_DTYPE_COUNT || ll->redop >= INC_REDOP_COUNT)
        FAIL("unknown datatype %u or operation %u", ll->dtype, ll->redop);
    if (ll->dispatch_epoch == 0)
        FAIL("a combine naming dispatch epoch 0");
    uint64_t esize = incmoe_dtype_size((incmoe_dtype_t)ll->dtype);
    if (ll->row_count == 0 || ll->row_count > ll->row_bytes / esize ||
        ll->row_count * esize != ll->row_bytes)
        FAIL("partials of %llu bytes are not %llu %s elements", (unsigned long long)ll->row_bytes,
             (unsigned long long)ll->row_count, incmoe_dtype_name((incmoe_dtype_t)ll->dtype));
    return INCMOE_OK;
}

/* An LL's sets (no bit at or above N) and network rows (a set holding a rank other than the
   sender s); a combine's recvd counts and the partials they add up to. */
static incmoe_status_t count_ll(inc_wire_ll_view_t *v, unsigned stream, int nranks, const char *p,
                                uint64_t length, uint64_t *n, char *why, size_t why_len)
{
    const struct inc_wire_ll *ll = &v->ll;
    uint64_t at = sizeof(*ll) + PAD8((uint64_t)ll->refused), W = (uint64_t)v->words;
    if ((length - at) / (8 * W) < ll->rows)
        FAIL("%llu sets of %llu words do not fit %llu bytes", (unsigned long long)ll->rows,
             (unsigned long long)W, (unsigned long long)length);
    v->sets = p + at;
    uint64_t network = 0;
    int s = v->sender, tail = nranks % 64;
    for (uint64_t j = 0; j < ll->rows; j++) {
        int other = 0;
        for (uint64_t w = 0; w < W; w++) {
            uint64_t word = inc_wire_ll_set_word(v, j, (int)w);
            if (w == W - 1 && tail != 0 && (word >> tail) != 0)
                FAIL("row %llu's set names a rank at or above %d", (unsigned long long)j, nranks);
            if ((int)w == s / 64)
                word &= ~((uint64_t)1 << (s % 64));
            other |= word != 0;
        }
        network += (uint64_t)other;
    }
    if (stream == INCMOE_STREAM_DISPATCH) {
        *n = network;
        return INCMOE_OK;
    }
    at += 8 * W * ll->rows;
    uint64_t recvd_len = PAD8(4 * (uint64_t)nranks);
    if (length - at < recvd_len)
        FAIL("no room for %d recvd counts", nranks);
    v->recvd = p + at;
    if (!all_zero(v->recvd + 4 * (uint64_t)nranks, recvd_len - 4 * (uint64_t)nranks))
        FAIL("recvd padding not zero");
    *n = 0;
    for (int r = 0; r < nranks; r++) {
        uint32_t c = inc_wire_ll_recvd(v, r);
        if (r == s && c != 0)
            FAIL("says it gives itself %u partials", c);
        if (c > ll->max_tokens)
            FAIL("gives rank %d %u partials, over max_tokens %llu", r, c,
                 (unsigned long long)ll->max_tokens);
        *n += c;
    }
    return INCMOE_OK;
}

/* src_row of an LL_FWD or PEER_LL of a dispatch: strictly ascending, below the source's rows. */
static incmoe_status_t check_src_rows(const inc_wire_ll_view_t *v, uint64_t pad_end, char *why,
                                      size_t why_len)
{
    for (uint64_t i = 0; i < v->n; i++) {
        uint32_t r = inc_wire_ll_src_row(v, i);
        if (r >= v->ll.rows)
            FAIL("source row %u of a source with %llu rows", r, (unsigned long long)v->ll.rows);
        if (i > 0 && r <= inc_wire_ll_src_row(v, i - 1))
            FAIL("source rows not ascending at %llu", (unsigned long long)i);
    }
    if (!all_zero(v->src_row + 4 * v->n, pad_end - 4 * v->n))
        FAIL("source row padding not zero");
    return INCMOE_OK;
}

incmoe_status_t inc_wire_ll_parse(const struct inc_wire_hdr *hdr, int nranks, const void *payload,
                                  uint64_t length, inc_wire_ll_view_t *v, char *why, size_t why_len)
{
    const char *p = (const char *)payload, *name = inc_wire_msg_name(hdr->msg);
    memset(v, 0, sizeof(*v));
    v->words = (int)INCMOE_SET_WORDS(nranks);
    if (nranks < 1 || nranks > INCMOE_MAX_RANKS)
        FAIL("%s in a job of %d ranks", name, nranks);
    if (hdr->msg == WIRE_MSG_LL_FWD && hdr->status != 0)
        return parse_verdict(hdr, p, length, v, why, why_len, nranks);
    if (length < sizeof(v->ll))
        FAIL("%s of %llu bytes: truncated head", name, (unsigned long long)length);
    memcpy(&v->ll, p, sizeof(v->ll));
    int dispatch = hdr->stream == INCMOE_STREAM_DISPATCH;
    const uint32_t sender = (hdr->msg == WIRE_MSG_LL || (hdr->msg == WIRE_MSG_PEER_LL && !dispatch))
                                ? hdr->rank
                                : hdr->root;
    if (sender >= (uint32_t)nranks)
        FAIL("%s for rank %u of %d", name, sender, nranks);
    v->sender = (int)sender;
    char head_why[160];
    if (check_head(&v->ll, hdr->stream, nranks, head_why, sizeof(head_why)) != INCMOE_OK)
        FAIL("%s of rank %d: %s", name, v->sender, head_why);
    const struct inc_wire_ll *ll = &v->ll;
    uint64_t reason_end = sizeof(*ll) + PAD8((uint64_t)ll->refused);
    if (length < reason_end)
        FAIL("%s of %llu bytes: truncated reason", name, (unsigned long long)length);
    if (ll->refused > 0) {
        v->reason = p + sizeof(*ll);
        v->reason_len = ll->refused;
    }
    if (!all_zero(p + sizeof(*ll) + ll->refused, PAD8((uint64_t)ll->refused) - ll->refused))
        FAIL("%s: reason padding not zero", name);
    if (hdr->msg == WIRE_MSG_LL_FWD && !dispatch && ll->status != 0)
        FAIL("LL_FWD of a combine carries a refusal");

    uint64_t n = hdr->total;
    if (hdr->msg == WIRE_MSG_LL) {
        if (hdr->total != ll->rows)
            FAIL("LL says %llu rows, its head %llu", (unsigned long long)hdr->total,
                 (unsigned long long)ll->rows);
        if (ll->status == 0) {
            char count_why[160];
            if (count_ll(v, hdr->stream, nranks, p, length, &n, count_why, sizeof(count_why)) !=
                INCMOE_OK)
                FAIL("LL of rank %d: %s", v->sender, count_why);
        }
    } else if (n > ll->rows && (dispatch || hdr->msg == WIRE_MSG_LL_FWD)) {
        FAIL("%s carries %llu rows of a rank with %llu", name, (unsigned long long)n,
             (unsigned long long)ll->rows);
    } else if (n > ll->max_tokens || (ll->status != 0 && n != 0)) {
        FAIL("%s carries %llu rows (max_tokens %llu, status %d)", name, (unsigned long long)n,
             (unsigned long long)ll->max_tokens, ll->status);
    }
    inc_wire_ll_layout_t at;
    if (inc_wire_ll_layout(hdr->msg, hdr->stream, nranks, ll, n, &at) != 0 || at.length != length)
        FAIL("%s of rank %d: %llu payload bytes, its contents take %llu", name, v->sender,
             (unsigned long long)length, (unsigned long long)at.length);
    if (ll->status != 0)
        return INCMOE_OK;
    v->n = n;
    v->rows = n > 0 ? p + at.rows : NULL;
    if (at.src_row != 0) {
        v->src_row = p + at.src_row;
        char rows_why[160];
        if (check_src_rows(v, at.rows - at.src_row, rows_why, sizeof(rows_why)) != INCMOE_OK)
            FAIL("%s of rank %d: %s", name, v->sender, rows_why);
    }
    return INCMOE_OK;
}

/* The first field in which b differs from a (rank 0's), or NULL. */
static const char *differs(const struct inc_wire_ll *a, const struct inc_wire_ll *b, int combine)
{
    if (b->max_tokens != a->max_tokens)
        return "max_tokens";
    if (b->row_bytes != a->row_bytes)
        return "row_bytes";
    if (b->layout != a->layout || b->topk != a->topk || b->layout_sig != a->layout_sig)
        return "layout";
    if (!combine)
        return NULL;
    if (b->dispatch_epoch != a->dispatch_epoch)
        return "dispatch_epoch";
    if (b->row_count != a->row_count || b->dtype != a->dtype || b->redop != a->redop)
        return "partials' type";
    return NULL;
}

void inc_wire_ll_verdict(incmoe_stream_t stream, uint64_t epoch, int nranks,
                         const struct inc_wire_ll *d, const char *const *reason,
                         inc_dc_verdict_t *v)
{
    const char *sname = inc_wire_stream_name(stream);
    const unsigned long long e = (unsigned long long)epoch;
    for (int r = 0; r < nranks; r++) {
        if (d[r].status == 0)
            continue;
        int len = reason[r] != NULL ? (int)d[r].refused : 0;
        if (d[r].status == INCMOE_ERR_NO_MEMORY)
            inc_dc_verdict_set(v, INCMOE_ERR_NO_MEMORY, r, "%s epoch %llu: %.*s", sname, e, len,
                               len > 0 ? reason[r] : "");
        else
            inc_dc_verdict_set(v, (incmoe_status_t)d[r].status, r,
                               "%s epoch %llu: rank %d refused its %s arguments: %.*s", sname, e, r,
                               sname, len, len > 0 ? reason[r] : "");
        return;
    }
    for (int r = 1; r < nranks; r++) {
        const char *field = differs(&d[0], &d[r], stream == INCMOE_STREAM_COMBINE);
        if (field != NULL) {
            inc_dc_verdict_set(
                v, INCMOE_ERR_MISMATCH, r,
                "%s epoch %llu: rank %d's %s differs from rank 0's (max_tokens %llu/%llu, "
                "row_bytes %llu/%llu)",
                sname, e, r, field, (unsigned long long)d[r].max_tokens,
                (unsigned long long)d[0].max_tokens, (unsigned long long)d[r].row_bytes,
                (unsigned long long)d[0].row_bytes);
            return;
        }
    }
    v->status = INCMOE_OK;
    v->rank = -1;
    v->reason[0] = '\0';
}
