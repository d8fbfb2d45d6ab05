/*
 * ll_place.h - where the rows of the low-latency form go (ll_place.c): a
 * dispatch's regions, a combine's partials by source and an owner's own
 * partial last.  Called by ll_shared.c and ll_pack.c.
 */
#ifndef INCMOE_LL_PLACE_H
#define INCMOE_LL_PLACE_H

#include "client.h"
#include "ll_shared.h"

/* The partial of by-source slot `slot` (base[s] + k: the k-th row received from s): the
   caller's (by source), or its fold over local experts (by expert). */
const char *client_ll_partial_at(const coll_op_t *op, uint64_t slot);
/* A dispatch's OK verdict: this rank's own rows and every other source's (op->ll->view) in
   their regions, the counts and the source table.  -1, or the rank whose rows cannot be placed
   (why says how: the job fails). */
int client_ll_place(incmoe_comm_t *comm, coll_op_t *op, char *why, size_t why_len);
/* A dispatch's failed verdict: R as the rows its sources announced (incmoe_dispatch_result). */
void client_ll_count_would(const incmoe_comm_t *comm, coll_op_t *op);
/* A starting combine: by expert, the partials folded over each received row's local experts in
   ascending order (op->ll->fold); by source nothing.  0 out of memory. */
int client_ll_fold(const incmoe_comm_t *comm, coll_op_t *op);
/* Owner, row i: the result from others (NULL: nobody else holds it) with this rank's own
   partial applied last, into the row's place; zeros when neither exists. */
void client_ll_own_last(const incmoe_comm_t *comm, coll_op_t *op, size_t i, const void *others);
/* Owner: its rows whose set holds another rank (the switch's result rows). */
uint64_t client_ll_rows_with_others(const incmoe_comm_t *comm, const coll_op_t *op);
/* Owner: the switch's reduced rows (one per row with others, in row order) applied. */
void client_ll_apply_result(const incmoe_comm_t *comm, coll_op_t *op, const char *rows);

#endif
