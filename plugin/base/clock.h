/* clock.h - the one clock: monotonic time for deadlines and measurements, and
   the CLOCK_REALTIME deadline pthread_cond_timedwait() takes. */
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

/* The CLOCK_REALTIME instant ms milliseconds from now, for pthread_cond_timedwait(). */
static inline struct timespec inc_realtime_after_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
