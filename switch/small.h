/*
 * small.h - the switch's side of small collectives (base/wire.h, "Small
 * collectives"): one SMALL in from every rank, one SMALL_FWD out to each.
 */
#ifndef INCMOE_SWITCH_SMALL_H
#define INCMOE_SWITCH_SMALL_H

#include "membership.h"

/* A SMALL from a member (screened; the header checked by inc_wire_hdr_check). */
ucs_status_t small_on_message(membership_t *m, job_t *job, conn_t *conn,
                              const struct inc_wire_hdr *h, void *data, size_t length,
                              const ucp_am_recv_param_t *param);

/* The parent's SMALL_FWD to this child switch (tree.c): the parent port's payload. */
ucs_status_t small_on_parent_result(membership_t *m, job_t *job, conn_t *conn,
                                    const struct inc_wire_hdr *h, void *data, size_t length,
                                    const ucp_am_recv_param_t *param);

#endif
