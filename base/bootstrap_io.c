/* bootstrap_io.c - the bootstrap handshake over a non-blocking TCP socket. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"

incmoe_status_t inc_boot_io(inc_boot_t *b, int fd, short *events)
{
    for (;;) {
        const uint8_t *out;
        size_t n = inc_boot_output(b, &out);
        while (n > 0) {
            ssize_t w = send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                *events = POLLOUT;
                return b->status == INCMOE_IN_PROGRESS || b->status == INCMOE_OK
                           ? INCMOE_IN_PROGRESS
                           : b->status;
            }
            if (w <= 0) {
                if (b->status == INCMOE_IN_PROGRESS || b->status == INCMOE_OK) {
                    snprintf(b->why, sizeof(b->why), "sending the handshake: %s", strerror(errno));
                    b->status = INCMOE_ERR_UNREACHABLE;
                }
                return b->status;
            }
            inc_boot_sent(b, (size_t)w);
            n = inc_boot_output(b, &out);
        }
        if (b->status != INCMOE_IN_PROGRESS)
            return b->status; /* done (or failed, its REJECT sent) */
        uint8_t buf[INC_BOOT_HDR + INC_BOOT_MAX_PAYLOAD];
        size_t want = inc_boot_want(b);
        /* Only what the current message still needs: nothing past the handshake is taken. */
        ssize_t r = recv(fd, buf, want < sizeof(buf) ? want : sizeof(buf), MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            *events = POLLIN;
            return INCMOE_IN_PROGRESS;
        }
        if (r <= 0) {
            snprintf(b->why, sizeof(b->why),
                     "the peer closed the connection during the handshake%s%s", r < 0 ? ": " : "",
                     r < 0 ? strerror(errno) : "");
            b->status = INCMOE_ERR_UNREACHABLE;
            return b->status;
        }
        inc_boot_feed(b, buf, (size_t)r, NULL);
    }
}

int inc_boot_connect_start(const struct sockaddr *addr, socklen_t addr_len, char *why,
                           size_t why_len)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_len, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, addr, addr_len) != 0 && errno != EINPROGRESS) {
        snprintf(why, why_len, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int inc_boot_connect_done(int fd, char *why, size_t why_len)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 0)
        return 1;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0)
        return 0;
    if (err == EINPROGRESS || err == EALREADY)
        return 1;
    snprintf(why, why_len, "connect: %s", strerror(err));
    return -1;
}

incmoe_status_t inc_boot_run_client(inc_boot_t *b, const struct sockaddr *addr, socklen_t addr_len,
                                    int timeout_ms)
{
    if (b->status != INCMOE_IN_PROGRESS)
        return b->status;
    int fd = inc_boot_connect_start(addr, addr_len, b->why, sizeof(b->why));
    if (fd < 0)
        return b->status = INCMOE_ERR_UNREACHABLE;
    double deadline = inc_now_s() + timeout_ms / 1000.0;
    int connected = 0;
    short events = POLLOUT;
    incmoe_status_t st = INCMOE_IN_PROGRESS;
    while (st == INCMOE_IN_PROGRESS) {
        double left = deadline - inc_now_s();
        if (left <= 0) {
            snprintf(b->why, sizeof(b->why),
                     connected ? "no answer to the handshake within %d ms (stopped or overloaded?)"
                               : "the connection was not accepted within %d ms",
                     timeout_ms);
            st = b->status = INCMOE_ERR_TIMEOUT;
            break;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR) {
            snprintf(b->why, sizeof(b->why), "poll: %s", strerror(errno));
            st = b->status = INCMOE_ERR_UNREACHABLE;
            break;
        }
        if (rc <= 0)
            continue;
        if (!connected) {
            int c = inc_boot_connect_done(fd, b->why, sizeof(b->why));
            if (c < 0) {
                st = b->status = INCMOE_ERR_UNREACHABLE;
                break;
            }
            if (c > 0)
                continue;
            connected = 1;
        }
        st = inc_boot_io(b, fd, &events);
    }
    close(fd);
    return st;
}
