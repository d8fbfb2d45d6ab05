/*
 * exchange.c - the small AllGather every create and forward starts with.
 *
 * Each rank contributes a header (the shape, the decode capacity, the token counts, the chosen
 * configuration, the routing asked for and what its tokens need of the
 * others, and whether the rank's own arguments passed its checks).
 * Each rank then judges all headers alike, so a bad argument on one rank
 * becomes the same clear error on every rank instead of a hang.  It is posted
 * directly, not through the FIFO: it runs on the host before any role starts
 * and after every role of the previous forward finished, so no FIFO
 * collective is in flight.  It also fences forwards: no rank's data of
 * forward f+1 can arrive before every rank entered it, so the zero-copy
 * output of forward f stays intact until the caller's next call.
 */
#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "wait.h"

#include "base/log.h"

#define SUBSYS    "moe"
#define HDR_MAGIC 0x494d4f45u /* "IMOE" */

_Static_assert(sizeof(moe_hdr_t) <= MOE_HDR_BYTES, "header fits its block");

/* AllGathers every rank's header and judges them all the same way on every rank. */
incmoe_status_t exchange(incmoe_moe_t *L, moe_hdr_t *mine, const char *what)
{
    mine->magic = HDR_MAGIC;
    const size_t B = L->hdr_bytes;
    uint8_t *block = L->hdr + (size_t)L->rank * B;
    memset(block, 0, B);
    memcpy(block, mine, sizeof(*mine));
    /* A replicated layer's forwards: this rank's forced rows after the header (replicas.h). */
    if (B > MOE_HDR_BYTES)
        memcpy(block + MOE_HDR_BYTES, L->hdr_forced, B - MOE_HDR_BYTES);
    incmoe_layout_t layout = {B, 0, B > MOE_HDR_BYTES ? B : sizeof(moe_hdr_t), NULL};
    incmoe_req_t req;
    incmoe_status_t st =
        incmoe_allgather(L->comm, L->hdr_mr, (size_t)L->rank * B, L->hdr_mr, 0, &layout, &req);
    if (st == INCMOE_OK)
        st = moe_wait_bounded(L->comm, L->timeout_ms, &req);
    if (st != INCMOE_OK) {
        char why[256] = "";
        incmoe_comm_error(L->comm, why, sizeof(why));
        log_error(SUBSYS, "rank %d: %s: header exchange failed: %s (%s)", L->rank, what,
                  incmoe_strerror(st), why);
        return st;
    }
    incmoe_status_t verdict = INCMOE_OK;
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * B, sizeof(h));
        if (h.magic != HDR_MAGIC || h.phase != mine->phase || h.nranks != mine->nranks) {
            log_error(SUBSYS,
                      "rank %d: %s: rank %d is not in the same call (phase %u, %u ranks; "
                      "expected phase %u, %u ranks)",
                      L->rank, what, s, h.phase, h.nranks, mine->phase, mine->nranks);
            return INCMOE_ERR_MISMATCH;
        }
        if (h.status != 0) {
            if (s != L->rank)
                log_error(SUBSYS, "rank %d: %s: rank %d rejected its arguments (%s; see its log)",
                          L->rank, what, s, incmoe_strerror((incmoe_status_t)h.status));
            verdict = INCMOE_ERR_INVALID_ARG;
        }
    }
    if (verdict != INCMOE_OK)
        return verdict;
    for (int s = 0; s < L->N; s++) {
        moe_hdr_t h;
        memcpy(&h, L->hdr + (size_t)s * B, sizeof(h));
        /* Compare everything but the per-rank status. */
        if (h.seq != mine->seq || h.hash != mine->hash || h.E != mine->E || h.k != mine->k ||
            h.H != mine->H || h.I != mine->I || h.dtype != mine->dtype ||
            h.max_tokens != mine->max_tokens || h.mode != mine->mode || h.nb != mine->nb ||
            h.gather != mine->gather || h.reduce != mine->reduce || h.tail != mine->tail ||
            h.routing != mine->routing || h.algo != mine->algo || h.decode != mine->decode) {
            log_error(
                SUBSYS,
                "rank %d: %s: rank %d disagrees: it has call %llu, %s hash %016llx, "
                "E=%d k=%d H=%d I=%d dtype=%d max_tokens=%d mode=%d nb=%d workers=%d/%d "
                "tail=%d routing=%s algo=%d decode=%d; this rank has call %llu, hash %016llx, E=%d "
                "k=%d H=%d I=%d dtype=%d max_tokens=%d mode=%d nb=%d workers=%d/%d tail=%d "
                "routing=%s algo=%d decode=%d",
                L->rank, what, s, (unsigned long long)h.seq,
                mine->phase == HDR_CREATE ? "placement" : "token counts",
                (unsigned long long)h.hash, h.E, h.k, h.H, h.I, h.dtype, h.max_tokens, h.mode, h.nb,
                h.gather, h.reduce, h.tail,
                incmoe_moe_routing_name((incmoe_moe_routing_t)h.routing), h.algo, h.decode,
                (unsigned long long)mine->seq, (unsigned long long)mine->hash, mine->E, mine->k,
                mine->H, mine->I, mine->dtype, mine->max_tokens, mine->mode, mine->nb, mine->gather,
                mine->reduce, mine->tail,
                incmoe_moe_routing_name((incmoe_moe_routing_t)mine->routing), mine->algo,
                mine->decode);
            return INCMOE_ERR_MISMATCH;
        }
    }
    return INCMOE_OK;
}
