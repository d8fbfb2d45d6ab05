/* fuzz_input.h - a message of a fuzz input, as the message targets (fuzz_switch_msg,
   fuzz_client_msg) read it: two length bytes (little-endian), a wire header, then the payload. */
#ifndef INCMOE_FUZZ_INPUT_H
#define INCMOE_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/wire.h"

/* The longest payload a message of the input carries. */
#define FUZZ_MAX_PAYLOAD 4096

typedef struct {
    const uint8_t *hdr; /* sizeof(struct inc_wire_hdr) bytes, unaligned */
    const uint8_t *payload;
    size_t length; /* at most FUZZ_MAX_PAYLOAD and what is left of the input */
} fuzz_msg_t;

/* Takes the message at *pos of in[0..size) into msg and moves *pos past it; 0 when too few bytes
   are left for its length and header. */
static inline int fuzz_take_msg(const uint8_t *in, size_t size, size_t *pos, fuzz_msg_t *msg)
{
    const size_t hlen = sizeof(struct inc_wire_hdr);
    if (size - *pos < 2 + hlen)
        return 0;
    size_t length = (size_t)in[*pos] | (size_t)in[*pos + 1] << 8;
    msg->hdr = in + *pos + 2;
    *pos += 2 + hlen;
    if (length > FUZZ_MAX_PAYLOAD)
        length = FUZZ_MAX_PAYLOAD;
    if (length > size - *pos)
        length = size - *pos;
    msg->payload = in + *pos;
    msg->length = length;
    *pos += length;
    return 1;
}

#endif
