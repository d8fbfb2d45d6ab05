/*
 * counter.c - the host side of the cumulative counters of incmoe_fifo.h (publish, ring, wait),
 * and the futex idiom of counter.h that every sleep in the client uses.
 *
 * A counter's waiters sleep on the bell paired with it, a word many counters may share; a
 * publication rings the bell with the counter's bit, so waiters of other counters sleep on.
 */
#include "counter.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "incmoe/incmoe_fifo.h"

_Static_assert(COUNTER_WAKE_ALL == FUTEX_BITSET_MATCH_ANY, "a wake of every waiter");

void (*counter_test_sleeping)(const uint32_t *word);

void counter_sleep(const uint32_t *word, uint32_t seen, const struct timespec *until, uint32_t bits)
{
    if (counter_test_sleeping != NULL)
        counter_test_sleeping(word);
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline */
    syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, seen, until, NULL, bits);
}

void counter_wake(uint32_t *word, uint32_t bits)
{
    syscall(SYS_futex, word, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, bits);
}

/* A counter's bit in its bell's wake mask: waiters of other counters sleep on. */
static uint32_t counter_bit(const uint64_t *counter)
{
    return 1u << (((uintptr_t)counter >> 3) & 31);
}

static void bell_ring(uint32_t *bell, uint32_t bits)
{
    /* release: a waiter that reads the new bell value sees what was published */
    __atomic_fetch_add(bell, 1, __ATOMIC_RELEASE);
    counter_wake(bell, bits);
}

void incmoe_counter_publish(uint64_t *counter, uint64_t v, uint32_t *bell)
{
    uint64_t cur = incmoe_atomic_load_relaxed64(counter);
    /* release: pairs with the waiter's acquire load of the counter */
    while (cur < v && !incmoe_atomic_cas_release64(counter, &cur, v))
        ;
    bell_ring(bell, counter_bit(counter));
}

void incmoe_counter_ring_all(uint32_t *bell)
{
    bell_ring(bell, COUNTER_WAKE_ALL);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static incmoe_status_t abort_status(const int32_t *a1, const int32_t *a2)
{
    int32_t a = a1 ? incmoe_atomic_load_acquire32(a1) : 0;
    if (a == 0 && a2 != NULL)
        a = incmoe_atomic_load_acquire32(a2);
    return (incmoe_status_t)a;
}

incmoe_status_t incmoe_counter_wait(const uint64_t *counter, uint64_t target, const uint32_t *bell,
                                    const int32_t *abort1, const int32_t *abort2, int timeout_ms)
{
    /* A short spin catches hand-offs between threads that are already close. */
    for (int i = 0; i < 64; i++) {
        if (incmoe_atomic_load_acquire64(counter) >= target)
            return INCMOE_OK;
        cpu_relax();
    }
    const double end = inc_now_s() + timeout_ms / 1e3;
    const struct timespec until = inc_clock_after_us(CLOCK_MONOTONIC, (long long)timeout_ms * 1000);
    const uint32_t bits = counter_bit(counter);
    for (;;) {
        /* Read the bell before the counter and the aborts: a ring after these
           reads changes the bell, so the sleep below returns at once. */
        uint32_t seen = __atomic_load_n(bell, __ATOMIC_ACQUIRE);
        if (incmoe_atomic_load_acquire64(counter) >= target)
            return INCMOE_OK;
        incmoe_status_t a = abort_status(abort1, abort2);
        if (a != INCMOE_OK)
            return a;
        if (inc_now_s() >= end)
            return INCMOE_ERR_TIMEOUT;
        counter_sleep(bell, seen, &until, bits);
    }
}
