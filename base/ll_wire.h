/*
 * ll_wire.h - the payloads of the low-latency form (wire.h, "The low-latency
 * form of dispatch and combine"): where each part sits, the one parser that
 * checks a received payload completely, and the verdict every rank draws
 * from the N descriptions.
 *
 * The switch and the client both read and write LL, LL_FWD and PEER_LL
 * through these, so a sender packs exactly what a receiver accepts.  A
 * packer fills a struct inc_wire_ll, asks inc_wire_ll_layout() where each
 * part goes and how long the payload is, and writes the parts there (the
 * padding zero); a receiver passes the checked header and the payload to
 * inc_wire_ll_parse() and reads the parts through the view's accessors,
 * which copy (a payload need not be aligned).
 */
#ifndef INC_LL_WIRE_H
#define INC_LL_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dc_plan.h"
#include "wire.h"

/* Byte offsets of the parts of one low-latency payload; 0 for a part the message does not
   have (every part follows the head, so no part sits at 0). */
typedef struct {
    uint64_t reason;  /* the refusal's reason, ll.refused bytes, padded to 8 */
    uint64_t sets;    /* LL: uint64 sets[rows x W] */
    uint64_t recvd;   /* LL of a combine: uint32 recvd[N], padded to 8 */
    uint64_t src_row; /* LL_FWD and PEER_LL of a dispatch: uint32 src_row[n], padded to 8 */
    uint64_t rows;    /* the n rows (or partials) of row_bytes, back to back */
    uint64_t length;  /* the whole payload */
} inc_wire_ll_layout_t;

/*
 * Where the parts of a payload of message msg (WIRE_MSG_LL, LL_FWD with
 * status 0, or PEER_LL) on stream (dispatch or combine) go, for a sender
 * described by ll (its rows, row_bytes and refused fields) in a job of
 * nranks ranks, carrying n rows after its arrays: LL of a dispatch, its
 * network rows; LL of a combine, its partials for every other owner (the sum
 * of recvd); LL_FWD and PEER_LL, hdr.total.  A refused description (status
 * not 0) has no part after its reason, whatever n says.  Returns 0, or -1 if
 * the payload's size does not fit 64 bits.
 */
int inc_wire_ll_layout(unsigned msg, unsigned stream, int nranks, const struct inc_wire_ll *ll,
                       uint64_t n, inc_wire_ll_layout_t *layout);

/* What a checked low-latency payload holds: the head copied, pointers into the payload. */
typedef struct {
    struct inc_wire_ll ll;   /* the sender's description (LL_FWD of a dispatch: the source's;
                                of a combine: the owner's own LL); zero for a verdict */
    int sender;              /* the rank described: LL and PEER_LL of a combine hdr.rank,
                                the dispatch's LL_FWD and PEER_LL hdr.root; LL_FWD of a
                                combine and verdicts: hdr.root */
    incmoe_status_t verdict; /* LL_FWD: hdr.status (0, or the switch's verdict); else 0 */
    const char *reason;      /* a refusal's (ll.refused bytes, no NUL) or the verdict's
                                (NUL-terminated, reason_len bytes before the NUL); NULL if none */
    size_t reason_len;
    int words;           /* W = INCMOE_SET_WORDS(N) */
    const char *sets;    /* LL: ll.rows sets of W words; else NULL */
    const char *recvd;   /* LL of a combine: N uint32; else NULL */
    const char *src_row; /* LL_FWD, PEER_LL of a dispatch: n uint32; else NULL */
    const char *rows;    /* the n rows of ll.row_bytes (NULL when n is 0) */
    uint64_t n;          /* rows at `rows` */
} inc_wire_ll_view_t;

/*
 * Check the payload of a low-latency message whose header already passed
 * inc_wire_hdr_check() (so msg, stream and length are in range) and describe
 * it in *view, for a job of nranks ranks.  Checked: the head (nranks, status
 * 0 / INVALID_ARG / NO_MEMORY, refused <= INCMOE_REFUSAL_MAX - 1 and 0 unless
 * refused, rows 0 when refused and <= max_tokens otherwise, max_tokens > 0,
 * reserved 0, layout 0 or 1 with topk and layout_sig as it says, the stream's
 * fields: a dispatch's dtype, redop, row_count and dispatch_epoch 0, a
 * combine's dtype and redop known and row_bytes = row_count elements), every
 * padding zero, no set bit at or above N, recvd[sender] 0 and every recvd <=
 * max_tokens, src_row strictly ascending below the source's rows, hdr.total
 * against what the payload holds (LL: rows; else n), and the length exactly
 * what inc_wire_ll_layout() gives.  LL_FWD with hdr.status not 0: a
 * NUL-terminated reason of 1 .. INCMOE_WIRE_MAX_TEXT bytes and nothing else.
 * Returns INCMOE_OK, or INCMOE_ERR_PROTOCOL with why.
 */
incmoe_status_t inc_wire_ll_parse(const struct inc_wire_hdr *hdr, int nranks, const void *payload,
                                  uint64_t length, inc_wire_ll_view_t *view, char *why,
                                  size_t why_len);

/* Word w of the set of row j of an LL's view. */
static inline uint64_t inc_wire_ll_set_word(const inc_wire_ll_view_t *v, uint64_t j, int w)
{
    uint64_t word;
    memcpy(&word, v->sets + 8 * ((uint64_t)v->words * j + (uint64_t)w), sizeof(word));
    return word;
}

/* Does the set of row j of an LL's view hold rank r? */
static inline int inc_wire_ll_set_holds(const inc_wire_ll_view_t *v, uint64_t j, int r)
{
    return (int)((inc_wire_ll_set_word(v, j, r / 64) >> (r % 64)) & 1u);
}

/* recvd[r] of a combine's LL. */
static inline uint32_t inc_wire_ll_recvd(const inc_wire_ll_view_t *v, int r)
{
    uint32_t x;
    memcpy(&x, v->recvd + 4 * (size_t)r, sizeof(x));
    return x;
}

/* The source row of the i-th row of an LL_FWD or PEER_LL of a dispatch. */
static inline uint32_t inc_wire_ll_src_row(const inc_wire_ll_view_t *v, uint64_t i)
{
    uint32_t x;
    memcpy(&x, v->src_row + 4 * i, sizeof(x));
    return x;
}

/*
 * The verdict of a low-latency dispatch or combine of epoch from the N
 * descriptions d[0..nranks-1] and their refusals' reasons (reason[r],
 * d[r].refused bytes, no NUL; NULL where not refused), every rank and the
 * switch alike: the lowest refusing rank's status, with the reason
 * "<stream> epoch E: rank R refused its <stream> arguments: <reason>"
 * (INVALID_ARG) or "<stream> epoch E: <reason>" (NO_MEMORY: the rank wrote
 * what it was over); else INCMOE_ERR_MISMATCH for the first rank (ascending)
 * that differs from rank 0 in max_tokens, row_bytes, layout, layout_sig
 * (and for a combine dispatch_epoch, row_count, dtype, redop); else OK.  The
 * recvd counts of a combine are the caller's to check against the owners'
 * sets after an OK.
 */
void inc_wire_ll_verdict(incmoe_stream_t stream, uint64_t epoch, int nranks,
                         const struct inc_wire_ll *d, const char *const *reason,
                         inc_dc_verdict_t *v);

#endif
