/*
 * common.c - what the net and the CollNet share: NCCL's logger, the status
 * mapping at the boundary, and the description of our one device.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

#include "base/config.h"
#include "base/log.h"
#include "base/ucx_util.h"
#include "base/vformat.h"

static ncclDebugLogger_t plugin_logger;

void plugin_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                const char *fmt, ...)
{
    char text[1024];
    INC_VFORMAT(text, sizeof(text), fmt);
    ncclDebugLogger_t logger = plugin_logger;
    if (logger != NULL)
        logger(level, flags, file, line, "NET/" PLUGIN_NAME ": %s", text);
    else if (level == NCCL_LOG_WARN)
        fprintf(stderr, "NET/" PLUGIN_NAME ": %s\n", text);
}

/* The client library's lines go to NCCL's logger, at the closest level. */
static void plugin_log_sink(int level, const char *line)
{
    ncclDebugLogLevel nl = level <= LOG_LEVEL_WARN ? NCCL_LOG_WARN : NCCL_LOG_INFO;
    ncclDebugLogger_t logger = plugin_logger;
    if (logger != NULL)
        logger(nl, NCCL_NET, __FILE__, __LINE__, "%s", line);
    else
        fprintf(stderr, "%s\n", line);
}

void plugin_set_logger(ncclDebugLogger_t logger)
{
    if (logger == NULL)
        return;
    plugin_logger = logger;
    inc_log_set_sink(plugin_log_sink);
}

ncclResult_t plugin_result(incmoe_status_t status)
{
    switch (status) {
    case INCMOE_OK:
    case INCMOE_IN_PROGRESS:
        return ncclSuccess;
    case INCMOE_ERR_INVALID_ARG:
    case INCMOE_ERR_OUT_OF_RANGE:
    case INCMOE_ERR_UNSUPPORTED:
        return ncclInvalidArgument;
    case INCMOE_ERR_BUSY: /* e.g. deregMr of a buffer a collective in flight still uses */
        return ncclInvalidUsage;
    case INCMOE_ERR_NO_MEMORY:
    case INCMOE_ERR_UNREACHABLE:
    case INCMOE_ERR_AUTH:
    case INCMOE_ERR_TIMEOUT:
    case INCMOE_ERR_TRANSPORT:
    case INCMOE_ERR_CLOSED:
        return ncclSystemError;
    case INCMOE_ERR_PEER_FAILED:
    case INCMOE_ERR_PROTOCOL:
    case INCMOE_ERR_MISMATCH:
    case INCMOE_ERR_JOB:
        return ncclRemoteError;
    }
    return ncclInternalError;
}

/* The route toward host:port, found by connecting a UDP socket (sends nothing). */
static int addr_toward(const char *hostport, struct sockaddr_storage *addr, unsigned *addr_len)
{
    struct sockaddr_storage peer;
    socklen_t peer_len, len;
    if (inc_ucx_parse_hostport(hostport, &peer, &peer_len, 0) != INCMOE_OK ||
        inc_ucx_local_toward((struct sockaddr *)&peer, peer_len, addr, &len) != 0)
        return -1;
    *addr_len = len;
    return 0;
}

static int addr_parse_ip(const char *text, struct sockaddr_storage *addr, unsigned *addr_len)
{
    memset(addr, 0, sizeof(*addr));
    struct sockaddr_in *in4 = (struct sockaddr_in *)addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)addr;
    if (inet_pton(AF_INET, text, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        *addr_len = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        *addr_len = sizeof(*in6);
        return 0;
    }
    return -1;
}

/* The first IPv4 address of an interface that is up and not the loopback. */
static int addr_first_interface(struct sockaddr_storage *addr, unsigned *addr_len)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int rc = -1;
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        memset(addr, 0, sizeof(*addr));
        memcpy(addr, i->ifa_addr, sizeof(struct sockaddr_in));
        *addr_len = sizeof(struct sockaddr_in);
        rc = 0;
        break;
    }
    freeifaddrs(ifs);
    return rc;
}

int plugin_local_addr(struct sockaddr_storage *addr, unsigned *addr_len)
{
    const char *explicit_addr = inc_config_get_str("INCMOE_NCCL_ADDR");
    if (explicit_addr != NULL) {
        if (addr_parse_ip(explicit_addr, addr, addr_len) != 0) {
            PWARN("INCMOE_NCCL_ADDR=%s is not an IPv4 or IPv6 address", explicit_addr);
            return -1;
        }
    } else {
        const char *sw = inc_config_get_str("INCMOE_SWITCH");
        if ((sw == NULL || addr_toward(sw, addr, addr_len) != 0) &&
            addr_first_interface(addr, addr_len) != 0)
            addr_parse_ip("127.0.0.1", addr, addr_len);
    }
    if (addr->ss_family == AF_INET)
        ((struct sockaddr_in *)addr)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)addr)->sin6_port = 0;
    return 0;
}

/* Name, PCI path and speed of the interface that holds our address, computed once. */
static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static char dev_ifname[IF_NAMESIZE + 1];
static char *dev_pci_path;
static int dev_speed_mbps = 100000;
static uint64_t dev_guid;

static int same_ip(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return 0;
    if (a->sa_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                      &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr)) == 0;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

static void dev_probe(void)
{
    struct sockaddr_storage addr;
    unsigned len;
    struct ifaddrs *ifs;
    if (plugin_local_addr(&addr, &len) == 0 && getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr != NULL && same_ip(i->ifa_addr, &addr)) {
                snprintf(dev_ifname, sizeof(dev_ifname), "%s", i->ifa_name);
                break;
            }
        }
        freeifaddrs(ifs);
    }
    if (dev_ifname[0] != '\0') {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "/sys/class/net/%s/device", dev_ifname);
        dev_pci_path = realpath(path, NULL); /* NULL for virtual interfaces: NCCL accepts it */
        snprintf(path, sizeof(path), "/sys/class/net/%s/speed", dev_ifname);
        FILE *f = fopen(path, "r");
        int speed;
        if (f != NULL) {
            if (fscanf(f, "%d", &speed) == 1 && speed > 0)
                dev_speed_mbps = speed;
            fclose(f);
        }
    }
    /* A GUID that is the same for the net and the CollNet device in this process. */
    for (const char *p = PLUGIN_NAME "0"; *p; p++)
        dev_guid = dev_guid * 131 + (unsigned char)*p;
    for (const char *p = dev_ifname; *p; p++)
        dev_guid = dev_guid * 131 + (unsigned char)*p;
}

void plugin_get_props(ncclNetProperties_v11_t *props, int ptr_support)
{
    pthread_once(&dev_once, dev_probe);
    memset(props, 0, sizeof(*props));
    props->name = (char *)PLUGIN_NAME "0";
    props->pciPath = dev_pci_path;
    props->guid = dev_guid;
    props->ptrSupport = ptr_support;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = dev_speed_mbps;
    props->port = 1;
    props->latency = 0;
    props->maxComms = 65536;
    props->maxRecvs = NET_MAX_RECVS;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = 0;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = 0;
    props->maxP2pBytes = PLUGIN_MAX_BYTES;
    props->maxCollBytes = PLUGIN_MAX_BYTES;
    props->maxMultiRequestSize = 1;
}

ncclResult_t plugin_check_dev(int dev)
{
    if (dev != 0) {
        PWARN("device %d does not exist: this plugin has one device, 0", dev);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* One physical device: a virtual device can only be made of it, and is it. */
ncclResult_t plugin_make_vdevice(int *d, ncclNetVDeviceProps_t *props)
{
    if (d == NULL || props == NULL || props->ndevs < 1 ||
        props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC) {
        PWARN("makeVDevice: expected 1..%d devices, got %d", NCCL_NET_MAX_DEVS_PER_NIC,
              props ? props->ndevs : -1);
        return ncclInvalidArgument;
    }
    for (int i = 0; i < props->ndevs; i++) {
        if (props->devs[i] != 0) {
            PWARN("makeVDevice: device %d does not exist (only device 0)", props->devs[i]);
            return ncclInvalidArgument;
        }
    }
    *d = 0;
    return ncclSuccess;
}

ncclResult_t plugin_get_props_v9(int dev, ncclNetProperties_v9_t *props, int ptr_support)
{
    if (plugin_check_dev(dev) != ncclSuccess || props == NULL)
        return ncclInvalidArgument;
    ncclNetProperties_v11_t p;
    plugin_get_props(&p, ptr_support);
    /* v9/v10 are v11 without maxMultiRequestSize at the end. */
    props->name = p.name;
    props->pciPath = p.pciPath;
    props->guid = p.guid;
    props->ptrSupport = p.ptrSupport;
    props->regIsGlobal = p.regIsGlobal;
    props->forceFlush = p.forceFlush;
    props->speed = p.speed;
    props->port = p.port;
    props->latency = p.latency;
    props->maxComms = p.maxComms;
    props->maxRecvs = p.maxRecvs;
    props->netDeviceType = p.netDeviceType;
    props->netDeviceVersion = p.netDeviceVersion;
    props->vProps = p.vProps;
    props->maxP2pBytes = p.maxP2pBytes;
    props->maxCollBytes = p.maxCollBytes;
    return ncclSuccess;
}

ncclResult_t plugin_get_props_v11(int dev, ncclNetProperties_v11_t *props, int ptr_support)
{
    if (plugin_check_dev(dev) != ncclSuccess || props == NULL)
        return ncclInvalidArgument;
    plugin_get_props(props, ptr_support);
    return ncclSuccess;
}
