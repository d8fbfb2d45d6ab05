/*
 * test_nccl_net.cc - the plugin's point-to-point net, driven as NCCL's proxy
 * drives it: init, devices, getProperties, listen, handle exchange, connect
 * and accept polled until both return a comm, regMr, isend / grouped irecv,
 * test polling, iflush, close, finalize.  Two forked ranks on loopback, for
 * every exported version.
 */
#include "harness.h"
#include "nccl_loader.h"

extern "C" {
#include "base/bootstrap.h"
#include "base/ucx_util.h"
#include "plugin/nccl/ptr_support.h"
}

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/clock.h"

using nccltest::Exchange;
using nccltest::Plugin;

namespace
{

/* The byte pattern rank `from` sends in message `id`: no two messages alike. */
unsigned char pattern(int from, int id, size_t j)
{
    return (unsigned char)((j * 131u) ^ (j >> 8) ^ (unsigned)(id * 29 + from * 7));
}

/* Poll test() until done, as the proxy does; bounded. */
std::string wait_req(Plugin &pl, void *req, int *sizes, double timeout_s = 30)
{
    double deadline = inc_now_s() + timeout_s;
    int done = 0;
    while (!done) {
        ncclResult_t r = pl.net_test(req, &done, sizes);
        if (r != ncclSuccess)
            return "test returned " + std::to_string(r) + ": " + nccltest::warnings();
        if (!done && inc_now_s() > deadline)
            return "request not done after " + std::to_string(timeout_s) + " s";
        if (!done)
            usleep(50);
    }
    return "";
}

struct Conn {
    Plugin pl;
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
};

/* A TCP connection to the bootstrap socket a listen handle names (IPv4 loopback here). */
int handle_connect(const char *handle)
{
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    memcpy(&sa.sin_port, handle + 10, 2); /* net_handle_t: magic, id, family, port, ip */
    memcpy(&sa.sin_addr, handle + 12, 4);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Junk at the peer's listener before the real connection: each must be shed. */
std::vector<int> send_junk(const char *handle)
{
    std::vector<std::string> junk = {std::string(17, '\0'), std::string(16, '\xff'),
                                     std::string(64 * 1024, '\0')};
    unsigned x = 7;
    for (auto &c : junk[2]) {
        x = x * 1103515245u + 12345u;
        c = (char)(x >> 16);
    }
    std::vector<int> held;
    for (auto &j : junk) {
        int fd = handle_connect(handle);
        if (fd < 0)
            continue;
        ssize_t w = send(fd, j.data(), j.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        held.push_back(fd);
    }
    held.push_back(handle_connect(handle)); /* and one that says nothing */
    return held;
}

/* listen, exchange handles, connect + accept polled together (neither may block). */
std::string setup(Conn *c, int version, int rank, Exchange *ex, bool junk = false)
{
    std::string err = c->pl.load(version);
    REQUIRE(err.empty(), err);
    REQUIRE(c->pl.net_init(0x1234) == ncclSuccess, nccltest::warnings());
    int ndev = 0;
    REQUIRE(c->pl.net_devices(&ndev) == ncclSuccess && ndev == 1);
    ncclNetProperties_v11_t props;
    REQUIRE(c->pl.net_props(0, &props) == ncclSuccess);
    REQUIRE(strcmp(props.name, "incmoe0") == 0, props.name);
    REQUIRE(props.ptrSupport & NCCL_PTR_HOST);
    REQUIRE(props.maxRecvs == 8);
    REQUIRE(props.maxP2pBytes >= (64u << 20));
    REQUIRE(props.netDeviceType == NCCL_NET_DEVICE_HOST);
    REQUIRE(version != 11 || props.maxMultiRequestSize == 1);
    REQUIRE(c->pl.net_props(1, &props) == ncclInvalidArgument);

    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    REQUIRE(c->pl.net_listen(0, handle, &c->lc) == ncclSuccess, nccltest::warnings());
    ex->publish(0, rank, handle, sizeof(handle));
    std::vector<std::vector<char>> all;
    REQUIRE(ex->gather(0, 2, &all, 30), "handle exchange timed out");
    char peer[NCCL_NET_HANDLE_MAXSIZE];
    memcpy(peer, all[1 - rank].data(), sizeof(peer));
    std::vector<int> held;
    if (junk)
        held = send_junk(peer);
    double deadline = inc_now_s() + 30;
    while (c->sc == nullptr || c->rc == nullptr) {
        if (c->sc == nullptr)
            REQUIRE(c->pl.net_connect(0, peer, &c->sc) == ncclSuccess, nccltest::warnings());
        if (c->rc == nullptr)
            REQUIRE(c->pl.net_accept(c->lc, &c->rc) == ncclSuccess, nccltest::warnings());
        REQUIRE(inc_now_s() < deadline, "connect/accept did not finish");
        usleep(100);
    }
    for (int fd : held)
        if (fd >= 0)
            close(fd);
    return "";
}

std::string teardown(Conn *c)
{
    REQUIRE(c->pl.net_close_send(c->sc) == ncclSuccess);
    REQUIRE(c->pl.net_close_recv(c->rc) == ncclSuccess);
    REQUIRE(c->pl.net_close_listen(c->lc) == ncclSuccess);
    REQUIRE(c->pl.net_finalize() == ncclSuccess);
    return "";
}

/* Both ranks send to each other at once: sizes 0 .. 64 MiB, one tag each. */
std::string exchange_sizes(Conn *c, int rank, void *smh, void *rmh, char *sbuf, char *rbuf)
{
    const size_t sizes[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 64u << 20};
    for (int id = 0; id < (int)(sizeof(sizes) / sizeof(sizes[0])); id++) {
        size_t n = sizes[id];
        for (size_t j = 0; j < n; j++)
            sbuf[j] = (char)pattern(rank, id, j);
        memset(rbuf, 0x5a, n + 16);
        void *sreq = nullptr, *rreq = nullptr;
        void *data[1] = {rbuf};
        size_t rsz[1] = {n + 16}; /* posted larger than sent: test reports the real size */
        int tags[1] = {100 + id};
        void *mhs[1] = {rmh};
        REQUIRE(c->pl.net_irecv(c->rc, 1, data, rsz, tags, mhs, &rreq) == ncclSuccess);
        REQUIRE(c->pl.net_isend(c->sc, sbuf, n, 100 + id, smh, &sreq) == ncclSuccess);
        REQUIRE(sreq != nullptr && rreq != nullptr);
        int got = -1, sent = -1;
        std::string e = wait_req(c->pl, sreq, &sent);
        REQUIRE(e.empty(), e);
        e = wait_req(c->pl, rreq, &got);
        REQUIRE(e.empty(), e);
        REQUIRE(got == (int)n, "size " + std::to_string(n) + " arrived as " + std::to_string(got));
        for (size_t j = 0; j < n; j++)
            REQUIRE((unsigned char)rbuf[j] == pattern(1 - rank, id, j),
                    "size " + std::to_string(n) + " byte " + std::to_string(j));
        REQUIRE((unsigned char)rbuf[n] == 0x5a, "wrote past the message");
        /* iflush of host memory: nothing to wait for, or a request that completes */
        void *freq = nullptr;
        int fsz = (int)n;
        REQUIRE(c->pl.net_iflush(c->rc, 1, data, &fsz, mhs, &freq) == ncclSuccess);
        if (freq != nullptr) {
            e = wait_req(c->pl, freq, nullptr);
            REQUIRE(e.empty(), e);
        }
    }
    return "";
}

/* A grouped receive of 3 tags; the peer sends them in another order and shorter. */
std::string grouped(Conn *c, int rank, void *smh, void *rmh, char *sbuf, char *rbuf)
{
    const int tags[3] = {7, 8, 9};
    const size_t posted[3] = {1000, 2000, 3000};
    const size_t sent[3] = {500, 2000, 2999};
    void *data[3] = {rbuf, rbuf + 10000, rbuf + 20000};
    size_t sizes[3];
    int rtags[3];
    void *mhs[3] = {rmh, rmh, rmh};
    for (int i = 0; i < 3; i++) {
        sizes[i] = posted[i];
        rtags[i] = tags[i];
    }
    void *rreq = nullptr;
    REQUIRE(c->pl.net_irecv(c->rc, 3, data, sizes, rtags, mhs, &rreq) == ncclSuccess);
    const int order[3] = {2, 0, 1};
    void *sreq[3];
    for (int k = 0; k < 3; k++) {
        int i = order[k];
        for (size_t j = 0; j < sent[i]; j++)
            sbuf[i * 4000 + j] = (char)pattern(rank, 50 + i, j);
        REQUIRE(c->pl.net_isend(c->sc, sbuf + i * 4000, sent[i], tags[i], smh, &sreq[k]) ==
                ncclSuccess);
    }
    for (int k = 0; k < 3; k++) {
        std::string e = wait_req(c->pl, sreq[k], nullptr);
        REQUIRE(e.empty(), e);
    }
    int got[3] = {-1, -1, -1};
    std::string e = wait_req(c->pl, rreq, got);
    REQUIRE(e.empty(), e);
    for (int i = 0; i < 3; i++) {
        REQUIRE(got[i] == (int)sent[i],
                "receive " + std::to_string(i) + " got " + std::to_string(got[i]));
        for (size_t j = 0; j < sent[i]; j++)
            REQUIRE((unsigned char)((char *)data[i])[j] == pattern(1 - rank, 50 + i, j));
    }
    return "";
}

/* Many requests outstanding, same tag and distinct tags, completed in any order. */
std::string many(Conn *c, int rank, void *smh, void *rmh, char *sbuf, char *rbuf)
{
    const int n = 24;
    const size_t sz = 8192;
    std::vector<void *> rreq(n), sreq(n);
    for (int i = 0; i < n; i++) {
        void *data[1] = {rbuf + i * sz};
        size_t s[1] = {sz};
        int t[1] = {i < n / 2 ? 3 : 1000 + i}; /* half share one tag: FIFO per tag */
        void *m[1] = {rmh};
        REQUIRE(c->pl.net_irecv(c->rc, 1, data, s, t, m, &rreq[i]) == ncclSuccess);
    }
    for (int i = n - 1; i >= n / 2; i--) { /* distinct tags sent in reverse */
        for (size_t j = 0; j < sz; j++)
            sbuf[i * sz + j] = (char)pattern(rank, 200 + i, j);
        REQUIRE(c->pl.net_isend(c->sc, sbuf + i * sz, sz, 1000 + i, smh, &sreq[i]) == ncclSuccess);
    }
    for (int i = 0; i < n / 2; i++) {
        for (size_t j = 0; j < sz; j++)
            sbuf[i * sz + j] = (char)pattern(rank, 200 + i, j);
        REQUIRE(c->pl.net_isend(c->sc, sbuf + i * sz, sz, 3, smh, &sreq[i]) == ncclSuccess);
    }
    std::vector<int> idx(n);
    for (int i = 0; i < n; i++)
        idx[i] = (i * 7) % n; /* 7 is prime to 24: a permutation */
    for (int i : idx) {
        int got = -1;
        std::string e = wait_req(c->pl, rreq[i], &got);
        REQUIRE(e.empty(), e);
        REQUIRE(got == (int)sz);
        for (size_t j = 0; j < sz; j++)
            REQUIRE((unsigned char)rbuf[i * sz + j] == pattern(1 - rank, 200 + i, j),
                    "message " + std::to_string(i));
        e = wait_req(c->pl, sreq[i], nullptr);
        REQUIRE(e.empty(), e);
    }
    return "";
}

std::string bad_args(Conn *c, void *smh, char *sbuf, char *rbuf)
{
    void *req = nullptr, *mh = nullptr;
    REQUIRE(c->pl.net_isend(c->sc, sbuf, (size_t)2 << 30, 1, nullptr, &req) == ncclInvalidArgument);
    REQUIRE(c->pl.net_isend(c->sc, sbuf - 4096, 100, 1, smh, &req) == ncclInvalidArgument);
    void *data[9];
    size_t sizes[9];
    int tags[9];
    for (int i = 0; i < 9; i++) {
        data[i] = rbuf;
        sizes[i] = 1;
        tags[i] = i;
    }
    REQUIRE(c->pl.net_irecv(c->rc, 9, data, sizes, tags, nullptr, &req) == ncclInvalidArgument);
    REQUIRE(c->pl.net_irecv(c->rc, 0, data, sizes, tags, nullptr, &req) == ncclInvalidArgument);
    REQUIRE(c->pl.net_reg(c->sc, sbuf, 100, 0x8 /* no such type */, &mh) == ncclInvalidArgument);
    REQUIRE(c->pl.net_reg(c->sc, sbuf, 100, NCCL_PTR_DMABUF, &mh) == ncclInvalidArgument);
    REQUIRE(nccltest::warnings().find("outside the registered") != std::string::npos);
    /* A listen comm makes one connection: accept after it is a usage error, with no comm. */
    void *again = &again;
    REQUIRE(c->pl.net_accept(c->lc, &again) == ncclInvalidUsage && again == nullptr);
    nccltest::clear_warnings(); /* later failures show only their own warnings */
    return "";
}

std::string net_rank(int version, int rank, Exchange *ex, int mem_type = NCCL_PTR_HOST)
{
    Conn c;
    std::string err = setup(&c, version, rank, ex);
    if (!err.empty())
        return err;
    const size_t cap = (64u << 20) + 4096;
    std::vector<char> sbuf(cap), rbuf(cap);
    void *smh = nullptr, *rmh = nullptr;
    REQUIRE(c.pl.net_reg(c.sc, sbuf.data(), cap, mem_type, &smh) == ncclSuccess);
    REQUIRE(c.pl.net_reg(c.rc, rbuf.data(), cap, mem_type, &rmh) == ncclSuccess);
    if (!(err = exchange_sizes(&c, rank, smh, rmh, sbuf.data(), rbuf.data())).empty())
        return "sizes: " + err;
    if (!(err = grouped(&c, rank, smh, rmh, sbuf.data(), rbuf.data())).empty())
        return "grouped: " + err;
    if (!(err = many(&c, rank, smh, rmh, sbuf.data(), rbuf.data())).empty())
        return "many: " + err;
    if (!(err = bad_args(&c, smh, sbuf.data(), rbuf.data())).empty())
        return "bad args: " + err;
    /* Both sides are done before either closes, as in NCCL's teardown. */
    REQUIRE(ex->barrier(1, rank, 2, 30));
    REQUIRE(c.pl.net_dereg(c.sc, smh) == ncclSuccess);
    REQUIRE(c.pl.net_dereg(c.rc, rmh) == ncclSuccess);
    return teardown(&c);
}

/* Two ranks connected as NCCL connects them (junk at each listener first, when junk), each
   running body on its connection: one result per rank. */
std::vector<std::string> on_connected_pair(
    int version, const std::function<std::string(Conn &c, int rank, Exchange *ex)> &body, bool junk)
{
    Exchange *ex = Exchange::create(2);
    if (ex == nullptr)
        return {"no exchange", "no exchange"};
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            Conn c;
            std::string err = setup(&c, version, rank, ex, junk);
            return err.empty() ? body(c, rank, ex) : err;
        },
        100);
    ex->destroy();
    return res;
}

class NcclNet : public ::testing::TestWithParam<int>
{
  protected:
    void SetUp() override
    {
        setenv("INCMOE_NCCL_ADDR", "127.0.0.1", 1);
        /* Unless set: a run under valgrind needs a longer bound for the bootstrap. */
        setenv("INCMOE_TIMEOUT_MS", "3000", 0);
    }
};

TEST_P(NcclNet, SizesTagsGroupedReceivesAndBadArguments)
{
    int version = GetParam();
    Exchange *ex = Exchange::create(2);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        2, [&](int rank) { return net_rank(version, rank, ex); }, 100);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

/* Junk (17 zero bytes, 16 of 0xFF, 64 KiB of noise, a silent connection) at each listener
   first: the real connection still forms and carries data. */
TEST_P(NcclNet, JunkAtTheListenerDoesNotStopTheRealConnection)
{
    int version = GetParam();
    auto res = on_connected_pair(
        version,
        [&](Conn &c, int rank, Exchange *) -> std::string {
            std::string err;
            char sbuf[64], rbuf[64];
            memset(sbuf, 'a' + rank, sizeof(sbuf));
            void *data[1] = {rbuf};
            size_t sz[1] = {sizeof(rbuf)};
            int tag[1] = {3};
            void *sreq = nullptr, *rreq = nullptr;
            REQUIRE(c.pl.net_irecv(c.rc, 1, data, sz, tag, nullptr, &rreq) == ncclSuccess);
            REQUIRE(c.pl.net_isend(c.sc, sbuf, sizeof(sbuf), 3, nullptr, &sreq) == ncclSuccess);
            int n = 0;
            err = wait_req(c.pl, sreq, &n);
            REQUIRE(err.empty(), err);
            err = wait_req(c.pl, rreq, &n);
            REQUIRE(err.empty(), err);
            REQUIRE(rbuf[0] == 'a' + (1 - rank) && rbuf[63] == 'a' + (1 - rank));
            return teardown(&c);
        },
        true);
    EXPECT_EQ(harness::failures(res), "");
}

/* Keyed against keyless, and two different keys: connect() fails naming why, no hang. */
TEST_P(NcclNet, KeyMismatchOrWrongKeyFailsConnect)
{
    int version = GetParam();
    for (const char *other : {"", "other-key"}) {
        Exchange *ex = Exchange::create(2);
        ASSERT_NE(ex, nullptr);
        auto res = harness::run_ranks(
            2,
            [&](int rank) -> std::string {
                if (rank == 0)
                    setenv("INCMOE_AUTH_KEY", "s3cret", 1);
                else if (other[0] != '\0')
                    setenv("INCMOE_AUTH_KEY", other, 1);
                else
                    unsetenv("INCMOE_AUTH_KEY");
                setenv("INCMOE_TIMEOUT_MS", "3000", 1);
                Conn c;
                std::string err = c.pl.load(version);
                REQUIRE(err.empty(), err);
                REQUIRE(c.pl.net_init(0x1234) == ncclSuccess, nccltest::warnings());
                char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
                REQUIRE(c.pl.net_listen(0, handle, &c.lc) == ncclSuccess, nccltest::warnings());
                ex->publish(0, rank, handle, sizeof(handle));
                std::vector<std::vector<char>> all;
                REQUIRE(ex->gather(0, 2, &all, 30), "handle exchange timed out");
                char peer[NCCL_NET_HANDLE_MAXSIZE];
                memcpy(peer, all[1 - rank].data(), sizeof(peer));
                double deadline = inc_now_s() + 20;
                ncclResult_t r = ncclSuccess;
                while (r == ncclSuccess && c.sc == nullptr && inc_now_s() < deadline) {
                    r = c.pl.net_connect(0, peer, &c.sc);
                    if (c.rc == nullptr)
                        REQUIRE(c.pl.net_accept(c.lc, &c.rc) == ncclSuccess);
                    usleep(200);
                }
                REQUIRE(r != ncclSuccess && c.sc == nullptr && c.rc == nullptr,
                        "connect returned " + std::to_string(r));
                std::string w = nccltest::warnings();
                REQUIRE(w.find(other[0] ? "wrong key" : "key mismatch") != std::string::npos, w);
                REQUIRE(ex->barrier(1, rank, 2, 30)); /* the peer is done with this listener */
                REQUIRE(c.pl.net_close_listen(c.lc) == ncclSuccess);
                REQUIRE(c.pl.net_finalize() == ncclSuccess);
                return "";
            },
            100);
        ex->destroy();
        EXPECT_EQ(harness::failures(res), "") << "other key '" << other << "'";
    }
}

/* The TCP ports this process listens on, as (address, port): /proc/self/net/tcp's LISTEN
   sockets whose inode is one of this process's descriptors. */
std::vector<std::pair<std::string, int>> own_listeners()
{
    std::vector<std::string> inodes;
    if (DIR *d = opendir("/proc/self/fd")) {
        while (struct dirent *e = readdir(d)) {
            char link[64] = "", path[300];
            snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
            ssize_t n = readlink(path, link, sizeof(link) - 1);
            if (n > 8 && strncmp(link, "socket:[", 8) == 0)
                inodes.push_back(std::string(link + 8, (size_t)n - 9));
        }
        closedir(d);
    }
    std::vector<std::pair<std::string, int>> out;
    FILE *f = fopen("/proc/self/net/tcp", "r");
    char line[512];
    while (f != nullptr && fgets(line, sizeof(line), f) != nullptr) {
        unsigned ip, port, state;
        char inode[32];
        if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*s %*s %*s %*s %*s %31s", &ip, &port, &state,
                   inode) != 4 ||
            state != 0x0a || std::find(inodes.begin(), inodes.end(), inode) == inodes.end())
            continue;
        struct in_addr a = {ip}; /* the kernel prints the address in host order */
        out.emplace_back(inet_ntoa(a), (int)port);
    }
    if (f != nullptr)
        fclose(f);
    return out;
}

/* Junk at a TCP port: bursts of 17 zeros, 16 of 0xFF and 64 KiB of noise, a half close, and
   a connection that says nothing for a second. */
void junk_at(const std::string &ip, int port)
{
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
    std::string noise(64 * 1024, '\0');
    unsigned x = 11;
    for (auto &ch : noise) {
        x = x * 1103515245u + 12345u;
        ch = (char)(x >> 16);
    }
    std::vector<std::string> junk = {std::string(17, '\0'), std::string(16, '\xff'), noise};
    std::vector<int> open_fds;
    for (int k = 0; k < 5; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        if (k < 3) {
            ssize_t w = send(fd, junk[k].data(), junk[k].size(), MSG_NOSIGNAL);
            (void)w;
        }
        if (k == 3)
            shutdown(fd, SHUT_WR);
        open_fds.push_back(fd);
    }
    usleep(1000 * 1000);
    for (int fd : open_fds)
        close(fd);
}

/* Junk at UCX's own TCP ports of each rank's net (found from the process's listening sockets,
   the bootstrap's listener closed once it made its connection): the connection still carries
   data, and UCX listens on loopback alone, the interface of INCMOE_NCCL_ADDR. */
TEST_P(NcclNet, JunkAtUcxsOwnPortsLeavesTheConnectionWorking)
{
    int version = GetParam();
    auto res = on_connected_pair(
        version,
        [&](Conn &c, int rank, Exchange *ex) -> std::string {
            std::string err;
            auto ports = own_listeners();
            REQUIRE(!ports.empty(), "no UCX port found");
            for (auto &[ip, port] : ports) {
                REQUIRE(ip.rfind("127.", 0) == 0, "UCX listens on " + ip);
                junk_at(ip, port);
            }
            REQUIRE(ex->barrier(1, rank, 2, 30));
            char sbuf[4096], rbuf[4096];
            for (size_t j = 0; j < sizeof(sbuf); j++)
                sbuf[j] = (char)pattern(rank, 9, j);
            void *data[1] = {rbuf};
            size_t sz[1] = {sizeof(rbuf)};
            int tag[1] = {4};
            void *sreq = nullptr, *rreq = nullptr;
            REQUIRE(c.pl.net_irecv(c.rc, 1, data, sz, tag, nullptr, &rreq) == ncclSuccess);
            REQUIRE(c.pl.net_isend(c.sc, sbuf, sizeof(sbuf), 4, nullptr, &sreq) == ncclSuccess);
            int n = 0;
            REQUIRE((err = wait_req(c.pl, sreq, &n)).empty(), err);
            REQUIRE((err = wait_req(c.pl, rreq, &n)).empty(), err);
            for (size_t j = 0; j < sizeof(rbuf); j++)
                REQUIRE((unsigned char)rbuf[j] == pattern(1 - rank, 9, j),
                        "byte " + std::to_string(j));
            REQUIRE(ex->barrier(2, rank, 2, 30));
            return teardown(&c);
        },
        false);
    EXPECT_EQ(harness::failures(res), "");
}

/* A stranger's UCX worker: it learns a plugin worker's address from a bootstrap on a listener
   it may use (keyless here, as a key holder could), then sends tagged messages there. */
struct Stranger {
    inc_ucx_node_t node = {};
    ucp_ep_h ep = nullptr;
    std::string open(const char *handle)
    {
        REQUIRE(inc_ucx_node_open_with(&node, UCP_FEATURE_TAG, UCS_THREAD_MODE_SINGLE, nullptr) ==
                INCMOE_OK);
        ucp_address_t *mine;
        size_t mine_len;
        REQUIRE(ucp_worker_get_address(node.worker, &mine, &mine_len) == UCS_OK);
        struct sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        memcpy(&sa.sin_port, handle + 10, 2);
        memcpy(&sa.sin_addr, handle + 12, 4);
        auto *b = new inc_boot_t;
        incmoe_status_t st = inc_boot_init(b, INC_BOOT_CLIENT, nullptr, 0, mine, mine_len);
        if (st == INCMOE_IN_PROGRESS)
            st = inc_boot_run_client(b, (struct sockaddr *)&sa, sizeof(sa), 10000);
        std::string why = b->why;
        ucp_ep_params_t ep_params = {};
        ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = (const ucp_address_t *)b->peer_addr;
        ucs_status_t us =
            st == INCMOE_OK ? ucp_ep_create(node.worker, &ep_params, &ep) : UCS_ERR_UNREACHABLE;
        delete b;
        ucp_worker_release_address(node.worker, mine);
        REQUIRE(st == INCMOE_OK, "bootstrap: " + why);
        REQUIRE(us == UCS_OK);
        return "";
    }
    /* Each message sent and flushed: it is in the peer's worker, matched or queued. */
    std::string send(uint64_t tag, const void *buf, size_t len)
    {
        ucp_request_param_t p = {};
        REQUIRE(inc_ucx_request_wait(&node, ucp_tag_send_nbx(ep, buf, len, tag, &p), 10000) ==
                UCS_OK);
        REQUIRE(inc_ucx_request_wait(&node, ucp_ep_flush_nbx(ep, &p), 10000) == UCS_OK);
        return "";
    }
    ~Stranger()
    {
        if (ep != nullptr)
            inc_ucx_ep_close(&node, ep, 1, 1000);
        if (node.worker != nullptr)
            inc_ucx_node_close(&node);
    }
};

/*
 * Rank 1 posts a receive on its connection; a stranger that learnt rank 1's worker address
 * sends it messages under the tags it can guess (the connection's listen id from NCCL's
 * handle, which the data tags carried before they came from the bootstrap's token, the other
 * listen id, and the first 64 ids), then rank 0 sends the real message: the receive gets the
 * real bytes.
 */
TEST_P(NcclNet, GuessedTagsNeverReachALiveReceive)
{
    int version = GetParam();
    auto res = on_connected_pair(
        version,
        [&](Conn &c, int rank, Exchange *ex) -> std::string {
            std::string err;
            /* The listen handles of the real connection (round 0) and a second listener that
               only lets the stranger learn the worker's address. */
            void *lc2 = nullptr;
            char h2[NCCL_NET_HANDLE_MAXSIZE] = {};
            REQUIRE(c.pl.net_listen(0, h2, &lc2) == ncclSuccess);
            ex->publish(5, rank, h2, sizeof(h2));
            std::vector<std::vector<char>> h0, hs;
            REQUIRE(ex->gather(0, 2, &h0, 30) && ex->gather(5, 2, &hs, 30));
            char real[64], got[64];
            memset(real, 'R', sizeof(real));
            if (rank == 0) {
                Stranger st;
                REQUIRE((err = st.open(hs[1].data())).empty(), err);
                char fake[64];
                memset(fake, 'X', sizeof(fake));
                uint32_t ids[2];
                memcpy(&ids[0], h0[1].data() + 4, 4); /* net_handle_t: magic, listen id, ... */
                memcpy(&ids[1], hs[1].data() + 4, 4);
                std::vector<uint64_t> guesses = {(uint64_t)ids[0] << 32 | 3,
                                                 (uint64_t)ids[1] << 32 | 3};
                for (uint64_t id = 1; id <= 64; id++)
                    guesses.push_back(id << 32 | 3);
                for (uint64_t tag : guesses)
                    REQUIRE((err = st.send(tag, fake, sizeof(fake))).empty(), err);
                ex->publish(6, 0, "done", 4);
                REQUIRE(ex->barrier(7, rank, 2, 30));
                void *sreq = nullptr;
                REQUIRE(c.pl.net_isend(c.sc, real, sizeof(real), 3, nullptr, &sreq) == ncclSuccess);
                REQUIRE((err = wait_req(c.pl, sreq, nullptr)).empty(), err);
            } else {
                void *data[1] = {got};
                size_t sz[1] = {sizeof(got)};
                int tag[1] = {3};
                void *rreq = nullptr;
                REQUIRE(c.pl.net_irecv(c.rc, 1, data, sz, tag, nullptr, &rreq) == ncclSuccess);
                /* Serve the stranger's bootstrap and take its messages in, until it is done. */
                std::vector<std::vector<char>> done;
                void *never = nullptr;
                int finished = 0;
                while (!ex->gather(6, 1, &done, 0.01)) {
                    REQUIRE(c.pl.net_accept(lc2, &never) == ncclSuccess && never == nullptr);
                    REQUIRE(c.pl.net_test(rreq, &finished, nullptr) == ncclSuccess);
                    REQUIRE(!finished, "the receive completed with the stranger's message");
                }
                for (int i = 0; i < 100; i++) {
                    REQUIRE(c.pl.net_test(rreq, &finished, nullptr) == ncclSuccess);
                    REQUIRE(!finished, "the receive completed with the stranger's message");
                }
                REQUIRE(ex->barrier(7, rank, 2, 30));
                int n = 0;
                REQUIRE((err = wait_req(c.pl, rreq, &n)).empty(), err);
                REQUIRE(n == (int)sizeof(real) && memcmp(got, real, sizeof(real)) == 0,
                        "the receive got " + std::string(got, 8) + "...");
            }
            REQUIRE(ex->barrier(8, rank, 2, 30));
            REQUIRE(c.pl.net_close_listen(lc2) == ncclSuccess);
            return teardown(&c);
        },
        false);
    EXPECT_EQ(harness::failures(res), "");
}

/* The peer dies with a receive pending: test() reports an error instead of hanging. */
TEST_P(NcclNet, DeadPeerFailsThePendingReceive)
{
    int version = GetParam();
    auto res = on_connected_pair(
        version,
        [&](Conn &c, int rank, Exchange *ex) -> std::string {
            REQUIRE(ex->barrier(1, rank, 2, 30));
            if (rank == 1)
                raise(SIGKILL);
            char buf[64];
            void *data[1] = {buf};
            size_t sz[1] = {sizeof(buf)};
            int tag[1] = {5};
            void *req = nullptr;
            REQUIRE(c.pl.net_irecv(c.rc, 1, data, sz, tag, nullptr, &req) == ncclSuccess);
            double deadline = inc_now_s() + 60;
            int done = 0;
            ncclResult_t r = ncclSuccess;
            while (r == ncclSuccess && !done && inc_now_s() < deadline) {
                r = c.pl.net_test(req, &done, nullptr);
                usleep(1000);
            }
            REQUIRE(r == ncclRemoteError || r == ncclSystemError,
                    "test returned " + std::to_string(r) + ", done " + std::to_string(done));
            REQUIRE(!nccltest::warnings().empty(), "no WARN through NCCL's logger");
            /* NCCL closes after an error without testing the request again. */
            return teardown(&c);
        },
        false);
    EXPECT_EQ(res[0], "");
    EXPECT_NE(res[1].find("signal 9"), std::string::npos) << res[1];
}

/*
 * ptrSupport is what the UCX in this process can move (memtypes.c asks it the
 * same way): NCCL_PTR_CUDA exactly when UCX reports CUDA memory, and regMr
 * takes a memory type exactly when ptrSupport names it.  The plugin copies
 * nothing itself: either NCCL hands it host buffers, or UCX moves the GPU's.
 */
TEST_P(NcclNet, PtrSupportIsWhatUcxMoves)
{
    int version = GetParam();
    uint64_t memtypes = nccltest::ucx_memory_types();
    ASSERT_NE(memtypes, 0u) << "UCX reported no memory types";
    const int expect = plugin_ptr_support_of(memtypes, 0);
    auto res = on_connected_pair(
        version,
        [&](Conn &c, int rank, Exchange *ex) -> std::string {
            ncclNetProperties_v11_t p;
            REQUIRE(c.pl.net_props(0, &p) == ncclSuccess);
            REQUIRE(p.ptrSupport == expect, "ptrSupport " + std::to_string(p.ptrSupport) +
                                                ", UCX memory types " + std::to_string(memtypes));
            char buf[64];
            void *mh = nullptr;
            ncclResult_t r = c.pl.net_reg(c.sc, buf, sizeof(buf), NCCL_PTR_CUDA, &mh);
            if (expect & NCCL_PTR_CUDA) {
                REQUIRE(r == ncclSuccess && c.pl.net_dereg(c.sc, mh) == ncclSuccess);
            } else {
                REQUIRE(r == ncclInvalidArgument);
                REQUIRE(nccltest::warnings().find("not supported") != std::string::npos);
            }
            REQUIRE(c.pl.net_reg(c.sc, buf, sizeof(buf), NCCL_PTR_DMABUF, &mh) ==
                    ncclInvalidArgument);
            REQUIRE(ex->barrier(1, rank, 2, 30));
            return teardown(&c);
        },
        false);
    EXPECT_EQ(harness::failures(res), "");
}

/* The decision alone, for what this machine's UCX cannot show (a UCX built with CUDA). */
TEST(NcclPtrSupport, CudaOnlyWhereUcxMovesItAndTheCpuNeverTouchesIt)
{
    const uint64_t host = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    const uint64_t cuda = UCS_BIT(UCS_MEMORY_TYPE_CUDA);
    const uint64_t managed = UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
    EXPECT_EQ(plugin_ptr_support_of(host, 0), NCCL_PTR_HOST);
    EXPECT_EQ(plugin_ptr_support_of(host | cuda, 0), NCCL_PTR_HOST | NCCL_PTR_CUDA);
    EXPECT_EQ(plugin_ptr_support_of(host | cuda | managed, 0), NCCL_PTR_HOST | NCCL_PTR_CUDA);
    EXPECT_EQ(plugin_ptr_support_of(host | managed, 0), NCCL_PTR_HOST);
    EXPECT_EQ(plugin_ptr_support_of(host | cuda, 1), NCCL_PTR_HOST);
    EXPECT_EQ(plugin_ptr_support_of(host, 1), NCCL_PTR_HOST);
    /* Host memory is always offered: NCCL's fallback buffers are host memory. */
    EXPECT_EQ(plugin_ptr_support_of(0, 0), NCCL_PTR_HOST);
}

INSTANTIATE_TEST_SUITE_P(Versions, NcclNet, ::testing::Values(11, 10, 9),
                         [](const ::testing::TestParamInfo<int> &i) {
                             return "v" + std::to_string(i.param);
                         });

} // namespace
