/* sync.c - CPU implementation of the role workers' counters and waits (see sync.h). */
#include "sync.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "base/clock.h"

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The futex word is the counter's low half: it changes whenever the counter does. */
static uint32_t *futex_word(const sync_counter_t *c)
{
    return (uint32_t *)c + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 1 : 0);
}

static void futex_wake_all(const sync_counter_t *c)
{
    syscall(SYS_futex, futex_word(c), FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void sync_publish(sync_counter_t *c, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak_explicit(c, &cur, v, memory_order_release,
                                                             memory_order_relaxed))
        ;
    futex_wake_all(c);
}

uint64_t sync_advance(sync_counter_t *c)
{
    uint64_t v = atomic_fetch_add_explicit(c, 1, memory_order_release) + 1;
    futex_wake_all(c);
    return v;
}

incmoe_status_t sync_wait_geq(const sync_counter_t *c, uint64_t target, const _Atomic int *abort,
                              int timeout_ms)
{
    /* A short spin catches hand-offs between roles that are already close. */
    for (int i = 0; i < 64; i++) {
        if (sync_load(c) >= target)
            return INCMOE_OK;
        cpu_relax();
    }
    double deadline = inc_now_ms() + timeout_ms;
    for (;;) {
        uint64_t v = sync_load(c);
        if (v >= target)
            return INCMOE_OK;
        int a = atomic_load_explicit(abort, memory_order_acquire);
        if (a != 0)
            return (incmoe_status_t)a;
        if (inc_now_ms() > deadline)
            return INCMOE_ERR_TIMEOUT;
        /* Sleep until the counter moves; the 5 ms cap bounds how late an abort is seen. */
        struct timespec ts = {0, 5 * 1000 * 1000};
        syscall(SYS_futex, futex_word(c), FUTEX_WAIT_PRIVATE, (uint32_t)v, &ts, NULL, 0);
    }
}

void sync_abort(_Atomic int *abort, incmoe_status_t status)
{
    int expected = 0;
    if (status == INCMOE_OK)
        status = INCMOE_ERR_CLOSED;
    atomic_compare_exchange_strong_explicit(abort, &expected, (int)status, memory_order_acq_rel,
                                            memory_order_acquire);
}
