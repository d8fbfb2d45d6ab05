/*
 * dc_plan.h - the plan of a dispatch or combine (incmoe.h, "Dispatch and
 * combine"): what every rank says before any row moves, and the verdict all
 * of them share.
 *
 * Every algorithm gathers the same inputs from every rank (the switch from
 * the ranks' POSTs, the point-to-point algorithms from their peers' plan
 * messages) and computes the verdict with these pure functions, so a
 * capacity or shape error is the same on every rank, reason included,
 * whoever computes it.
 */
#ifndef INC_DC_PLAN_H
#define INC_DC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe/incmoe.h"

/* What rank s says about a dispatch. */
typedef struct {
    uint64_t row_bytes;
    uint64_t capacity;     /* rows it can receive */
    const uint32_t *count; /* [N]: its rows whose set holds d, for each d (d == s included) */
    const char *refused;   /* NULL, or why it refused its arguments (incmoe.h, "A refusal") */
} inc_dc_dispatch_in_t;

/* What rank r says about a combine. */
typedef struct {
    uint64_t dispatch_epoch; /* the dispatch it inverts */
    uint64_t row_count;      /* elements per partial row */
    uint32_t dtype, redop;
    const uint32_t *sent;  /* [N]: the dispatch's count row of r (rows of r held by d) */
    const uint32_t *recvd; /* [N]: rows r received from s in that dispatch (partials it gives) */
    const char *refused;   /* NULL, or why it refused its arguments */
} inc_dc_combine_in_t;

#define INC_DC_REASON 256

/* The verdict every rank shares: OK, or the status, the rank at fault and why. */
typedef struct {
    incmoe_status_t status; /* INCMOE_OK, INCMOE_ERR_INVALID_ARG (a refusal),
                               INCMOE_ERR_NO_MEMORY or INCMOE_ERR_MISMATCH */
    int rank;               /* the rank at fault, -1 when OK */
    char reason[INC_DC_REASON];
} inc_dc_verdict_t;

/* Set a failed verdict: its status, the rank at fault and the reason (printf). */
void inc_dc_verdict_set(inc_dc_verdict_t *v, incmoe_status_t status, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * The dispatch of epoch from in[0..nranks-1]: INVALID_ARG for the first rank
 * (ascending) that refused, naming its reason (at most INCMOE_REFUSAL_MAX - 1
 * bytes of it); else MISMATCH if a rank's row_bytes differs from rank 0's
 * (the first such rank), else NO_MEMORY for the first rank d (ascending)
 * whose rows from all sources exceed its capacity, else OK.
 */
void inc_dc_dispatch_verdict(uint64_t epoch, int nranks, const inc_dc_dispatch_in_t *in,
                             inc_dc_verdict_t *v);

/*
 * The combine of epoch from in[0..nranks-1]: INVALID_ARG for the first rank
 * (ascending) that refused, as for dispatch; else MISMATCH for the first rank
 * (ascending) that names another dispatch than rank 0, or another row_count,
 * dtype or op; then for the first pair (s, d) where s says d holds a number
 * of its rows that d does not say it received from s (the rank at fault: d);
 * else OK.
 */
void inc_dc_combine_verdict(uint64_t epoch, int nranks, const inc_dc_combine_in_t *in,
                            inc_dc_verdict_t *v);

/* Rows rank d receives: the sum over s of count[s][d] (in[s].count[d]). */
uint64_t inc_dc_rows_to(int nranks, const inc_dc_dispatch_in_t *in, int d);

#endif
