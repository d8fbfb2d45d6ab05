/* ucx_util.c - UCX context/worker setup, waiting, address parsing. */
#include "ucx_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "wire.h"

/* How long a node without an event fd sleeps between two progress calls. */
#define NODE_NAP_US 100

incmoe_status_t inc_ucx_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return INCMOE_OK;
    case UCS_INPROGRESS:
        return INCMOE_IN_PROGRESS;
    case UCS_ERR_NO_MEMORY:
        return INCMOE_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
        return INCMOE_ERR_INVALID_ARG;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_INVALID_ADDR:
        return INCMOE_ERR_UNREACHABLE;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return INCMOE_ERR_PEER_FAILED;
    case UCS_ERR_TIMED_OUT:
        return INCMOE_ERR_TIMEOUT;
    default:
        return INCMOE_ERR_TRANSPORT;
    }
}

/* Is addr one of the wildcard addresses (0.0.0.0, ::)? */
static int is_wildcard(const struct sockaddr *addr)
{
    static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
    if (addr->sa_family == AF_INET)
        return ((const struct sockaddr_in *)addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    return memcmp(&((const struct sockaddr_in6 *)addr)->sin6_addr, &any6, sizeof(any6)) == 0;
}

static int same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return a->sa_family == AF_INET6 &&
           memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Append ",item" (or "item" first) to out; 0 when it does not fit. */
static int list_add(char *out, size_t out_len, const char *item)
{
    size_t n = strlen(out);
    int w = snprintf(out + n, out_len - n, "%s%s", n > 0 ? "," : "", item);
    if (w < 0 || (size_t)w >= out_len - n) {
        out[n] = '\0';
        return 0;
    }
    return 1;
}

void inc_ucx_served_devices(const struct sockaddr *served, char *out, size_t out_len)
{
    out[0] = '\0';
    if (served == NULL || (served->sa_family != AF_INET && served->sa_family != AF_INET6) ||
        is_wildcard(served))
        return;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return;
    /* The interface holding the address, else one whose IPv4 network holds it (127.0.0.2 is
       lo's though lo holds 127.0.0.1/8). */
    for (struct ifaddrs *i = ifs; i != NULL && out[0] == '\0'; i = i->ifa_next)
        if (i->ifa_addr != NULL && same_ip(i->ifa_addr, served))
            list_add(out, out_len, i->ifa_name);
    for (struct ifaddrs *i = ifs; i != NULL && out[0] == '\0'; i = i->ifa_next)
        if (i->ifa_addr != NULL && i->ifa_netmask != NULL && served->sa_family == AF_INET &&
            i->ifa_addr->sa_family == AF_INET) {
            uint32_t mask = ((const struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
            if ((((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr & mask) ==
                (((const struct sockaddr_in *)served)->sin_addr.s_addr & mask))
                list_add(out, out_len, i->ifa_name);
        }
    freeifaddrs(ifs);
    if (out[0] == '\0')
        return;
    /* RDMA ports ("mlx5_0:1") are network devices too: every one stays, so restricting UCX's
       TCP to the served interface never takes verbs away from a fabric. */
    DIR *d = opendir("/sys/class/infiniband");
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports", e->d_name);
        DIR *p = opendir(path);
        for (struct dirent *q; p != NULL && (q = readdir(p)) != NULL;) {
            char item[NAME_MAX + 16];
            if (q->d_name[0] != '.' &&
                snprintf(item, sizeof(item), "%s:%s", e->d_name, q->d_name) < (int)sizeof(item))
                list_add(out, out_len, item);
        }
        if (p != NULL)
            closedir(p);
    }
    if (d != NULL)
        closedir(d);
}

/*
 * Restrict the context's network devices to those serving `served` (see
 * inc_ucx_served_devices) unless the user chose them (UCX_NET_DEVICES).  On
 * this context alone, through ucp_config_modify: the process's environment
 * is not the library's to change.
 */
static void config_served(ucp_config_t *config, const struct sockaddr *served)
{
    if (served == NULL || getenv("UCX_NET_DEVICES") != NULL)
        return;
    char devices[512], where[96];
    inc_ucx_served_devices(served, devices, sizeof(devices));
    inc_ucx_format_sockaddr(served, where, sizeof(where));
    if (devices[0] == '\0') {
        log_debug("ucx", "%s is no single interface's: UCX uses every network device", where);
        return;
    }
    ucs_status_t st = ucp_config_modify(config, "NET_DEVICES", devices);
    if (st != UCS_OK)
        log_warn("ucx", "UCX_NET_DEVICES=%s (the devices serving %s) refused: %s", devices, where,
                 ucs_status_string(st));
    else
        log_debug("ucx",
                  "UCX's network devices: %s (those serving %s; UCX_NET_DEVICES "
                  "overrides)",
                  devices, where);
}

/*
 * TCP transport settings every incmoe context takes unless the user set them:
 *   MAX_POLL 1: Debian's 1.13.1, built with assertions, aborts in uct_tcp_iface_handle_events
 *     when an event of one epoll batch names an endpoint an earlier event closed, as when a
 *     peer dies or a stopped process resumes; one event per poll stopped it (RELIABILITY.md,
 *     "UCX 1.13 vs 1.22").
 *   CONN_NB y: UCX connects a worker-address endpoint with a blocking connect() inside
 *     ucp_ep_create by default, so an address naming a host that does not answer holds the
 *     caller (the switch's event loop, NCCL's proxy thread) for the kernel's SYN timeout, and
 *     a connect that fails at once leaves its socket open until the worker goes.
 * and UCP's ZCOPY_THRESH inf (unless UCX_ZCOPY_THRESH is set): eager messages are copied, never
 * sent zero-copy.  1.13's TCP transport completes a zero-copy send still in its socket a second
 * time when the endpoint fails or is closed (`uct_iface.h:884 Assertion 'comp->count > 0' failed
 * ... status=-80`: both leaves and three ranks of a tree job that failed on the testbed
 * aborted), and starts one on an endpoint whose socket is gone (`tcp_ep.c:908 Assertion
 * 'ep->fd != -1'`); with copied sends the same failures abort nowhere (RELIABILITY.md,
 * "Dispatch and combine over a tree on the testbed").
 * ucp_config_modify reaches a transport's setting on this context alone: 1.13 takes the name
 * without the transport's prefix ("MAX_POLL"; "TCP_MAX_POLL" it keeps and never applies), 1.22
 * only the prefixed one, refusing the other.  A context without TCP would warn that the key
 * went unused, so a UCX_TLS without tcp skips them.
 */
static const struct {
    const char *name, *value;
} tcp_settings[] = {{"MAX_POLL", "1"}, {"CONN_NB", "y"}};

static int tls_has_tcp(void)
{
    const char *tls = getenv("UCX_TLS");
    if (tls == NULL)
        return 1;
    if (tls[0] == '^')
        return strstr(tls, "tcp") == NULL;
    return strstr(tls, "tcp") != NULL || strstr(tls, "all") != NULL;
}

static void config_tcp(ucp_config_t *config)
{
    if (!tls_has_tcp())
        return;
    for (size_t i = 0; i < sizeof(tcp_settings) / sizeof(tcp_settings[0]); i++) {
        char env[64], prefixed[64];
        snprintf(env, sizeof(env), "UCX_TCP_%s", tcp_settings[i].name);
        snprintf(prefixed, sizeof(prefixed), "TCP_%s", tcp_settings[i].name);
        if (getenv(env) != NULL)
            continue;
        ucs_status_t st = ucp_config_modify(config, tcp_settings[i].name, tcp_settings[i].value);
        if (st == UCS_ERR_INVALID_PARAM)
            st = ucp_config_modify(config, prefixed, tcp_settings[i].value);
        if (st != UCS_OK)
            log_warn("ucx", "%s=%s refused: %s", env, tcp_settings[i].value, ucs_status_string(st));
    }
    if (getenv("UCX_ZCOPY_THRESH") == NULL) {
        ucs_status_t st = ucp_config_modify(config, "ZCOPY_THRESH", "inf");
        if (st != UCS_OK)
            log_warn("ucx", "UCX_ZCOPY_THRESH=inf refused: %s", ucs_status_string(st));
    }
}

/* A UCX context from the environment's UCX_* configuration, its network devices those serving
   `served` (NULL: UCX's own choice); why names it in errors. */
static incmoe_status_t context_open(const ucp_params_t *params, const char *why,
                                    const struct sockaddr *served, ucp_context_h *ctx)
{
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        log_error("ucx", "ucp_config_read: %s", ucs_status_string(st));
        return INCMOE_ERR_TRANSPORT;
    }
    config_served(config, served);
    config_tcp(config);
    st = ucp_init(params, config, ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        log_error("ucx", "ucp_init%s: %s", why, ucs_status_string(st));
        return INCMOE_ERR_TRANSPORT;
    }
    return INCMOE_OK;
}

incmoe_status_t inc_ucx_memory_types(uint64_t *types)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_AM};
    ucp_context_h ctx;
    if (context_open(&params, " (to ask UCX's memory types)", NULL, &ctx) != INCMOE_OK)
        return INCMOE_ERR_TRANSPORT;
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    ucs_status_t st = ucp_context_query(ctx, &attr);
    ucp_cleanup(ctx);
    if (st != UCS_OK) {
        log_error("ucx", "ucp_context_query: %s", ucs_status_string(st));
        return INCMOE_ERR_TRANSPORT;
    }
    *types = attr.memory_types;
    return INCMOE_OK;
}

incmoe_status_t inc_ucx_node_open_with(inc_ucx_node_t *node, uint64_t features,
                                       ucs_thread_mode_t thread_mode, const struct sockaddr *served)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = features,
        .mt_workers_shared = 0,
    };
    if (context_open(&params, "", served, &node->context) != INCMOE_OK)
        return INCMOE_ERR_TRANSPORT;
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = thread_mode,
    };
    ucs_status_t st = ucp_worker_create(node->context, &wparams, &node->worker);
    if (st != UCS_OK) {
        log_error("ucx", "ucp_worker_create: %s", ucs_status_string(st));
        goto err_cleanup_context;
    }
    node->event_fd = -1;
    if (features & UCP_FEATURE_WAKEUP) {
        st = ucp_worker_get_efd(node->worker, &node->event_fd);
        if (st != UCS_OK) {
            log_error("ucx", "ucp_worker_get_efd: %s", ucs_status_string(st));
            goto err_destroy_worker;
        }
    }
    return INCMOE_OK;

err_destroy_worker:
    ucp_worker_destroy(node->worker);
err_cleanup_context:
    ucp_cleanup(node->context);
    return INCMOE_ERR_TRANSPORT;
}

incmoe_status_t inc_ucx_node_open(inc_ucx_node_t *node, const struct sockaddr *served)
{
    /* One single-threaded worker per progress thread: shared MULTI workers are far slower. */
    return inc_ucx_node_open_with(node, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, UCS_THREAD_MODE_SINGLE,
                                  served);
}

void inc_ucx_node_close(inc_ucx_node_t *node)
{
    if (node->worker != NULL) {
        inc_ucx_worker_settle(node, INC_UCX_CLOSE_SETTLE_MS);
        ucp_worker_destroy(node->worker);
    }
    if (node->context != NULL)
        ucp_cleanup(node->context);
    node->worker = NULL;
    node->context = NULL;
}

incmoe_status_t inc_ucx_parse_hostport(const char *text, struct sockaddr_storage *addr,
                                       socklen_t *addr_len, int allow_any_port)
{
    if (text == NULL || *text == '\0') {
        log_error("ucx", "empty address: expected HOST:PORT");
        return INCMOE_ERR_INVALID_ARG;
    }
    char host[256];
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof(host)) {
        log_error("ucx", "address '%s' is not HOST:PORT", text);
        return INCMOE_ERR_INVALID_ARG;
    }
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    /* [v6addr]:port */
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') {
        h[strlen(h) - 1] = '\0';
        h++;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535 ||
        (port == 0 && !allow_any_port)) {
        log_error("ucx", "address '%s' has a bad port '%s' (%d-65535)", text, colon + 1,
                  allow_any_port ? 0 : 1);
        return INCMOE_ERR_INVALID_ARG;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(h, NULL, &hints, &res);
    if (rc != 0) {
        log_error("ucx", "cannot resolve host '%s': %s", h, gai_strerror(rc));
        return INCMOE_ERR_UNREACHABLE;
    }
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (addr->ss_family == AF_INET)
        ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    return INCMOE_OK;
}

int inc_ucx_local_toward(const struct sockaddr *peer, socklen_t peer_len,
                         struct sockaddr_storage *local, socklen_t *local_len)
{
    int fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t len = sizeof(*local);
    int rc =
        connect(fd, peer, peer_len) == 0 && getsockname(fd, (struct sockaddr *)local, &len) == 0
            ? 0
            : -1;
    close(fd);
    if (rc != 0)
        return -1;
    if (local->ss_family == AF_INET)
        ((struct sockaddr_in *)local)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)local)->sin6_port = 0;
    *local_len = len;
    return 0;
}

void inc_ucx_format_sockaddr(const struct sockaddr *sa, char *out, size_t out_len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(out, out_len, "%s:%d", host, port);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(out, out_len, "[%s]:%d", host, port);
    }
}

int inc_ucx_node_wait(inc_ucx_node_t *node, int extra_fd, int timeout_ms)
{
    if (ucp_worker_progress(node->worker) != 0)
        return 1;
    if (node->event_fd < 0) {
        /* No wakeup feature, so nothing to sleep on: a nap far shorter than any timeout. */
        if (timeout_ms > 0)
            nanosleep(&(struct timespec){.tv_nsec = NODE_NAP_US * 1000}, NULL);
        return ucp_worker_progress(node->worker) != 0;
    }
    ucs_status_t st = ucp_worker_arm(node->worker);
    if (st == UCS_ERR_BUSY)
        return 1; /* events arrived meanwhile: progress again */
    struct pollfd fds[2] = {{node->event_fd, POLLIN, 0}, {extra_fd, POLLIN, 0}};
    int rc = poll(fds, extra_fd >= 0 ? 2 : 1, timeout_ms);
    if (rc < 0 && errno != EINTR)
        log_warn("ucx", "poll: %s", strerror(errno));
    return ucp_worker_progress(node->worker) != 0;
}

ucs_status_t inc_ucx_request_wait(inc_ucx_node_t *node, ucs_status_ptr_t request, int timeout_ms)
{
    if (request == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(request))
        return UCS_PTR_STATUS(request);
    double deadline = inc_now_s() + timeout_ms / 1000.0;
    ucs_status_t st;
    while ((st = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        if (inc_now_s() > deadline) {
            /* Freeing an incomplete request lets UCX release it when it ends. */
            st = UCS_ERR_TIMED_OUT;
            break;
        }
        inc_ucx_node_wait(node, -1, 10);
    }
    ucp_request_free(request);
    return st;
}

ucs_status_t inc_ucx_worker_settle(inc_ucx_node_t *node, int timeout_ms)
{
    ucp_request_param_t param = {.op_attr_mask = 0};
    return inc_ucx_request_wait(node, ucp_worker_flush_nbx(node->worker, &param), timeout_ms);
}

/* Close ep with the given flags and progress until UCX is done with it, at most timeout_ms. */
static ucs_status_t ep_close_wait(inc_ucx_node_t *node, ucp_ep_h ep, unsigned flags, int timeout_ms)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = flags};
    return inc_ucx_request_wait(node, ucp_ep_close_nbx(ep, &param), timeout_ms);
}

void inc_ucx_ep_close(inc_ucx_node_t *node, ucp_ep_h ep, int force, int timeout_ms)
{
    ucs_status_t st = UCS_ERR_CANCELED;
    if (!force) {
        ucp_request_param_t param = {.op_attr_mask = 0};
        st = inc_ucx_request_wait(node, ucp_ep_flush_nbx(ep, &param), timeout_ms);
        if (st != UCS_OK)
            log_debug("ucx", "endpoint flush: %s; closing it by force", ucs_status_string(st));
    }
    if (st == UCS_OK) /* nothing queued any more: a graceful close tells the peer */
        st = ep_close_wait(node, ep, 0, timeout_ms);
    else /* fails what is still queued, so no request outlives the endpoint */
        st = ep_close_wait(node, ep, UCP_EP_CLOSE_FLAG_FORCE, timeout_ms);
    if (st != UCS_OK)
        log_debug("ucx", "endpoint close: %s", ucs_status_string(st));
}

/* The parameters of an active message's send or receive that completes through a callback
   with arg, never within the call that posts it; over memh when it is not NULL.  The caller
   sets the callback. */
static ucp_request_param_t callback_param(void *arg, ucp_mem_h memh)
{
    ucp_request_param_t param = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .user_data = arg,
    };
    if (memh != NULL) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = memh;
    }
    return param;
}

ucs_status_t inc_ucx_am_send(ucp_ep_h ep, const void *hdr, size_t hdr_len, const void *payload,
                             size_t length, uint32_t flags, ucp_mem_h memh,
                             ucp_send_nbx_callback_t cb, void *arg)
{
    ucp_request_param_t param = callback_param(arg, memh);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.cb.send = cb;
    param.flags = flags;
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, INCMOE_AM_ID, hdr, hdr_len, payload, length, &param);
    if (!UCS_PTR_IS_ERR(req))
        return UCS_OK;
    cb(NULL, UCS_PTR_STATUS(req), arg);
    return UCS_PTR_STATUS(req);
}

void inc_ucx_am_recv_data(ucp_worker_h worker, void *desc, void *buf, size_t length, ucp_mem_h memh,
                          ucp_am_recv_data_nbx_callback_t cb, void *arg)
{
    ucp_request_param_t rp = callback_param(arg, memh);
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    rp.cb.recv_am = cb;
    rp.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker, desc, buf, length, &rp);
    if (UCS_PTR_IS_ERR(req))
        cb(NULL, UCS_PTR_STATUS(req), 0, arg);
}
