/*
 * innet.h - what the files of the in-network algorithm share: innet.c (the
 * table entry, the bulk collectives, credits), innet_dc.c (dispatch and
 * combine through the switch) and innet_ll.c (their low-latency form).
 */
#ifndef INCMOE_INNET_H
#define INCMOE_INNET_H

#include "client.h"

typedef struct innet_early innet_early_t; /* innet_ll.c's */

typedef struct {
    uint32_t credits[INC_STREAM_COUNT]; /* messages this rank may still send, per stream */
    innet_early_t *early; /* LL_FWDs of dispatches not started here yet (innet_ll.c) */
    int nearly;
} innet_t;

/* On the posting thread: what the switch cannot carry (a row and its set beyond a chunk). */
incmoe_status_t innet_dc_check(incmoe_comm_t *comm, const coll_op_t *op, char *why, size_t why_len);
/* A started dispatch or combine: small or chunked (wire.h, "Dispatch and combine"). */
void innet_dc_start(incmoe_comm_t *comm, coll_op_t *op);
/* Send what may go within *credits: the POST or SMALL, then after an OK plan each DATA in
   order; sets op->all_issued once nothing is left.  0 when out of memory (failed). */
int innet_dc_pump(incmoe_comm_t *comm, coll_op_t *op, uint32_t *credits);
/* PLAN and FWD of these streams (a UCX active message callback's answer). */
ucs_status_t innet_dc_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param);

/* A started low-latency dispatch or combine (wire.h, "The low-latency form"): its record, and
   the LL_FWDs that came before it started. */
void innet_ll_start(incmoe_comm_t *comm, coll_op_t *op);
/* Its one LL, once *credits allow; sets op->all_issued once it went.  0 when out of memory
   (failed). */
int innet_ll_pump(incmoe_comm_t *comm, coll_op_t *op, uint32_t *credits);
/* LL_FWD (a UCX active message callback's answer). */
ucs_status_t innet_ll_on_message(incmoe_comm_t *comm, const struct inc_wire_hdr *h, void *data,
                                 size_t length, const ucp_am_recv_param_t *param);
/* Closing: the LL_FWDs kept for collectives that never started. */
void innet_ll_close(incmoe_comm_t *comm);

#endif
