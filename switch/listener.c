/*
 * listener.c - the switch's bootstrap listener, serviced from the event loop.
 * It shares the loop with UCX rather than running on a thread of its own: a
 * completed handshake creates a UCX endpoint on the switch's single-threaded
 * worker, which only the loop's thread may touch, and the handshake itself is
 * two HMACs and a few small non-blocking reads, nothing that holds up progress.
 */
#define _GNU_SOURCE /* accept4 */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/text.h"
#include "base/ucx_util.h"

#define SUBSYS "switch"

incmoe_status_t listener_open(listener_t *l, const struct sockaddr *addr, socklen_t addr_len,
                              const void *key, size_t key_len, const void *worker_addr,
                              size_t worker_addr_len, char *where, size_t where_len)
{
    memset(l, 0, sizeof(*l));
    l->key = key;
    l->key_len = key_len;
    l->worker_addr = worker_addr;
    l->worker_addr_len = worker_addr_len;
    l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    l->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(l->fd, addr, addr_len) != 0 || listen(l->fd, 128) != 0 ||
        getsockname(l->fd, (struct sockaddr *)&bound, &bound_len) != 0) {
        char text[128];
        inc_ucx_format_sockaddr(addr, text, sizeof(text));
        log_error(SUBSYS, "cannot listen on %s: %s", text, strerror(errno));
        listener_close(l);
        return INCMOE_ERR_UNREACHABLE;
    }
    inc_ucx_format_sockaddr((struct sockaddr *)&bound, where, where_len);
    return INCMOE_OK;
}

int listener_pollfds(const listener_t *l, struct pollfd *fds, int max)
{
    int n = 0;
    if (n < max)
        fds[n++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
    for (int i = 0; i < l->npending && n < max; i++)
        fds[n++] = (struct pollfd){.fd = l->pending[i]->fd, .events = l->pending[i]->events};
    return n;
}

int listener_timeout_ms(const listener_t *l, int cap)
{
    double now = inc_now_s();
    int ms = cap;
    for (int i = 0; i < l->npending; i++) {
        double left = (l->pending[i]->deadline - now) * 1000.0 + 1;
        if (left < ms)
            ms = left < 0 ? 0 : (int)left;
    }
    return ms;
}

/* At most LISTENER_LOG_BURST lines per window; the rest are counted and summed up later. */
static void log_failure(listener_t *l, const char *peer, const char *why)
{
    double now = inc_now_s();
    if (now - l->log_window > LISTENER_LOG_WINDOW_S) {
        if (l->suppressed > 0)
            log_warn(SUBSYS, "%u more bootstrap failures were not logged", l->suppressed);
        l->log_window = now;
        l->logged = l->suppressed = 0;
    }
    if (l->logged >= LISTENER_LOG_BURST) {
        l->suppressed++;
        return;
    }
    l->logged++;
    char clean[INC_BOOT_MAX_TEXT + 64];
    inc_text_sanitize(clean, sizeof(clean), why, strlen(why));
    log_warn(SUBSYS, "bootstrap from %s failed: %s", peer, clean);
}

/* A refusal the peer may read before the close; best effort, never waits. */
static void refuse_now(int fd, incmoe_status_t status, const char *text)
{
    uint8_t msg[INC_BOOT_HDR + 2 + INC_BOOT_MAX_TEXT];
    size_t n = inc_boot_pack_reject(msg, status, text);
    ssize_t w = send(fd, msg, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
}

static void conn_remove(listener_t *l, int i)
{
    listener_conn_t *c = l->pending[i];
    close(c->fd);
    inc_boot_clear(&c->boot);
    free(c);
    l->pending[i] = l->pending[--l->npending];
}

static void conn_failed(listener_t *l, int i, const char *why)
{
    listener_conn_t *c = l->pending[i];
    l->failed++;
    double refused = throttle_failure(&l->throttle, (struct sockaddr *)&c->peer, inc_now_s());
    char text[INC_BOOT_MAX_TEXT + 128];
    if (refused > 0)
        snprintf(text, sizeof(text), "%s (refusing %s for %.0f s)", why, c->peer_text, refused);
    else
        snprintf(text, sizeof(text), "%s", why);
    log_failure(l, c->peer_text, text);
    conn_remove(l, i);
}

static void conn_step(listener_t *l, int i)
{
    listener_conn_t *c = l->pending[i];
    incmoe_status_t st = inc_boot_io(&c->boot, c->fd, &c->events);
    if (st == INCMOE_IN_PROGRESS)
        return;
    if (st != INCMOE_OK) {
        conn_failed(l, i, c->boot.why);
        return;
    }
    l->completed++;
    throttle_success(&l->throttle, (struct sockaddr *)&c->peer);
    log_debug(SUBSYS, "bootstrap from %s done", c->peer_text);
    l->on_session(l->arg, &c->boot, c->peer_text);
    conn_remove(l, i);
}

static void accept_one(listener_t *l, int fd, const struct sockaddr_storage *peer)
{
    char text[64];
    inc_ucx_format_sockaddr((const struct sockaddr *)peer, text, sizeof(text));
    l->accepted++;
    double refused = throttle_refused_for(&l->throttle, (const struct sockaddr *)peer, inc_now_s());
    if (refused > 0) {
        char why[128];
        snprintf(why, sizeof(why),
                 "too many failed handshakes from this address: refused for %.0f more s",
                 refused + 0.5);
        l->refused++;
        refuse_now(fd, INCMOE_ERR_AUTH, why);
        return;
    }
    listener_conn_t *c = l->npending < LISTENER_MAX_PENDING ? malloc(sizeof(*c)) : NULL;
    if (c == NULL) {
        l->refused++;
        log_failure(l, text, "too many handshakes in progress: connection closed");
        refuse_now(fd, INCMOE_ERR_UNREACHABLE, "the switch is busy with other handshakes");
        return;
    }
    c->fd = fd;
    c->peer = *peer;
    snprintf(c->peer_text, sizeof(c->peer_text), "%s", text);
    c->deadline = inc_now_s() + LISTENER_DEADLINE_MS / 1000.0;
    c->events = POLLIN;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    inc_boot_init(&c->boot, INC_BOOT_SERVER, l->key, l->key_len, l->worker_addr,
                  l->worker_addr_len);
    l->pending[l->npending++] = c;
    conn_step(l, l->npending - 1);
}

static void accept_burst(listener_t *l)
{
    for (int k = 0; k < LISTENER_ACCEPT_BURST; k++) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accept_one(l, fd, &peer);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if ((errno == EMFILE || errno == ENFILE) && l->spare_fd >= 0) {
            /* Out of descriptors: shed the connection, or it stays readable and the loop spins. */
            close(l->spare_fd);
            fd = accept(l->fd, NULL, NULL);
            if (fd >= 0)
                close(fd);
            l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            l->refused++;
            log_failure(l, "?", "out of file descriptors: connection closed");
            continue;
        }
        return; /* EAGAIN, or an error the next turn will see again */
    }
}

void listener_service(listener_t *l, const struct pollfd *fds, int nfds)
{
    double now = inc_now_s();
    /* Backwards: removing i moves the last connection into i, one already handled. */
    for (int i = l->npending - 1; i >= 0; i--) {
        listener_conn_t *c = l->pending[i];
        const struct pollfd *p = 1 + i < nfds && fds[1 + i].fd == c->fd ? &fds[1 + i] : NULL;
        if (now > c->deadline) /* also a peer that trickles bytes to stay alive */
            conn_failed(l, i, "no complete handshake within the deadline");
        else if (p != NULL && p->revents != 0)
            conn_step(l, i);
    }
    if (nfds > 0 && fds[0].fd == l->fd && (fds[0].revents & POLLIN))
        accept_burst(l);
}

void listener_close(listener_t *l)
{
    while (l->npending > 0)
        conn_remove(l, l->npending - 1);
    if (l->fd >= 0)
        close(l->fd);
    if (l->spare_fd >= 0)
        close(l->spare_fd);
    l->fd = l->spare_fd = -1;
}
