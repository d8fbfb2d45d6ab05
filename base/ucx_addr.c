/*
 * ucx_addr.c - inc_ucx_addr_check: a peer's packed UCX worker address walked
 * as ucp_address_unpack() walks it (UCX 1.13.1 and 1.22.0,
 * src/ucp/wireup/address.c), with the length in hand.
 *
 * The layout of an address from ucp_worker_get_address() (non-unified mode):
 *
 *   header   v1: 1 byte, version 0 in bits 0..3, flags in bits 4..7;
 *            v2: 2 bytes, version 1 (and 1.22's release number in bits 4..7), then flags
 *   uuid     8 bytes: always in v1 (UCX before 1.12 set no flag for it), in v2 if flagged
 *   client   8 bytes, if flagged
 *   name     1 length byte and that many bytes, if flagged (UCX_ADDRESS_DEBUG_INFO=y)
 *   then 0xff alone (no transports), or devices, each:
 *     md       1 byte: bit 7 "no transports", the memory domain's index below;
 *              v2 extends an index of 0x7f into the next byte
 *     dev len  1 byte: bit 7 last device, bit 6 a paths byte follows, bit 5 a
 *              system-device byte follows, the device address length below;
 *              v2 extends a length of 0x1f into the next byte
 *     [paths] [sys_dev] device address
 *     unless "no transports", transports, each:
 *       2 bytes transport-name checksum, the interface attributes (v1 16 bytes:
 *       three floats and prio/flags; v2 8 bytes), 1 byte: bit 7 last transport,
 *       bit 6 endpoint addresses follow, the interface address length below
 *       (v2 extends 0x3f), the interface address
 *
 * Besides staying inside the bytes, the walk refuses what UCX would index or
 * shift with out of range while it selects lanes: a memory-domain index of 64
 * or more (UCP_MAX_MDS entries, a 64-bit md map), more than 64 devices (a
 * 64-bit device mask), more than 128 transports (UCP_MAX_RESOURCES), v1
 * floats that are not finite (they feed UCX's lane scores), and an empty
 * address for a transport whose addresses are never empty here.  Endpoint
 * addresses belong to UCX's own wire-up messages, never to a worker's
 * address: an address carrying them is refused.
 */
#include "ucx_addr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vformat.h"

enum {
    HDR_DEBUG_INFO = 1u << 0, /* the worker's name is packed */
    HDR_WORKER_UUID = 1u << 1,
    HDR_CLIENT_ID = 1u << 2,
    HDR_AM_ONLY = 1u << 3,
    HDR_FLAGS = HDR_DEBUG_INFO | HDR_WORKER_UUID | HDR_CLIENT_ID | HDR_AM_ONLY,
};

#define NULL_RESOURCE  0xffu
#define MD_EMPTY_DEV   0x80u /* the device has no transports */
#define MD_INDEX_MASK  0x7fu
#define DEV_LAST       0x80u
#define DEV_NUM_PATHS  0x40u
#define DEV_SYS_DEVICE 0x20u
#define DEV_LEN_MASK   0x1fu
#define IFACE_LAST     0x80u
#define IFACE_HAS_EP   0x40u
#define IFACE_LEN_MASK 0x3fu
#define ATTR_V1_BYTES  16  /* float overhead, bandwidth, lat_ovh; uint32 prio_cap_flags */
#define ATTR_V2_BYTES  8   /* fp8 overhead, bandwidth, latency; prio; u16 seg_size, flags */
#define MAX_MDS        64  /* UCP_MAX_MDS, and the bits of ucp_md_map_t */
#define MAX_DEVICES    64  /* the bits of UCX's remote device mask */
#define MAX_TRANSPORTS 128 /* UCP_MAX_RESOURCES */

/* The transports of the local worker's address: each name checksum with the shortest device
   and interface addresses packed for it (0: one of them is empty). */
typedef struct {
    int n;
    uint16_t csum[MAX_TRANSPORTS];
    uint8_t dev_len[MAX_TRANSPORTS], iface_len[MAX_TRANSPORTS];
} shape_t;

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    unsigned version; /* 1 or 2 */
    size_t dev_len;   /* the current device's address length */
    int ndev, ntl;
    shape_t *record;    /* the local address's walk fills it */
    const shape_t *ref; /* a peer's walk is held to it */
    const char *whose;
    char *why;
    size_t why_len;
} walk_t;

static incmoe_status_t bad(walk_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static incmoe_status_t bad(walk_t *w, const char *fmt, ...)
{
    if (w->why != NULL && w->why_len > 0) {
        char what[200];
        INC_VFORMAT(what, sizeof(what), fmt);
        snprintf(w->why, w->why_len, "%sUCX worker address (%zu bytes): %s at byte %zu", w->whose,
                 w->len, what, w->pos);
    }
    return INCMOE_ERR_PROTOCOL;
}

/* Are n more bytes there? */
static int has(const walk_t *w, size_t n)
{
    return w->len - w->pos >= n;
}

/* A value packed in the low bits of a byte under mask; v2 moves a value of mask itself into
   the next byte.  -1 when the bytes end first. */
static int byte_extended(walk_t *w, unsigned mask)
{
    if (!has(w, 1))
        return -1;
    unsigned v = w->p[w->pos++] & mask;
    if (w->version == 2 && v == mask) {
        if (!has(w, 1))
            return -1;
        v = w->p[w->pos++];
    }
    return (int)v;
}

static incmoe_status_t walk_header(walk_t *w)
{
    if (!has(w, 1))
        return bad(w, "empty");
    unsigned field = w->p[0] & 0x0fu; /* ucp_object_version_t: 0 is v1, 1 is v2 */
    w->version = field + 1;
    unsigned flags;
    if (w->version == 1) {
        flags = w->p[0] >> 4;
        w->pos = 1;
    } else if (w->version == 2) {
        if (!has(w, 2))
            return bad(w, "v2 header cut short");
        flags = w->p[1];
        w->pos = 2;
        if (flags & ~HDR_FLAGS)
            return bad(w, "unknown header flags 0x%x", flags & ~HDR_FLAGS);
    } else {
        return bad(w, "address version field %u (UCX packs 0 or 1 and aborts on any other)", field);
    }
    size_t fixed = ((w->version == 1 || (flags & HDR_WORKER_UUID)) ? 8 : 0) +
                   ((flags & HDR_CLIENT_ID) ? 8 : 0);
    if (!has(w, fixed))
        return bad(w, "worker uuid or client id cut short");
    w->pos += fixed;
    if (flags & HDR_DEBUG_INFO) {
        if (!has(w, 1) || !has(w, 1 + (size_t)w->p[w->pos]))
            return bad(w, "worker name cut short");
        w->pos += 1 + (size_t)w->p[w->pos];
    }
    return INCMOE_OK;
}

/*
 * UCX hands a transport the device and interface addresses as pointers, NULL
 * for a length of 0, and the transport reads its own structure from them
 * (TCP: flags and family, then an IP or a host id, as those two say).  A
 * transport the local worker has too gets the peer's bytes: where every
 * address the local worker packs for it is non-empty, the transport reads
 * one, and an empty one from the peer would be a NULL dereference (TCP's on
 * both versions: the mutation probe found it).  A transport the local worker
 * lacks is never handed the bytes (UCX matches the checksum first).  How far
 * a transport reads into a non-empty field is its own structure's business,
 * and may pass the field's end (a 6-byte TCP address flagged loopback is read
 * as 18): callers keep slack after the address (inc_ucx_addr_check's
 * INC_UCX_ADDR_SLACK).
 */
static incmoe_status_t transport_lengths(walk_t *w, uint16_t csum, size_t iface_len)
{
    if (w->record != NULL) {
        shape_t *s = w->record;
        int i = 0;
        while (i < s->n && s->csum[i] != csum)
            i++;
        if (i == s->n) {
            s->n++;
            s->csum[i] = csum;
            s->dev_len[i] = UINT8_MAX;
            s->iface_len[i] = UINT8_MAX;
        }
        if (w->dev_len < s->dev_len[i])
            s->dev_len[i] = (uint8_t)w->dev_len;
        if (iface_len < s->iface_len[i])
            s->iface_len[i] = (uint8_t)iface_len;
    }
    for (int i = 0; w->ref != NULL && i < w->ref->n; i++)
        if (w->ref->csum[i] == csum && ((w->dev_len == 0 && w->ref->dev_len[i] > 0) ||
                                        (iface_len == 0 && w->ref->iface_len[i] > 0)))
            return bad(w,
                       "transport 0x%04x with an empty %s address (this side's are %u bytes or "
                       "more: UCX would hand the transport NULL)",
                       csum, w->dev_len == 0 ? "device" : "interface",
                       w->dev_len == 0 ? w->ref->dev_len[i] : w->ref->iface_len[i]);
    return INCMOE_OK;
}

/* One transport of a device: checksum, attributes, interface address. */
static incmoe_status_t walk_transport(walk_t *w, int *last)
{
    if (w->ntl == MAX_TRANSPORTS)
        return bad(w, "more than %d transports", MAX_TRANSPORTS);
    size_t attr = w->version == 1 ? ATTR_V1_BYTES : ATTR_V2_BYTES;
    if (!has(w, 2 + attr))
        return bad(w, "transport attributes cut short");
    uint16_t csum = (uint16_t)(w->p[w->pos] | w->p[w->pos + 1] << 8);
    if (w->version == 1) {
        float f[3]; /* overhead, bandwidth, latency overhead: UCX packs host floats */
        memcpy(f, w->p + w->pos + 2, sizeof(f));
        if (!isfinite(f[0]) || !isfinite(f[1]) || !isfinite(f[2]) || f[0] < 0 || f[2] < 0)
            return bad(w, "transport attributes overhead %g, bandwidth %g, latency %g", f[0], f[1],
                       f[2]);
    }
    w->pos += 2 + attr;
    if (!has(w, 1))
        return bad(w, "interface address length missing");
    uint8_t flags = w->p[w->pos];
    if (flags & IFACE_HAS_EP)
        return bad(w, "endpoint addresses (a worker address has none)");
    int n = byte_extended(w, IFACE_LEN_MASK);
    if (n < 0 || !has(w, (size_t)n))
        return bad(w, "interface address cut short");
    incmoe_status_t st = transport_lengths(w, csum, (size_t)n);
    if (st != INCMOE_OK)
        return st;
    w->pos += (size_t)n;
    w->ntl++;
    *last = (flags & IFACE_LAST) != 0;
    return INCMOE_OK;
}

/* One device: md byte, device address, its transports.  *md: its index as 1.22 reads it (a v1
   index with the bits 1.13 packs beside it); *empty: flagged as having no transports. */
static incmoe_status_t walk_device(walk_t *w, int *last, int *empty, int *md)
{
    if (w->ndev == MAX_DEVICES)
        return bad(w, "more than %d devices", MAX_DEVICES);
    if (!has(w, 1))
        return bad(w, "device cut short");
    *empty = (w->p[w->pos] & MD_EMPTY_DEV) != 0;
    *md = byte_extended(w, MD_INDEX_MASK);
    if (*md < 0)
        return bad(w, "memory domain index cut short");
    if (w->version == 2 && *md >= MAX_MDS)
        return bad(w, "memory domain index %d (UCX has %d)", *md, MAX_MDS);
    if (!has(w, 1))
        return bad(w, "device address length missing");
    uint8_t flags = w->p[w->pos];
    int n = byte_extended(w, DEV_LEN_MASK);
    if (n < 0)
        return bad(w, "device address length cut short");
    if (flags & DEV_NUM_PATHS) {
        if (!has(w, 1))
            return bad(w, "path count cut short");
        if (w->p[w->pos] < 2) /* UCX packs the count only when a device has several */
            return bad(w, "path count %u", w->p[w->pos]);
        w->pos++;
    }
    if (flags & DEV_SYS_DEVICE) {
        if (!has(w, 1))
            return bad(w, "system device cut short");
        w->pos++;
    }
    if (!has(w, (size_t)n))
        return bad(w, "device address cut short");
    w->pos += (size_t)n;
    w->dev_len = (size_t)n;
    w->ndev++;
    *last = (flags & DEV_LAST) != 0;
    for (int tl_last = *empty; !tl_last;) {
        incmoe_status_t st = walk_transport(w, &tl_last);
        if (st != INCMOE_OK)
            return st;
    }
    return INCMOE_OK;
}

static incmoe_status_t walk(walk_t *w)
{
    incmoe_status_t st = walk_header(w);
    if (st != INCMOE_OK)
        return st;
    if (!has(w, 1))
        return bad(w, "no device list");
    if (w->p[w->pos] == NULL_RESOURCE) { /* no transports at all: UCX reads nothing more */
        w->pos++;
    } else {
        int last = 0, empty = 0, md = 0, wide_md = 0;
        while (!last) {
            st = walk_device(w, &last, &empty, &md);
            if (st != INCMOE_OK)
                return st;
            wide_md |= md >= MAX_MDS;
        }
        /* v1 readers in 1.22 drop the bits 1.13 packs beside the index (0x60) unless the
           address ends with an empty device naming a newer release, the only place v1 carries
           one: with such a device, every index must fit without them. */
        if (w->version == 1 && empty && wide_md)
            return bad(w, "v1 memory domain index of %d or more beside a release number", MAX_MDS);
    }
    if (w->pos != w->len)
        return bad(w, "%zu bytes after the address's end", w->len - w->pos);
    return INCMOE_OK;
}

incmoe_status_t inc_ucx_addr_check(const void *addr, size_t len, const void *own, size_t own_len,
                                   char *why, size_t why_len)
{
    shape_t mine = {0};
    if (own != NULL) {
        walk_t o = {.p = own,
                    .len = own_len,
                    .record = &mine,
                    .whose = "this worker's own ",
                    .why = why,
                    .why_len = why_len};
        if (walk(&o) != INCMOE_OK)
            return INCMOE_ERR_INVALID_ARG;
    }
    walk_t w = {.p = addr,
                .len = addr == NULL ? 0 : len,
                .ref = own != NULL ? &mine : NULL,
                .whose = "",
                .why = why,
                .why_len = why_len};
    return walk(&w);
}
