/*
 * throttle.h - slowing down sources whose bootstrap handshakes fail.  An
 * address gets THROTTLE_FREE_FAILURES failures for free; each further one
 * refuses it for twice as long as the last (THROTTLE_FIRST_S, then twice, four
 * times as long ... up to THROTTLE_MAX_S).
 * A completed handshake forgets the address; an address quiet for
 * THROTTLE_FORGET_S is forgotten too.  The table is bounded: a new address
 * takes the slot of the longest-quiet one.
 */
#ifndef INCMOE_SWITCH_THROTTLE_H
#define INCMOE_SWITCH_THROTTLE_H

#include <stdint.h>
#include <sys/socket.h>

#define THROTTLE_SLOTS         256
#define THROTTLE_FREE_FAILURES 5
#define THROTTLE_FIRST_S       1.0
#define THROTTLE_MAX_S         60.0
#define THROTTLE_FORGET_S      600.0

typedef struct {
    uint8_t ip[16]; /* IPv4 mapped into IPv6 */
    int used;
    unsigned failures;
    double last_failure, refused_until;
} throttle_slot_t;

typedef struct {
    throttle_slot_t slot[THROTTLE_SLOTS];
} throttle_t;

/* Seconds the source stays refused (0: it may try now). */
double throttle_refused_for(const throttle_t *t, const struct sockaddr *src, double now);
/* A failed handshake from src; returns the seconds it is now refused for (0: none yet). */
double throttle_failure(throttle_t *t, const struct sockaddr *src, double now);
/* A completed handshake: src starts afresh. */
void throttle_success(throttle_t *t, const struct sockaddr *src);

#endif
