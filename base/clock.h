/* clock.h - the one clock: monotonic time for deadlines and measurements, and
   the absolute timespecs that pthread_cond_timedwait() and futexes take. */
#ifndef INC_CLOCK_H
#define INC_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC: never jumps, so deadlines and intervals hold. */
static inline double inc_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double inc_now_ms(void)
{
    return inc_now_s() * 1e3;
}

/* The instant us microseconds from now on `clock`, as a timespec: CLOCK_REALTIME
   for pthread_cond_timedwait(), CLOCK_MONOTONIC for FUTEX_WAIT_BITSET. */
static inline struct timespec inc_clock_after_us(clockid_t clock, long long us)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    long long ns = ts.tv_nsec + (us % 1000000) * 1000;
    ts.tv_sec += (time_t)(us / 1000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

static inline struct timespec inc_realtime_after_ms(long ms)
{
    return inc_clock_after_us(CLOCK_REALTIME, (long long)ms * 1000);
}

#endif
