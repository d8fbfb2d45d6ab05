/*
 * wait.c - the bounded wait (wait.h).
 */
#include "wait.h"

#include <time.h>

#include "base/clock.h"

/* Sleeps with a backoff (capped at 1 ms): a rank that left the job early must not hold the
   others here for ever. */
incmoe_status_t moe_wait_bounded(incmoe_comm_t *comm, int timeout_ms, const incmoe_req_t *req)
{
    double deadline = inc_now_ms() + timeout_ms;
    long ns = 10000;
    for (;;) {
        incmoe_status_t st = incmoe_test(comm, req);
        if (st != INCMOE_IN_PROGRESS)
            return st;
        if (inc_now_ms() > deadline)
            return INCMOE_ERR_TIMEOUT;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = ns < 1000000 ? ns * 2 : 1000000;
    }
}
