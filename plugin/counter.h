/*
 * counter.h - how the client sleeps on a 32-bit word and wakes its sleepers: the one futex
 * idiom behind the counters of incmoe_fifo.h (counter.c) and the FIFO's proxy (fifo.c).
 *
 * A waiter reads the word (acquire) before it checks its condition, and sleeps only while the
 * word still holds what it read; whoever changes the condition changes the word afterwards
 * and wakes it.  A change between the read and the sleep then makes the sleep return at
 * once, so no wake-up is lost.  A bitset says whose a wake-up is: a waiter sleeps with the
 * bits it cares about and a wake reaches it only when the bits meet (COUNTER_WAKE_ALL: every
 * waiter).
 */
#ifndef INCMOE_COUNTER_INTERNAL_H
#define INCMOE_COUNTER_INTERNAL_H

#include <stdint.h>
#include <time.h>

#define COUNTER_WAKE_ALL 0xffffffffu /* FUTEX_BITSET_MATCH_ANY */

/* Sleeps while *word == seen, at most until `until` (CLOCK_MONOTONIC), unless a wake whose bits
   meet `bits` comes first.  Spurious returns are possible: callers check again. */
void counter_sleep(const uint32_t *word, uint32_t seen, const struct timespec *until,
                   uint32_t bits);

/* Wakes the sleepers on word whose bits meet `bits`. */
void counter_wake(uint32_t *word, uint32_t bits);

/* A test hook, NULL outside tests and never exported (libincmoe.map): called by counter_sleep
   just before it sleeps, so a test can act once a waiter has reached its sleep instead of
   sleeping itself and hoping.  Set it before the threads that wait start. */
extern void (*counter_test_sleeping)(const uint32_t *word);

#endif
