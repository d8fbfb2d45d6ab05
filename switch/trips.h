/*
 * trips.h - the messages each job's ranks exchange with this switch,
 * counted per stream, direction and message type, and logged when the job
 * ends (base/wire.h, the last paragraph of "The low-latency form"), so a
 * test can count the trips a collective takes.
 */
#ifndef INCMOE_SWITCH_TRIPS_H
#define INCMOE_SWITCH_TRIPS_H

#include <stddef.h>
#include <stdint.h>

#include "tx.h"

enum { TRIPS_IN = 0, TRIPS_OUT = 1 };

typedef struct {
    uint64_t n[2][INC_STREAM_COUNT][WIRE_MSG_LAST + 1]; /* [direction][stream][message type] */
} trips_t;

/* Count one message of a collective's stream (POST, DATA, FWD, CREDIT, DONE, SMALL, SMALL_FWD,
   PLAN, LL, LL_FWD) between a rank and this switch; others are not trips. */
void trips_count(trips_t *t, int direction, const struct inc_wire_hdr *h);

/* The counts of stream as "in MSG=n ... out MSG=n ..." (types in wire order, zero counts left
   out; "in out" when none) into buf; 0 if the stream carried nothing. */
int trips_format(const trips_t *t, int stream, char *buf, size_t len);

/* A switch_tx that counts what goes to a job's ranks (conn->job's trips) and sends through
   inner; *arg lives as long as the tx. */
typedef struct {
    switch_tx_t inner;
} trips_tx_arg_t;
switch_tx_t trips_tx(trips_tx_arg_t *arg, switch_tx_t inner);

#endif
