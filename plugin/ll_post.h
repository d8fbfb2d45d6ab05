/*
 * ll_post.h - posting a dispatch or combine of the low-latency form, on the
 * caller's thread (ll_post.c), for dc_post.c.
 */
#ifndef INCMOE_LL_POST_H
#define INCMOE_LL_POST_H

#include "client.h"
#include "dc_shared.h"

/* A low-latency dispatch being posted (LOW_LATENCY set, not refused), its buffers held and
   checked: its arguments checked (a rejection frees op), its record made with its sets (by
   expert: made from the experts), and the form's own refusals applied (over max_tokens, a
   message beyond the credits).  INCMOE_OK: op is ready to submit. */
incmoe_status_t client_ll_post_dispatch(incmoe_comm_t *comm, coll_op_t *op,
                                        const incmoe_dispatch_params_t *p);
/* The rows of partials a combine of the low-latency dispatch dc reads (its layout's slots). */
size_t client_ll_partial_rows(const client_dc_t *dc);
/* A low-latency dispatch or combine, described: refused when its largest message would take
   more than the credits.  INCMOE_OK (post it, refused or not), or a rejection (op freed). */
incmoe_status_t client_ll_post_bound(incmoe_comm_t *comm, coll_op_t *op);
/* A refusal posted with the form (max_tokens of a refused dispatch, the form of the dispatch a
   refused combine names): its empty record takes the form.  0 out of memory. */
int client_ll_post_refused(incmoe_comm_t *comm, coll_op_t *op, size_t max_tokens);

#endif
