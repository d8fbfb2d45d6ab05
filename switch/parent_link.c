/*
 * parent_link.c - a child switch's links to its parent, as states of the
 * event loop.
 *
 * Each link is this switch acting as a rank toward the parent: a
 * non-blocking TCP connect (LINK_CONNECTING), then the bootstrap exchange
 * with the parent link's key (LINK_HANDSHAKE), then, through the server's
 * finish, an endpoint from the parent's worker address.  Nothing here waits:
 * the loop polls the sockets with its own, so other jobs' messages and
 * heartbeats go on while a parent is slow.  So the deadline can be the
 * liveness timeout's, min(timeout, 5 s); a quarter of it, kept from when the
 * handshake blocked the loop, failed joins of healthy trees on a loaded
 * machine (500 ms under ASan at a load of 15-20).
 */
#include "parent_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ucx_util.h"

#define SUBSYS "switch"

/* Keep the longest time the loop spent on k in one go, from since to now. */
static void note_step(parent_link_t *k, double since)
{
    double took = inc_now_s() - since;
    if (took > k->longest_step)
        k->longest_step = took;
}

/* Fail a link that could not start; done runs before the caller returns. */
static void start_failed(parent_links_t *l, switch_parent_cb_t done, void *arg, incmoe_status_t st,
                         const char *what)
{
    char why[1024];
    snprintf(why, sizeof(why), "the parent switch %s: %s (%s)", l->set->parent, what,
             incmoe_strerror(st));
    done(arg, NULL, st, why);
}

void parent_link_start(parent_links_t *l, uint64_t job, switch_parent_cb_t done, void *arg)
{
    const switch_settings_t *set = l->set;
    const double started = inc_now_s();
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (inc_ucx_parse_hostport(set->parent, &ss, &sslen, 0) != INCMOE_OK) {
        start_failed(l, done, arg, INCMOE_ERR_UNREACHABLE, "cannot resolve it");
        return;
    }
    parent_link_t *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        start_failed(l, done, arg, INCMOE_ERR_NO_MEMORY, "out of memory");
        return;
    }
    incmoe_status_t st = inc_boot_init(&k->boot, INC_BOOT_CLIENT, set->parent_secret,
                                       set->parent_secret_len, l->worker_addr, l->worker_addr_len);
    if (st == INCMOE_IN_PROGRESS) {
        k->fd =
            inc_boot_connect_start((struct sockaddr *)&ss, sslen, k->boot.why, sizeof(k->boot.why));
        st = k->fd < 0 ? INCMOE_ERR_UNREACHABLE : st;
    }
    if (st != INCMOE_IN_PROGRESS) {
        char what[sizeof(k->boot.why)];
        snprintf(what, sizeof(what), "%s", k->boot.why);
        inc_boot_clear(&k->boot);
        free(k);
        start_failed(l, done, arg, st, what);
        return;
    }
    int ms = set->timeout_ms < 5000 ? set->timeout_ms : 5000;
    k->deadline_ms = ms > 100 ? ms : 100;
    k->deadline = started + k->deadline_ms / 1000.0;
    k->started = started;
    note_step(k, started);
    k->events = POLLOUT;
    k->job = job;
    k->done = done;
    k->arg = arg;
    k->next = l->head;
    l->head = k;
    l->count++;
}

int parent_links_pollfds(const parent_links_t *l, struct pollfd *fds, int max)
{
    int n = 0;
    for (const parent_link_t *k = l->head; k != NULL && n < max; k = k->next)
        fds[n++] = (struct pollfd){.fd = k->fd, .events = k->events};
    return n;
}

int parent_links_timeout_ms(const parent_links_t *l, int cap)
{
    double now = inc_now_s();
    int ms = cap;
    for (const parent_link_t *k = l->head; k != NULL; k = k->next) {
        double left = (k->deadline - now) * 1000.0 + 1;
        if (left < ms)
            ms = left < 0 ? 0 : (int)left;
    }
    return ms;
}

/* One step of a link whose socket is ready (or whose deadline may have passed): the
   handshake's status, INCMOE_IN_PROGRESS while it goes on. */
static incmoe_status_t link_step(parent_link_t *k, short revents, double now)
{
    if (now >= k->deadline) {
        snprintf(k->boot.why, sizeof(k->boot.why),
                 k->state == LINK_HANDSHAKE
                     ? "no answer to the handshake within %d ms (stopped or overloaded?)"
                     : "the connection was not accepted within %d ms",
                 k->deadline_ms);
        return k->boot.status = INCMOE_ERR_TIMEOUT;
    }
    if (revents == 0)
        return INCMOE_IN_PROGRESS;
    if (k->state == LINK_CONNECTING) {
        int c = inc_boot_connect_done(k->fd, k->boot.why, sizeof(k->boot.why));
        if (c < 0)
            return k->boot.status = INCMOE_ERR_UNREACHABLE;
        if (c > 0)
            return INCMOE_IN_PROGRESS;
        k->state = LINK_HANDSHAKE;
    }
    return inc_boot_io(&k->boot, k->fd, &k->events);
}

/* A finished link: its connection (or the failure) to whoever asked, and it goes. */
static void link_finish(parent_links_t *l, parent_link_t *k, incmoe_status_t st)
{
    char why[1024];
    conn_t *conn = NULL;
    const double since = inc_now_s();
    close(k->fd);
    if (st == INCMOE_OK && (conn = l->finish(l->server, &k->boot, k->job)) == NULL) {
        st = INCMOE_ERR_UNREACHABLE;
        snprintf(why, sizeof(why), "no endpoint to the parent switch %s", l->set->parent);
    } else if (st != INCMOE_OK) {
        snprintf(why, sizeof(why), "the parent switch %s: %s (%s)", l->set->parent, k->boot.why,
                 incmoe_strerror(st));
    }
    inc_boot_clear(&k->boot);
    note_step(k, since);
    /* What issue 30 asks of a join: how long the loop stopped serving other jobs for it (the
       link's own work, not the time the loop waited for a CPU between its passes). */
    log_info(SUBSYS,
             "job %llu: the link to the parent switch %s %s after %.1f ms; the longest "
             "the loop spent on it in one go: %.3f ms",
             (unsigned long long)k->job, l->set->parent, conn != NULL ? "is up" : "failed",
             (inc_now_s() - k->started) * 1e3, k->longest_step * 1e3);
    switch_parent_cb_t done = k->done;
    void *arg = k->arg;
    free(k);
    done(arg, conn, st, conn != NULL ? NULL : why);
}

void parent_links_service(parent_links_t *l, const struct pollfd *fds, int n)
{
    const double now = inc_now_s();
    parent_link_t *finished = NULL;
    int i = 0;
    /* Finished links leave the list first and call back after the walk: a callback may start
       another link. */
    for (parent_link_t **pp = &l->head; *pp != NULL; i++) {
        parent_link_t *k = *pp;
        short revents = i < n ? fds[i].revents : 0;
        const double since = inc_now_s();
        incmoe_status_t st = link_step(k, revents, now);
        note_step(k, since);
        if (st == INCMOE_IN_PROGRESS) {
            pp = &k->next;
            continue;
        }
        k->boot.status = st;
        *pp = k->next;
        l->count--;
        k->next = finished;
        finished = k;
    }
    while (finished != NULL) {
        parent_link_t *k = finished;
        finished = k->next;
        link_finish(l, k, k->boot.status);
    }
}

void parent_links_close(parent_links_t *l)
{
    while (l->head != NULL) {
        parent_link_t *k = l->head;
        l->head = k->next;
        l->count--;
        snprintf(k->boot.why, sizeof(k->boot.why), "this switch is stopping");
        link_finish(l, k, INCMOE_ERR_UNREACHABLE);
    }
}
