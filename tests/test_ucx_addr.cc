/*
 * test_ucx_addr.cc - inc_ucx_addr_check against real packed addresses (UCX 1.13.1 and 1.22.0,
 * the fuzz corpus's seeds, and the UCX this build runs) and against addresses built here by
 * hand from UCX's layout (src/ucp/wireup/address.c), one defect each.
 */
#include <dirent.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include <ucp/api/ucp.h>

#include "base/ucx_addr.h"
#include "base/ucx_util.h"
}

static const std::string kCorpus = TOP_SRCDIR "/fuzz/corpus/ucx_addr/";

/* The seeds that hold one address: a 2-byte zero length (no own address), then the address. */
static std::map<std::string, std::string> real_addresses()
{
    std::map<std::string, std::string> out;
    DIR *d = opendir(kCorpus.c_str());
    if (d == nullptr)
        return out;
    while (struct dirent *e = readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind("ucx1.", 0) != 0)
            continue;
        std::ifstream f(kCorpus + name, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (bytes.size() > 2 && bytes[0] == 0 && bytes[1] == 0)
            out[name] = bytes.substr(2);
    }
    closedir(d);
    return out;
}

static incmoe_status_t check(const std::string &a, const std::string *own = nullptr,
                             std::string *why = nullptr)
{
    char buf[256] = "";
    incmoe_status_t st = inc_ucx_addr_check(a.data(), a.size(), own ? own->data() : nullptr,
                                            own ? own->size() : 0, buf, sizeof(buf));
    if (why != nullptr)
        *why = buf;
    return st;
}

TEST(UcxAddr, RealAddressesOfBothVersionsPass)
{
    auto real = real_addresses();
    ASSERT_GE(real.size(), 10u) << "seeds missing in " << kCorpus;
    for (auto &[name, a] : real) {
        std::string why;
        EXPECT_EQ(check(a, nullptr, &why), INCMOE_OK) << name << ": " << why;
        EXPECT_EQ(check(a, &a, &why), INCMOE_OK) << name << " against itself: " << why;
    }
    /* Each version's default address against the other's: the same layout. */
    const std::string &a113 = real["ucx1.13_default"], &a122 = real["ucx1.22_default"];
    EXPECT_EQ(check(a113, &a122), INCMOE_OK);
    EXPECT_EQ(check(a122, &a113), INCMOE_OK);
}

TEST(UcxAddr, ThisUcxsOwnAddressPasses)
{
    inc_ucx_node_t node = {};
    ASSERT_EQ(inc_ucx_node_open(&node, nullptr), INCMOE_OK);
    ucp_address_t *addr;
    size_t len;
    ASSERT_EQ(ucp_worker_get_address(node.worker, &addr, &len), UCS_OK);
    std::string a((const char *)addr, len), why;
    EXPECT_EQ(check(a, &a, &why), INCMOE_OK) << why;
    ucp_worker_release_address(node.worker, addr);
    inc_ucx_node_close(&node);
}

TEST(UcxAddr, EveryCutAndAnyExtraByteIsRefused)
{
    for (auto &[name, a] : real_addresses()) {
        for (size_t n = 0; n < a.size(); n++)
            EXPECT_EQ(check(a.substr(0, n)), INCMOE_ERR_PROTOCOL) << name << " cut to " << n;
        std::string why;
        EXPECT_EQ(check(a + '\0', nullptr, &why), INCMOE_ERR_PROTOCOL) << name;
        EXPECT_NE(why.find("1 bytes after the address's end"), std::string::npos) << why;
    }
}

/* An address built from UCX's layout, field by field (v2 unless said otherwise). */
struct Builder {
    std::string b;
    int v2;
    explicit Builder(int v2_ = 1, unsigned flags = 0x2) : v2(v2_)
    {
        if (v2) {
            b += '\x01';
            b += (char)flags;
        } else {
            b += (char)(flags << 4);
        }
        b += "uuid-8by"; /* v1 always, v2 with flag 0x2 */
    }
    void extended(unsigned v, unsigned mask, unsigned flags)
    {
        if (v2 && v >= mask) {
            b += (char)(mask | flags);
            b += (char)v;
        } else {
            b += (char)(v | flags);
        }
    }
    /* A device: md index, device address of dev_len bytes, then transports as given. */
    void device(unsigned md, size_t dev_len, bool last, bool empty = false, int paths = 1)
    {
        extended(md, 0x7f, empty ? 0x80 : 0);
        extended((unsigned)dev_len, 0x1f, (last ? 0x80 : 0) | (paths > 1 ? 0x40 : 0));
        if (paths > 1)
            b += (char)paths;
        b += std::string(dev_len, 'd');
    }
    void transport(uint16_t csum, size_t iface_len, bool last, bool ep = false, float bw = 1e9f)
    {
        b += (char)(csum & 0xff);
        b += (char)(csum >> 8);
        if (v2) {
            b += std::string(8, '\x10');
        } else {
            float f[3] = {1e-9f, bw, 1e-6f};
            b += std::string((const char *)f, sizeof(f)) + std::string(4, '\0');
        }
        extended((unsigned)iface_len, 0x3f, (last ? 0x80 : 0) | (ep ? 0x40 : 0));
        b += std::string(iface_len, 'i');
        if (ep)
            b += std::string("\x04"
                             "ep-a\x80",
                             6);
    }
};

TEST(UcxAddr, LayoutBuiltByHandPasses)
{
    Builder a;
    a.device(0, 0, false);
    a.transport(0x7563, 8, true); /* "self": no device address */
    a.device(1, 6, true);
    a.transport(0x19cf, 2, false);
    a.transport(0x1234, 40, true); /* lengths that take v2's extension bytes */
    std::string why;
    EXPECT_EQ(check(a.b, nullptr, &why), INCMOE_OK) << why;
    Builder none;
    none.b += '\xff';
    EXPECT_EQ(check(none.b, nullptr, &why), INCMOE_OK) << why;
}

TEST(UcxAddr, VersionsUcxAbortsOnAreRefused)
{
    for (unsigned field = 2; field < 16; field++) {
        Builder a;
        a.b[0] = (char)field;
        a.b += '\xff';
        std::string why;
        EXPECT_EQ(check(a.b, nullptr, &why), INCMOE_ERR_PROTOCOL);
        EXPECT_NE(why.find("version field " + std::to_string(field)), std::string::npos) << why;
    }
    Builder unknown_flag(1, 0x12);
    unknown_flag.b += '\xff';
    EXPECT_EQ(check(unknown_flag.b), INCMOE_ERR_PROTOCOL);
}

TEST(UcxAddr, IndexesPastUcxsArraysAreRefused)
{
    for (unsigned md : {63u, 64u, 200u}) {
        Builder a;
        a.device(md, 6, true);
        a.transport(0x19cf, 2, true);
        std::string why;
        EXPECT_EQ(check(a.b, nullptr, &why), md < 64 ? INCMOE_OK : INCMOE_ERR_PROTOCOL) << why;
    }
    for (int ndev : {64, 65}) {
        Builder a;
        for (int i = 0; i < ndev; i++)
            a.device(0, 0, i == ndev - 1, true);
        std::string why;
        EXPECT_EQ(check(a.b, nullptr, &why), ndev <= 64 ? INCMOE_OK : INCMOE_ERR_PROTOCOL) << why;
    }
    for (int ntl : {128, 129}) {
        Builder a;
        a.device(0, 0, true);
        for (int i = 0; i < ntl; i++)
            a.transport((uint16_t)i, 0, i == ntl - 1);
        std::string why;
        EXPECT_EQ(check(a.b, nullptr, &why), ntl <= 128 ? INCMOE_OK : INCMOE_ERR_PROTOCOL) << why;
    }
}

/* v1: 1.13 packs MD_ALLOC/MD_REG (0x40, 0x20) beside a 5-bit index, and 1.22 strips them; but
   an address ending in an empty device names a release, and one from 1.19 on is read whole. */
TEST(UcxAddr, V1LegacyMdBitsOnlyWithoutARelease)
{
    Builder legacy(0);
    legacy.device(0x60 | 3, 8, true);
    legacy.transport(0x538d, 8, true);
    std::string why;
    EXPECT_EQ(check(legacy.b, nullptr, &why), INCMOE_OK) << why;
    Builder with_release(0);
    with_release.device(0x60 | 3, 8, false);
    with_release.transport(0x538d, 8, true);
    with_release.device(6, 0, true, true); /* 1.22's release device */
    EXPECT_EQ(check(with_release.b, nullptr, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("beside a release number"), std::string::npos) << why;
}

TEST(UcxAddr, WhatAWorkerAddressNeverHoldsIsRefused)
{
    Builder ep;
    ep.device(0, 6, true);
    ep.transport(0x19cf, 2, true, true);
    std::string why;
    EXPECT_EQ(check(ep.b, nullptr, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("endpoint addresses"), std::string::npos) << why;
    Builder one_path;
    one_path.device(0, 6, true, false, 1);
    one_path.b[one_path.b.size() - 7] |= 0x40;           /* the paths flag, with a count of ... */
    one_path.b.insert(one_path.b.size() - 6, 1, '\x01'); /* ... 1 */
    one_path.transport(0x19cf, 2, true);
    EXPECT_EQ(check(one_path.b, nullptr, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("path count 1"), std::string::npos) << why;
    Builder two_paths;
    two_paths.device(0, 6, true, false, 2);
    two_paths.transport(0x19cf, 2, true);
    EXPECT_EQ(check(two_paths.b, nullptr, &why), INCMOE_OK) << why;
    for (float bad : {NAN, INFINITY}) {
        Builder v1(0);
        v1.device(0, 6, true);
        v1.transport(0x19cf, 2, true, false, bad);
        EXPECT_EQ(check(v1.b, nullptr, &why), INCMOE_ERR_PROTOCOL);
        EXPECT_NE(why.find("transport attributes"), std::string::npos) << why;
    }
}

/* UCX hands a transport NULL for a 0-length address; TCP reads its family from it (the abort
   the mutation probe found).  Refused for a transport whose local addresses are never empty;
   any other length is the transport's to read (callers keep INC_UCX_ADDR_SLACK after it). */
TEST(UcxAddr, EmptyAddressesWhereOursAreNeverEmptyAreRefused)
{
    Builder own;
    own.device(0, 0, false);
    own.transport(0x7563, 8, true); /* self */
    own.device(1, 18, false);
    own.transport(0x19cf, 2, true); /* tcp on lo (1.13's loopback form) */
    own.device(1, 6, true);
    own.transport(0x19cf, 2, true); /* tcp on an IPv4 interface */
    struct Case {
        uint16_t csum;
        size_t dev, iface;
        incmoe_status_t want;
    } cases[] = {
        {0x19cf, 6, 2, INCMOE_OK},           {0x19cf, 18, 2, INCMOE_OK},
        {0x19cf, 0, 2, INCMOE_ERR_PROTOCOL}, {0x19cf, 1, 2, INCMOE_OK},
        {0x19cf, 6, 0, INCMOE_ERR_PROTOCOL}, {0x7563, 0, 8, INCMOE_OK},
        {0x7563, 0, 0, INCMOE_ERR_PROTOCOL}, {0x4242, 0, 0, INCMOE_OK}, /* not ours: never used */
    };
    for (const Case &c : cases) {
        Builder peer;
        peer.device(0, c.dev, true);
        peer.transport(c.csum, c.iface, true);
        std::string why;
        EXPECT_EQ(check(peer.b, &own.b, &why), c.want)
            << std::hex << c.csum << std::dec << " " << c.dev << "/" << c.iface << ": " << why;
        EXPECT_EQ(check(peer.b, nullptr), INCMOE_OK); /* the layout alone is fine */
    }
    /* An own address that fails the walk itself is the caller's error. */
    std::string bad_own = "\x0e";
    Builder peer;
    peer.b += '\xff';
    std::string why;
    EXPECT_EQ(check(peer.b, &bad_own, &why), INCMOE_ERR_INVALID_ARG);
    EXPECT_NE(why.find("this worker's own"), std::string::npos) << why;
}
