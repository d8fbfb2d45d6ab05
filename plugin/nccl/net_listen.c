/*
 * net_listen.c - listen() and closeListen(): the TCP bootstrap socket on this
 * host's address (net_init.c's) and the accept() handshake (net_handshake.c)
 * a listen comm carries; the top of the net, above the handshake it starts.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net.h"

/* A non-blocking TCP listener on this host's address, any port. */
static int listen_socket(struct sockaddr_storage *bound)
{
    int fd = socket(net_proc.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage a = net_proc.addr;
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&a)->sin6_port = 0;
    socklen_t len = sizeof(*bound);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, net_proc.addr_len) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)bound, &len) != 0) {
        char text[96];
        inc_ucx_format_sockaddr((struct sockaddr *)&a, text, sizeof(text));
        PWARN("cannot listen on %s: %s (set INCMOE_NCCL_ADDR to this host's address)", text,
              strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

ncclResult_t net_listen(int dev, void *handle, void **listen_comm)
{
    if (plugin_check_dev(dev) != ncclSuccess || handle == NULL || listen_comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net_proc.lock);
    ncclResult_t res = ncclSystemError;
    net_listen_t *l = NULL;
    struct sockaddr_storage bound;
    if (!net_ready("listen"))
        goto out;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        goto out;
    l->id = net_new_id();
    l->accept = net_accept_new();
    if (l->accept == NULL)
        goto out;
    l->fd = listen_socket(&bound);
    if (l->fd < 0)
        goto out;
    net_handle_t *h = handle;
    memset(h, 0, sizeof(*h));
    h->magic = NET_HANDLE_MAGIC;
    h->listen_id = l->id;
    h->family = bound.ss_family;
    if (bound.ss_family == AF_INET) {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&bound;
        h->port = in4->sin_port;
        memcpy(h->ip, &in4->sin_addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&bound;
        h->port = in6->sin6_port;
        memcpy(h->ip, &in6->sin6_addr, 16);
    }
    *listen_comm = l;
    l = NULL;
    res = ncclSuccess;
out:
    if (l != NULL)
        free(l->accept);
    free(l);
    pthread_mutex_unlock(&net_proc.lock);
    return res;
}

ncclResult_t net_close_listen(void *listen_comm)
{
    net_listen_t *l = listen_comm;
    if (l == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&net_proc.lock);
    net_accept_free(l->accept);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
    pthread_mutex_unlock(&net_proc.lock);
    return ncclSuccess;
}
