/*
 * listener.h - the switch's public port: a non-blocking TCP listener that runs
 * the bootstrap handshake (base/bootstrap.h) with each connection, on the
 * event loop.  It never blocks: every socket is non-blocking and each
 * connection reads only what the handshake still needs.  Bounds:
 *   - LISTENER_DEADLINE_MS per unauthenticated connection, then it is closed;
 *   - LISTENER_MAX_PENDING unauthenticated connections at once; beyond that a
 *     new connection is accepted and closed at once;
 *   - a source whose handshakes keep failing is refused for a growing period
 *     (throttle.h), and failures are logged at most LISTENER_LOG_BURST lines
 *     per LISTENER_LOG_WINDOW_S seconds.
 * A completed handshake hands its session (token and the rank's UCX worker
 * address) to on_session.
 */
#ifndef INCMOE_SWITCH_LISTENER_H
#define INCMOE_SWITCH_LISTENER_H

#include <poll.h>
#include <sys/socket.h>

#include "throttle.h"

#include "base/bootstrap.h"

#define LISTENER_DEADLINE_MS  5000
#define LISTENER_MAX_PENDING  64
#define LISTENER_ACCEPT_BURST 64 /* accepts per loop turn, so a flood cannot starve UCX */
#define LISTENER_LOG_BURST    10
#define LISTENER_LOG_WINDOW_S 10.0

typedef struct {
    int fd;
    double deadline;
    short events;
    struct sockaddr_storage peer;
    char peer_text[64];
    inc_boot_t boot;
} listener_conn_t;

typedef struct {
    int fd;
    int spare_fd; /* held open so a full descriptor table can still shed connections */
    listener_conn_t *pending[LISTENER_MAX_PENDING];
    int npending;
    const void *key;
    size_t key_len;
    const void *worker_addr;
    size_t worker_addr_len;
    throttle_t throttle;
    double log_window;
    unsigned logged, suppressed;
    unsigned long long accepted, refused, failed, completed;
    void (*on_session)(void *arg, const inc_boot_t *boot, const char *peer);
    void *arg;
} listener_t;

/* Listen on addr; where gets the bound "HOST:PORT". */
incmoe_status_t listener_open(listener_t *l, const struct sockaddr *addr, socklen_t addr_len,
                              const void *key, size_t key_len, const void *worker_addr,
                              size_t worker_addr_len, char *where, size_t where_len);
/* The descriptors to poll: the listening one, then each pending connection's. */
int listener_pollfds(const listener_t *l, struct pollfd *fds, int max);
/* Milliseconds until the nearest handshake deadline (cap if none is nearer). */
int listener_timeout_ms(const listener_t *l, int cap);
/* After poll: accept, move handshakes on, close the expired and the finished. */
void listener_service(listener_t *l, const struct pollfd *fds, int nfds);
void listener_close(listener_t *l);

#endif
