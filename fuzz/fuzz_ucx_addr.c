/*
 * fuzz_ucx_addr.c - libFuzzer target for inc_ucx_addr_check (base/ucx_addr.c),
 * the check a peer's UCX worker address passes before ucp_ep_create().
 *
 * Input: a 16-bit little-endian length L, then L bytes of the local worker's
 * own address (L 0: none), then the peer's address (the rest).  The seeds
 * (fuzz/corpus/ucx_addr/) are real addresses packed by UCX 1.13.1 and 1.22.0
 * (v1 and v2 layouts, with and without UCX_ADDRESS_DEBUG_INFO, several
 * UCX_TLS/UCX_NET_DEVICES), alone and in pairs.
 *
 * The oracle is not the check's own walk: whenever the check passes an
 * address, unpack_like_ucx() reads it the way ucp_address_unpack() of both
 * versions does (src/ucp/wireup/address.c: no length, abort on an unknown
 * version, byte-extended fields, the 1.22 reading of a v1 md index) and then
 * the way lane selection uses it.  A read past the input is an ASan report, a
 * version UCX would abort on or an index out of UCX's arrays is abort(), and a
 * transport of the local worker handed NULL (an empty address where the local
 * worker's are never empty) is abort().
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ucx_addr.h"

#define MAX_ENTRIES 128 /* UCP_MAX_RESOURCES */

typedef struct {
    uint16_t csum;
    unsigned md113, md122; /* the index as each version reads it */
    unsigned dev_index;
    size_t dev_len, iface_len;
} entry_t;

static volatile unsigned sink;

/* Every byte a transport would read: ASan sees a read past the input. */
static void touch(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sink += p[i];
}

/* ucp_address_unpack_byte_extended */
static unsigned extended(const uint8_t **p, unsigned mask, int v2)
{
    unsigned v = *(*p)++ & mask;
    if (v2 && v == mask)
        v = *(*p)++;
    return v;
}

/* ucp_address_unpack_release_version with UCP_API_MINOR 22 (UCX 1.22). */
static unsigned release_122(unsigned packed)
{
    int range = 16, delta = (int)(22 % 16) - (int)packed;
    int base = 22 / range + (delta >= range / 2) - (delta <= -range / 2);
    return packed + (unsigned)(base > 0 ? base : 0) * (unsigned)range;
}

/* ucp_address_unpack as both versions run it; the entries, or -1 where UCX returns an error
   (which is no harm). */
static int unpack_like_ucx(const uint8_t *p, entry_t *e)
{
    unsigned ver = p[0] & 0x0f;
    if (ver != 0 && ver != 1)
        abort(); /* ucs_assertv_always(*addr_version == UCP_OBJECT_VERSION_V2) */
    int v2 = ver == 1;
    unsigned flags = v2 ? p[1] : p[0] >> 4;
    p += v2 ? 2 : 1;
    if (!v2 || (flags & 2)) {
        touch(p, 8);
        p += 8;
    }
    if (flags & 4) {
        touch(p, 8);
        p += 8;
    }
    if (flags & 1) {
        size_t n = *p++;
        touch(p, n < 31 ? n : 31); /* UCP_WORKER_ADDRESS_NAME_MAX - 1 */
        p += n;
    }
    if (*p == 0xff)
        return 0;
    int n = 0, last_dev, empty = 0;
    unsigned dev_index = 0, release = 0;
    do {
        empty = *p & 0x80;
        const uint8_t *md_p = p;
        unsigned md = extended(&p, 0x7f, v2);
        unsigned md113 = v2 ? md : (*md_p & 0x1f);
        unsigned dflags = *p & 0xe0;
        last_dev = (dflags & 0x80) != 0;
        size_t dlen = extended(&p, 0x1f, v2);
        if (dflags & 0x40)
            sink += *p++;
        if (dflags & 0x20)
            sink += *p++;
        if (empty && last_dev)
            release = release_122(md & 0x0f);
        const uint8_t *dev = p;
        p += dlen;
        for (int last_tl = empty != 0; !last_tl;) {
            if (n >= MAX_ENTRIES)
                return -1;
            e[n].csum = (uint16_t)(p[0] | p[1] << 8);
            p += 2;
            size_t attr = v2 ? 8 : 16;
            touch(p, attr);
            if (!v2) {
                float bw;
                memcpy(&bw, p + 4, sizeof(bw));
                if (!(bw != 0)) /* a bandwidth that ends <= 0 is UCS_ERR_INVALID_ADDR */
                    return -1;
            }
            const uint8_t *flags_p = p + attr;
            p += attr;
            last_tl = (*p & 0x80) != 0;
            size_t ilen = extended(&p, 0x3f, v2);
            touch(dev, dlen);
            touch(p, ilen);
            e[n].md113 = md113;
            e[n].md122 = md;
            e[n].dev_index = dev_index;
            e[n].dev_len = dlen;
            e[n].iface_len = ilen;
            p += ilen;
            for (int ep_last = !(*flags_p & 0x40), k = 0; !ep_last; k++) {
                if (k >= 6) /* UCP_MAX_LANES of 1.13 */
                    return -1;
                size_t elen = *p++;
                touch(p, elen);
                p += elen;
                ep_last = (*p++ & 0x80) != 0;
            }
            n++;
        }
        dev_index++;
    } while (!last_dev);
    /* 1.22 drops the legacy md bits of a v1 address from a release up to 18 */
    if (!v2 && !(empty && release > 18))
        for (int i = 0; i < n; i++)
            e[i].md122 &= ~0x60u;
    return n;
}

static void check_pair(const uint8_t *own, size_t own_len, const uint8_t *peer, size_t len)
{
    char why[256];
    incmoe_status_t st = inc_ucx_addr_check(peer, len, own, own_len, why, sizeof(why));
    if (st != INCMOE_OK)
        return;
    static entry_t e[MAX_ENTRIES], mine[MAX_ENTRIES];
    int n = unpack_like_ucx(peer, e);
    int m = own != NULL ? unpack_like_ucx(own, mine) : 0;
    for (int i = 0; i < n; i++) {
        /* ae_cmpts[UCP_MAX_MDS], UCS_BIT(md_index) and UCS_BIT(dev_index) in 64-bit maps */
        if (e[i].md113 >= 64 || e[i].md122 >= 64 || e[i].dev_index >= 64)
            abort();
        /* A transport of the local worker whose own addresses are never empty reads the one it
           is handed: UCX hands NULL for an empty one. */
        size_t dev_min = SIZE_MAX, iface_min = SIZE_MAX;
        for (int j = 0; j < m; j++)
            if (mine[j].csum == e[i].csum) {
                dev_min = mine[j].dev_len < dev_min ? mine[j].dev_len : dev_min;
                iface_min = mine[j].iface_len < iface_min ? mine[j].iface_len : iface_min;
            }
        if (dev_min != SIZE_MAX &&
            ((e[i].dev_len == 0 && dev_min > 0) || (e[i].iface_len == 0 && iface_min > 0)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t own_len = (size_t)data[0] | (size_t)data[1] << 8;
    if (own_len > size - 2)
        return 0;
    /* Exact-size copies: a read past either is an ASan report. */
    uint8_t *own = own_len > 0 ? malloc(own_len) : NULL;
    size_t len = size - 2 - own_len;
    uint8_t *peer = malloc(len > 0 ? len : 1);
    if ((own_len > 0 && own == NULL) || peer == NULL) {
        free(own);
        free(peer);
        return 0;
    }
    if (own_len > 0)
        memcpy(own, data + 2, own_len);
    memcpy(peer, data + 2 + own_len, len);
    check_pair(own, own_len, peer, len);
    free(own);
    free(peer);
    return 0;
}
