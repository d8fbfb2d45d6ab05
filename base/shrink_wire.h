/*
 * shrink_wire.h - SHRINK_ACK's payload (wire.h, "SHRINK_ACK"): the switch packs it and the
 * client checks it here, in one place, so a sender packs exactly what a receiver accepts.
 */
#ifndef INC_SHRINK_WIRE_H
#define INC_SHRINK_WIRE_H

#include <stddef.h>

#include "wire.h"

/* The job ids the switch remembers as shrunk, refusing JOINs to them. */
#define INC_SHRUNK_IDS 256

/* Fill ack: on success (status 0) the new job, rank and size; else the reason (cut to fit). */
void inc_wire_shrink_ack_pack(struct inc_wire_shrink_ack *ack, incmoe_status_t status, uint64_t job,
                              uint32_t rank, uint32_t nranks, const char *reason);

/* Check a received SHRINK_ACK (its header passed inc_wire_hdr_check): on status 0 a rank below
   a size of 1..INCMOE_MAX_RANKS and a job; otherwise a NUL-terminated reason.  INCMOE_OK and
   *ack filled, or INCMOE_ERR_PROTOCOL with why. */
incmoe_status_t inc_wire_shrink_ack_parse(const struct inc_wire_hdr *h, const void *payload,
                                          size_t length, struct inc_wire_shrink_ack *ack, char *why,
                                          size_t why_len);

#endif
