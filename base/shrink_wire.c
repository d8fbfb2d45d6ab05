/* shrink_wire.c - SHRINK_ACK's payload, packed and checked (shrink_wire.h). */
#include "shrink_wire.h"

#include <stdio.h>
#include <string.h>

void inc_wire_shrink_ack_pack(struct inc_wire_shrink_ack *ack, incmoe_status_t status, uint64_t job,
                              uint32_t rank, uint32_t nranks, const char *reason)
{
    memset(ack, 0, sizeof(*ack));
    if (status == INCMOE_OK) {
        ack->job = job;
        ack->rank = rank;
        ack->nranks = nranks;
    } else {
        snprintf(ack->reason, sizeof(ack->reason), "%s", reason != NULL ? reason : "");
    }
}

incmoe_status_t inc_wire_shrink_ack_parse(const struct inc_wire_hdr *h, const void *payload,
                                          size_t length, struct inc_wire_shrink_ack *ack, char *why,
                                          size_t why_len)
{
    if (length != sizeof(*ack)) {
        snprintf(why, why_len, "SHRINK_ACK of %zu bytes, not %zu", length, sizeof(*ack));
        return INCMOE_ERR_PROTOCOL;
    }
    memcpy(ack, payload, sizeof(*ack));
    if (h->status > 0) {
        snprintf(why, why_len, "SHRINK_ACK with status %d", h->status);
        return INCMOE_ERR_PROTOCOL;
    }
    if (h->status < 0) {
        if (memchr(ack->reason, '\0', sizeof(ack->reason)) == NULL) {
            snprintf(why, why_len, "SHRINK_ACK's reason is not NUL-terminated");
            return INCMOE_ERR_PROTOCOL;
        }
        return INCMOE_OK;
    }
    if (ack->nranks < 1 || ack->nranks > INCMOE_MAX_RANKS || ack->rank >= ack->nranks) {
        snprintf(why, why_len, "SHRINK_ACK gives rank %u of %u", ack->rank, ack->nranks);
        return INCMOE_ERR_PROTOCOL;
    }
    return INCMOE_OK;
}
