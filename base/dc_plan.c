/* dc_plan.c - the shared verdict of a dispatch or combine (see dc_plan.h). */
#include "dc_plan.h"

#include <stdio.h>

#include "vformat.h"

void inc_dc_verdict_set(inc_dc_verdict_t *v, incmoe_status_t status, int rank, const char *fmt, ...)
{
    v->status = status;
    v->rank = rank;
    INC_VFORMAT(v->reason, sizeof(v->reason), fmt);
}

static void verdict_ok(inc_dc_verdict_t *v)
{
    v->status = INCMOE_OK;
    v->rank = -1;
    v->reason[0] = '\0';
}

/* Rank r refused its arguments for the reason why (NULL: it did not): the verdict names it
   and at most INCMOE_REFUSAL_MAX - 1 bytes of why, as every rank carries them.  1 if so. */
static int refused(inc_dc_verdict_t *v, const char *stream, uint64_t epoch, int r, const char *why)
{
    if (why == NULL)
        return 0;
    inc_dc_verdict_set(v, INCMOE_ERR_INVALID_ARG, r,
                       "%s epoch %llu: rank %d refused its %s arguments: %.*s", stream,
                       (unsigned long long)epoch, r, stream, INCMOE_REFUSAL_MAX - 1, why);
    return 1;
}

uint64_t inc_dc_rows_to(int nranks, const inc_dc_dispatch_in_t *in, int d)
{
    uint64_t rows = 0;
    for (int s = 0; s < nranks; s++)
        rows += in[s].count[d];
    return rows;
}

void inc_dc_dispatch_verdict(uint64_t epoch, int nranks, const inc_dc_dispatch_in_t *in,
                             inc_dc_verdict_t *v)
{
    const unsigned long long e = (unsigned long long)epoch;
    for (int r = 0; r < nranks; r++)
        if (refused(v, "dispatch", epoch, r, in[r].refused))
            return;
    for (int r = 1; r < nranks; r++) {
        if (in[r].row_bytes != in[0].row_bytes) {
            inc_dc_verdict_set(
                v, INCMOE_ERR_MISMATCH, r,
                "dispatch epoch %llu: rank %d has rows of %llu bytes, rank 0 of %llu", e, r,
                (unsigned long long)in[r].row_bytes, (unsigned long long)in[0].row_bytes);
            return;
        }
    }
    for (int d = 0; d < nranks; d++) {
        uint64_t rows = inc_dc_rows_to(nranks, in, d);
        if (rows > in[d].capacity) {
            inc_dc_verdict_set(
                v, INCMOE_ERR_NO_MEMORY, d,
                "dispatch epoch %llu: rank %d would receive %llu rows, capacity %llu", e, d,
                (unsigned long long)rows, (unsigned long long)in[d].capacity);
            return;
        }
    }
    verdict_ok(v);
}

void inc_dc_combine_verdict(uint64_t epoch, int nranks, const inc_dc_combine_in_t *in,
                            inc_dc_verdict_t *v)
{
    const unsigned long long e = (unsigned long long)epoch;
    for (int r = 0; r < nranks; r++)
        if (refused(v, "combine", epoch, r, in[r].refused))
            return;
    for (int r = 1; r < nranks; r++) {
        if (in[r].dispatch_epoch != in[0].dispatch_epoch) {
            inc_dc_verdict_set(
                v, INCMOE_ERR_MISMATCH, r,
                "combine epoch %llu: rank %d names dispatch epoch %llu, rank 0 dispatch "
                "epoch %llu",
                e, r, (unsigned long long)in[r].dispatch_epoch,
                (unsigned long long)in[0].dispatch_epoch);
            return;
        }
        if (in[r].row_count != in[0].row_count || in[r].dtype != in[0].dtype ||
            in[r].redop != in[0].redop) {
            inc_dc_verdict_set(
                v, INCMOE_ERR_MISMATCH, r,
                "combine epoch %llu: rank %d has rows of %llu %s (%s), rank 0 of %llu %s "
                "(%s)",
                e, r, (unsigned long long)in[r].row_count,
                incmoe_dtype_name((incmoe_dtype_t)in[r].dtype),
                incmoe_redop_name((incmoe_redop_t)in[r].redop), (unsigned long long)in[0].row_count,
                incmoe_dtype_name((incmoe_dtype_t)in[0].dtype),
                incmoe_redop_name((incmoe_redop_t)in[0].redop));
            return;
        }
    }
    for (int s = 0; s < nranks; s++) {
        for (int d = 0; d < nranks; d++) {
            if (in[s].sent[d] != in[d].recvd[s]) {
                inc_dc_verdict_set(
                    v, INCMOE_ERR_MISMATCH, d,
                    "combine epoch %llu: rank %d gives %u partial rows for rank %d, which "
                    "sent it %u rows in dispatch epoch %llu",
                    e, d, in[d].recvd[s], s, in[s].sent[d],
                    (unsigned long long)in[0].dispatch_epoch);
                return;
            }
        }
    }
    verdict_ok(v);
}
