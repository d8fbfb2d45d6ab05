/*
 * test_errors.cc - every kind of bad input and failure the switch and the
 * client must survive: each gets its own error on the job's ranks (or a
 * refused connection), and the switch goes on serving another job.
 */
#include <gtest/gtest.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "incmoe/incmoe.h"
#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "switch/throttle.h"
}

namespace
{

std::string status_text(incmoe_status_t st)
{
    return incmoe_strerror(st);
}

incmoe_status_t create(const std::string &addr, unsigned long long job, int rank, int n,
                       incmoe_comm_t **comm, int timeout_ms = 3000, const char *secret = nullptr,
                       incmoe_algo_t algo = INCMOE_ALGO_INC)
{
    incmoe_comm_params_t p = {};
    p.field_mask = INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_ALGO;
    p.algo = algo;
    p.switch_addr = addr.c_str();
    p.job_id = job;
    p.rank = rank;
    p.nranks = n;
    p.timeout_ms = timeout_ms;
    if (secret != nullptr) {
        p.field_mask |= INCMOE_COMM_PARAM_SECRET;
        p.secret = secret;
        p.secret_len = strlen(secret);
    }
    return incmoe_comm_create(&p, comm);
}

std::string comm_text(incmoe_comm_t *comm)
{
    char buf[256] = "";
    incmoe_comm_error(comm, buf, sizeof(buf));
    return buf;
}

/* A small AllGather on a fresh job proves the switch still serves. */
void expect_switch_serves(const std::string &addr, int n = 2)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, rank, n, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            std::vector<int> send(16, rank), recv(16 * n, -1);
            incmoe_mr_t *ms, *mr;
            incmoe_mem_register(comm, send.data(), 64, &ms);
            incmoe_mem_register(comm, recv.data(), 64 * n, &mr);
            incmoe_layout_t l = {64, 0, 64, nullptr};
            incmoe_req_t req;
            st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            incmoe_comm_destroy(comm); /* before send and recv go: after a failure they are its */
            for (int b = 0; b < n && st == INCMOE_OK; b++)
                if (recv[16 * b] != b)
                    return "wrong data after an earlier bad job";
            return st == INCMOE_OK ? "" : "allgather: " + status_text(st);
        },
        60);
    EXPECT_EQ(harness::failures(res), "") << "the switch stopped serving";
}

class Errors : public ::testing::Test
{
  protected:
    harness::SwitchProc sw;
    void SetUp() override
    {
        /* A low floor: the jobs here run with the timeouts their ranks ask for. */
        ASSERT_TRUE(harness::switch_start(&sw, {"--timeout-ms", "1000"}));
    }
    void TearDown() override
    {
        expect_switch_serves(sw.addr);
        int status = harness::switch_stop(&sw);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the switch crashed";
    }
};

TEST_F(Errors, WrongOrMissingSecretIsRefused)
{
    harness::switch_stop(&sw);
    char keyfile[] = "/tmp/incmoe-key-XXXXXX";
    int fd = mkstemp(keyfile);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "s3cret\n", 7), 7);
    close(fd);
    ASSERT_TRUE(harness::switch_start(&sw, {"--auth-key-file", keyfile}));
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000, "wrong");
        if (st != INCMOE_ERR_AUTH)
            return "wrong secret gave " + status_text(st);
        unsetenv("INCMOE_AUTH_KEY");
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000);
        if (st != INCMOE_ERR_AUTH)
            return "no secret gave " + status_text(st);
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000, "s3cret");
        if (st != INCMOE_OK)
            return "right secret gave " + status_text(st);
        incmoe_comm_destroy(comm);
        setenv("INCMOE_AUTH_KEY", "s3cret", 1); /* the environment works too */
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000);
        if (st != INCMOE_OK)
            return "INCMOE_AUTH_KEY gave " + status_text(st);
        incmoe_comm_destroy(comm);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    /* TearDown's check needs the key as well. */
    setenv("INCMOE_AUTH_KEY", "s3cret", 1);
    expect_switch_serves(sw.addr);
    unsetenv("INCMOE_AUTH_KEY");
    harness::switch_stop(&sw);
    unlink(keyfile);
    ASSERT_TRUE(harness::switch_start(&sw));
}

/* ------------------------------------------------------------------------ */
/* the public port: the bootstrap listener facing junk                      */

/* A blocking TCP connection to "127.0.0.1:PORT" (-1 if refused). */
int tcp_connect(const std::string &addr)
{
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(addr.substr(addr.rfind(':') + 1).c_str()));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Send bytes, then read what comes back until the switch closes (or timeout_ms). */
std::string tcp_exchange(const std::string &addr, const std::string &bytes, int timeout_ms = 3000)
{
    int fd = tcp_connect(addr);
    if (fd < 0)
        return "<no connection>";
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t w = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the switch may close before it read everything */
        off += (size_t)w;
    }
    std::string got;
    double end = inc_now_s() + timeout_ms / 1000.0;
    while (inc_now_s() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        char buf[4096];
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            break;
        got.append(buf, (size_t)r);
    }
    close(fd);
    return got;
}

/* The REJECT's status in a reply, or 0 if the reply is no REJECT. */
int reject_status(const std::string &reply, std::string *text = nullptr)
{
    inc_boot_msg_t m;
    size_t used;
    if (inc_boot_parse((const uint8_t *)reply.data(), reply.size(), &m, &used, nullptr, 0) !=
            INCMOE_OK ||
        m.type != INC_BOOT_REJECT)
        return 0;
    if (text != nullptr)
        text->assign(m.text, m.text_len);
    return m.status;
}

/* A client handshake over a plain socket, recording every byte it sent.  The worker address
   is a real one: a peer past the handshake is one the switch trusts to send it. */
incmoe_status_t boot_recorded(const std::string &addr, const std::string &key, std::string *sent)
{
    int fd = tcp_connect(addr);
    if (fd < 0)
        return INCMOE_ERR_UNREACHABLE;
    inc_ucx_node_t node = {};
    ucp_address_t *worker = nullptr;
    size_t worker_len = 0;
    if (inc_ucx_node_open(&node, nullptr) != INCMOE_OK ||
        ucp_worker_get_address(node.worker, &worker, &worker_len) != UCS_OK) {
        close(fd);
        return INCMOE_ERR_TRANSPORT;
    }
    auto *b = new inc_boot_t;
    inc_boot_init(b, INC_BOOT_CLIENT, key.data(), key.size(), worker, worker_len);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (b->status == INCMOE_IN_PROGRESS) {
        const uint8_t *out;
        size_t n = inc_boot_output(b, &out);
        sent->append((const char *)out, n);
        if (n > 0 && send(fd, out, n, MSG_NOSIGNAL) != (ssize_t)n)
            break;
        inc_boot_sent(b, n);
        uint8_t buf[INC_BOOT_HDR + INC_BOOT_MAX_PAYLOAD];
        ssize_t r = recv(fd, buf, inc_boot_want(b), 0);
        if (r <= 0)
            break;
        inc_boot_feed(b, buf, (size_t)r, nullptr);
    }
    incmoe_status_t st = b->status;
    delete b;
    close(fd);
    ucp_worker_release_address(node.worker, worker);
    inc_ucx_node_close(&node);
    return st;
}

/* CPU seconds the process has used (utime + stime). */
double cpu_seconds(pid_t pid)
{
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *f = fopen(path.c_str(), "r");
    if (f == nullptr)
        return -1;
    char buf[1024] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* Fields after the command: state(3) ... utime(14) stime(15). */
    if (p == nullptr ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* TCP connections of the process on its bootstrap port (the listening socket not counted):
   its socket inodes, matched against /proc/net/tcp's rows for that local port. */
int port_conns(pid_t pid, const std::string &addr)
{
    unsigned port = (unsigned)atoi(addr.substr(addr.rfind(':') + 1).c_str());
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    std::set<unsigned long> inodes;
    DIR *d = opendir(dir.c_str());
    if (d == nullptr)
        return -1;
    while (struct dirent *e = readdir(d)) {
        char link[128] = "";
        ssize_t n = readlink((dir + "/" + e->d_name).c_str(), link, sizeof(link) - 1);
        unsigned long ino;
        if (n > 0 && sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes.insert(ino);
    }
    closedir(d);
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == nullptr)
        return -1;
    char line[512];
    int count = 0;
    while (fgets(line, sizeof(line), f) != nullptr) {
        unsigned lport, state;
        unsigned long ino;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &lport,
                   &state, &ino) == 3 &&
            lport == port && state != 0x0a && inodes.count(ino) > 0)
            count++;
    }
    fclose(f);
    return count;
}

/* The switch holds no connection on its bootstrap port any more, within a few seconds. */
void expect_port_closed(pid_t pid, const std::string &addr)
{
    double end = inc_now_s() + 5;
    while (port_conns(pid, addr) != 0 && inc_now_s() < end)
        usleep(20000);
    EXPECT_EQ(port_conns(pid, addr), 0) << "the switch kept junk connections open";
}

/* Idle after junk: a spinning thread would burn a whole core; a sleeping loop almost nothing.
   The bound is wide on purpose: it tells a spin from a sleep, not a fast switch from a slow. */
void expect_idle(pid_t pid)
{
    double before = cpu_seconds(pid);
    usleep(2000000);
    double used = cpu_seconds(pid) - before;
    EXPECT_LT(used, 1.0) << "the switch used " << used << " s of CPU in 2 s of idle";
}

std::string random_bytes(size_t n)
{
    std::string s(n, '\0');
    unsigned x = 12345;
    for (auto &c : s) {
        x = x * 1103515245u + 12345u;
        c = (char)(x >> 16);
    }
    return s;
}

TEST_F(Errors, JunkOnThePublicPortIsSurvived)
{
    std::string text;
    /* UCX 1.13's sockaddr listener aborted on 17 zero bytes and spun on a few KiB of junk. */
    std::string reply = tcp_exchange(sw.addr, std::string(17, '\0'));
    EXPECT_EQ(reject_status(reply, &text), INCMOE_ERR_PROTOCOL) << text;
    EXPECT_NE(text.find("magic"), std::string::npos) << text;
    expect_switch_serves(sw.addr);
    reply = tcp_exchange(sw.addr, std::string(16, '\xff'));
    EXPECT_EQ(reject_status(reply), INCMOE_ERR_PROTOCOL);
    expect_switch_serves(sw.addr);
    tcp_exchange(sw.addr, random_bytes(64 * 1024)); /* refused at once, maybe with a reset */
    expect_switch_serves(sw.addr);
    /* Connections that send nothing, or half a handshake, hold no one up meanwhile. */
    int silent = tcp_connect(sw.addr);
    int half = tcp_connect(sw.addr);
    ASSERT_GE(silent, 0);
    ASSERT_GE(half, 0);
    std::string hello;
    {
        auto *b = new inc_boot_t;
        static const char worker[] = "\x01\x00\xff"; /* a worker address without transports */
        inc_boot_init(b, INC_BOOT_CLIENT, nullptr, 0, worker, 3);
        const uint8_t *out;
        size_t n = inc_boot_output(b, &out);
        hello.assign((const char *)out, n);
        delete b;
    }
    ASSERT_EQ(send(half, hello.data(), hello.size(), MSG_NOSIGNAL), (ssize_t)hello.size());
    expect_switch_serves(sw.addr);
    /* The switch closes both at the handshake deadline. */
    char c;
    struct timeval tv = {8, 0};
    setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(recv(silent, &c, 1, 0), 0) << "a silent connection was not closed by the deadline";
    /* The half handshake's deadline may fall a moment later: read its reply up to the close. */
    setsockopt(half, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    ssize_t got;
    while ((got = recv(half, buf, sizeof(buf), 0)) > 0)
        ;
    EXPECT_EQ(got, 0) << "a half handshake was not closed by the deadline";
    EXPECT_EQ(port_conns(sw.pid, sw.addr), 0) << "the switch kept a junk connection";
    close(silent);
    close(half);
    expect_port_closed(sw.pid, sw.addr);
    expect_idle(sw.pid);
}

TEST_F(Errors, KeyedSwitchRefusesWrongKeysReplaysAndKeylessRanks)
{
    harness::switch_stop(&sw);
    char keyfile[] = "/tmp/incmoe-key-XXXXXX";
    int fd = mkstemp(keyfile);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "s3cret\n", 7), 7);
    close(fd);
    ASSERT_TRUE(harness::switch_start(&sw, {"--auth-key-file", keyfile}));
    /* A real handshake, captured, then replayed: the switch's nonce is new, the proof fails. */
    std::string captured;
    ASSERT_EQ(boot_recorded(sw.addr, "s3cret", &captured), INCMOE_OK);
    std::string text;
    std::string reply = tcp_exchange(sw.addr, captured);
    size_t challenge = INC_BOOT_HDR + 1 + INC_BOOT_NONCE + INC_BOOT_PROOF;
    ASSERT_GT(reply.size(), challenge);
    EXPECT_EQ(reject_status(reply.substr(challenge), &text), INCMOE_ERR_AUTH) << text;
    EXPECT_NE(text.find("wrong key"), std::string::npos) << text;
    setenv("INCMOE_AUTH_KEY", "s3cret", 1);
    expect_switch_serves(sw.addr);
    unsetenv("INCMOE_AUTH_KEY");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000, "wrong");
        if (st != INCMOE_ERR_AUTH)
            return "wrong key gave " + status_text(st);
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000);
        if (st != INCMOE_ERR_AUTH)
            return "no key gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    std::string sent;
    EXPECT_EQ(boot_recorded(sw.addr, "", &sent), INCMOE_ERR_AUTH);
    setenv("INCMOE_AUTH_KEY", "s3cret", 1);
    expect_switch_serves(sw.addr);
    unsetenv("INCMOE_AUTH_KEY");
    harness::switch_stop(&sw);
    unlink(keyfile);
    ASSERT_TRUE(harness::switch_start(&sw));
}

TEST_F(Errors, KeyedRankRefusesAKeylessSwitch)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 3000, "s3cret");
        return st == INCMOE_ERR_AUTH ? "" : "keyed rank, keyless switch gave " + status_text(st);
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* Past THROTTLE_FREE_FAILURES failed handshakes an address is refused for THROTTLE_FIRST_S,
   with a REJECT saying so; afterwards it is served again (TearDown). */
TEST_F(Errors, RepeatedFailuresFromOneAddressAreSlowedDown)
{
    for (int i = 0; i < THROTTLE_FREE_FAILURES + 1; i++)
        tcp_exchange(sw.addr, std::string(17, '\0')); /* returns once the switch refused it */
    std::string text;
    EXPECT_EQ(reject_status(tcp_exchange(sw.addr, ""), &text), INCMOE_ERR_AUTH) << text;
    EXPECT_NE(text.find("too many failed handshakes"), std::string::npos) << text;
    /* The refusal started at the last failure, before the REJECT just read: THROTTLE_FIRST_S
       from now it is over. */
    usleep((useconds_t)(THROTTLE_FIRST_S * 1e6));
}

/* A UCX message that does not carry a bootstrap session's token is refused. */
TEST_F(Errors, JoinWithoutTheSessionTokenIsRefused)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        RawClient c;
        if (!c.connect(sw.addr))
            return "connect";
        uint8_t forged[INC_BOOT_TOKEN] = {1, 2, 3};
        c.join(harness::unique_job_id(), 0, 1, forged);
        RawMsg m;
        if (!c.wait_for(WIRE_MSG_ERROR, &m, 3000) || m.hdr.status != INCMOE_ERR_PROTOCOL)
            return "a JOIN with a forged token was not refused";
        if (m.payload.find("bootstrap token") == std::string::npos)
            return "reason: " + m.payload;
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* A key holder's JOIN whose worker address UCX could not unpack (version field 14: UCX 1.13
   asserts on it) is refused with a reason, before any rank of the job would receive it; the
   switch serves the next job. */
TEST_F(Errors, JoinWithAnAddressUcxCannotUnpackIsRefused)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        RawClient c;
        if (!c.connect(sw.addr))
            return "connect";
        std::string addr = "\x0e"
                           "12345678\xff";
        c.join(harness::unique_job_id(), 0, 2, nullptr, false, &addr);
        RawMsg m;
        if (!c.wait_for(WIRE_MSG_ERROR, &m, 3000) || m.hdr.status != INCMOE_ERR_PROTOCOL)
            return "a JOIN with a malformed worker address was not refused";
        if (m.payload.find("JOIN: UCX worker address") == std::string::npos ||
            m.payload.find("version field 14") == std::string::npos)
            return "reason: " + m.payload;
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    expect_switch_serves(sw.addr);
}

/* A ring neighbour's worker address in UCX's layout (the switch relays it) whose TCP entry has
   an empty device address, which UCX would hand TCP as NULL: the rank that would connect to it
   refuses it against its own address and its communicator fails naming why. */
TEST_F(Errors, RingNeighbourAddressUcxWouldHandAsNullIsRefused)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int rank) -> std::string {
        if (rank == 0) {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = 0;
            p.nranks = 2;
            p.timeout_ms = 3000;
            p.algo = INCMOE_ALGO_RING;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st == INCMOE_OK) {
                incmoe_comm_destroy(comm);
                return "the ring connected to a neighbour address UCX would hand TCP as NULL";
            }
            return st == INCMOE_ERR_PROTOCOL ? "" : "ring rank 0 gave " + status_text(st);
        }
        RawClient c;
        if (!c.connect(sw.addr))
            return "connect";
        /* v2, a uuid; one device with an empty address; the tcp transport (name checksum
           0x19cf in 1.13 and 1.22), 8 bytes of attributes, a 2-byte interface address. */
        std::string addr = std::string("\x01\x02", 2) + "uuid-8by" + std::string("\x00\x80", 2) +
                           std::string("\xcf\x19", 2) + std::string(8, '\x10') + "\x82" + "ab";
        c.join(job, 1, 2, nullptr, false, &addr);
        RawMsg ack;
        if (!c.wait_for(WIRE_MSG_JOIN_ACK, &ack, 3000))
            return "no JOIN_ACK (the switch refused the address's layout?)";
        c.progress(2000);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* A peer's PEER_HELLO without the job's token binds nothing: the real rank's wire-up with the
   other ranks does not finish (with the HELLO taken it would, at once), and its create fails
   when the peer gives up and leaves the job, or at its timeout.  The ring waits for its left
   neighbour's HELLO, a2a for every other rank's. */
void expect_hello_without_token_refused(const std::string &addr, incmoe_algo_t algo)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int rank) -> std::string {
        if (rank == 0) {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = addr.c_str();
            p.job_id = job;
            p.rank = 0;
            p.nranks = 2;
            p.timeout_ms = 2000;
            p.algo = algo;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st == INCMOE_OK)
                incmoe_comm_destroy(comm);
            return st == INCMOE_ERR_TIMEOUT || st == INCMOE_ERR_PEER_FAILED
                       ? ""
                       : "rank 0 gave " + status_text(st);
        }
        RawClient c;
        if (!c.connect(addr))
            return "connect";
        c.join(job, 1, 2, nullptr, true);
        RawMsg ack;
        if (!c.wait_for(WIRE_MSG_JOIN_ACK, &ack, 3000))
            return "no JOIN_ACK";
        /* Rank 0's worker address: the first record after the fixed part. */
        size_t pos = sizeof(inc_wire_join_ack);
        uint32_t len;
        memcpy(&len, ack.payload.data() + pos, sizeof(len));
        std::string rank0 = ack.payload.substr(pos + sizeof(len), len);
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_PEER_HELLO, job);
        h.rank = 1;
        h.length = INCMOE_WIRE_TOKEN;
        uint8_t wrong[INCMOE_WIRE_TOKEN] = {};
        if (!c.send_to_worker(rank0, h, wrong, sizeof(wrong)))
            return "no endpoint to rank 0";
        c.progress(3000);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, RingHelloWithoutTheJobsTokenIsRefused)
{
    expect_hello_without_token_refused(sw.addr, INCMOE_ALGO_RING);
}

TEST_F(Errors, A2aHelloWithoutTheJobsTokenIsRefused)
{
    expect_hello_without_token_refused(sw.addr, INCMOE_ALGO_A2A);
}

/* Restarts the fixture's switch logging at debug level to a file of the test's, so a test can
   see joins happen; returns the file. */
std::string restart_logged(harness::SwitchProc *sw)
{
    harness::switch_stop(sw);
    std::string log = "/tmp/incmoe-switch-log-" + std::to_string(harness::unique_job_id());
    if (!harness::switch_start(sw, {"--timeout-ms", "1000", "--log-level", "debug"}, log))
        return "";
    return log;
}

/* Waits (at most 10 s) until the switch logged the join of rank to job. */
bool switch_saw_join(const std::string &log, unsigned long long job, int rank)
{
    std::string line = "job " + std::to_string(job) + ": rank " + std::to_string(rank) + " joined";
    for (double end = inc_now_s() + 10; inc_now_s() < end; usleep(10000)) {
        FILE *f = fopen(log.c_str(), "r");
        if (f == nullptr)
            return false;
        char buf[512];
        bool seen = false;
        while (!seen && fgets(buf, sizeof(buf), f) != nullptr)
            seen = strstr(buf, line.c_str()) != nullptr;
        fclose(f);
        if (seen)
            return true;
    }
    return false;
}

TEST_F(Errors, DuplicateRankIsRefused)
{
    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int i) -> std::string {
        /* The second claims rank 0 too, once the switch has the first's join. */
        if (i == 1 && !switch_saw_join(log, job, 0))
            return "the switch did not log the first join";
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, 0, 2, &comm, 1500);
        if (i == 1)
            return st == INCMOE_ERR_JOB ? "" : "duplicate rank gave " + status_text(st);
        return st == INCMOE_ERR_TIMEOUT ? "" : "lone rank gave " + status_text(st);
    });
    EXPECT_EQ(harness::failures(res), "");
    unlink(log.c_str());
}

TEST_F(Errors, RankBeyondJobSizeAndSizeDisagreementAreRefused)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        RawClient c;
        if (!c.connect(sw.addr))
            return "connect";
        c.join(harness::unique_job_id(), 4, 4);
        RawMsg m;
        if (!c.wait_for(WIRE_MSG_ERROR, &m, 3000) || m.hdr.status != INCMOE_ERR_JOB)
            return "rank 4 of 4 was not refused with a job error";
        if (m.payload.find("not below the job size") == std::string::npos)
            return "reason: " + m.payload;
        /* The client library refuses it before sending anything. */
        incmoe_comm_t *comm;
        if (create(sw.addr, 1, 4, 4, &comm) != INCMOE_ERR_INVALID_ARG)
            return "library accepted rank 4 of 4";
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");

    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    res = harness::run_ranks(2, [&](int i) -> std::string {
        /* Rank 1 says 3 ranks once the switch has formed the job's size from rank 0's join. */
        if (i == 1 && !switch_saw_join(log, job, 0))
            return "the switch did not log rank 0's join";
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, i, 2 + i, &comm, 1500);
        if (i == 1)
            return st == INCMOE_ERR_MISMATCH ? "" : "job size 3 vs 2 gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    unlink(log.c_str());
}

/* Runs a job whose ranks do body; every rank must end with want, and the reason must mention what.
 */
void expect_job_fails(const std::string &addr, int n, incmoe_status_t want, const std::string &what,
                      const std::function<incmoe_status_t(incmoe_comm_t *, int)> &body)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, rank, n, &comm);
            if (st == want)
                return ""; /* a slow rank may hear of the failure while still joining */
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            st = body(comm, rank);
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != want)
                return "got " + status_text(st) + " (" + text + "), want " + status_text(want);
            if (text.find(what) == std::string::npos)
                return "reason '" + text + "' does not mention '" + what + "'";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, RanksDisagreeingOnACollective)
{
    /* Size. */
    expect_job_fails(sw.addr, 3, INCMOE_ERR_MISMATCH, "disagree",
                     [](incmoe_comm_t *comm, int rank) {
                         static float buf[4096];
                         incmoe_mr_t *mr;
                         incmoe_mem_register(comm, buf, sizeof(buf), &mr);
                         size_t valid[3] = {64, 64, rank == 2 ? 128u : 64u};
                         incmoe_layout_t l = {1024, 0, 1024, valid};
                         incmoe_req_t req;
                         incmoe_status_t st = incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
                         return st != INCMOE_OK ? st : incmoe_wait(comm, &req);
                     });
    /* Datatype, then operation. */
    for (int what = 0; what < 2; what++) {
        expect_job_fails(
            sw.addr, 2, INCMOE_ERR_MISMATCH, "disagree", [&](incmoe_comm_t *comm, int rank) {
                static float send[512], recv[256];
                incmoe_mr_t *ms, *mr;
                incmoe_mem_register(comm, send, sizeof(send), &ms);
                incmoe_mem_register(comm, recv, sizeof(recv), &mr);
                incmoe_layout_t l = {1024, 0, 1024, nullptr};
                incmoe_dtype_t dt = what == 0 && rank == 1 ? INCMOE_INT32 : INCMOE_FLOAT32;
                incmoe_redop_t op = what == 1 && rank == 1 ? INCMOE_MAX : INCMOE_SUM;
                incmoe_req_t req;
                incmoe_status_t st = incmoe_reducescatter(comm, ms, 0, mr, 0, &l, dt, op, &req);
                return st != INCMOE_OK ? st : incmoe_wait(comm, &req);
            });
    }
}

TEST_F(Errors, RangeOutsideTheRegisteredBufferFailsEveryRank)
{
    expect_job_fails(sw.addr, 3, INCMOE_ERR_OUT_OF_RANGE, "outside the registered",
                     [](incmoe_comm_t *comm, int rank) {
                         static char small[256], big[4096];
                         incmoe_mr_t *ms, *mb;
                         incmoe_mem_register(comm, small, sizeof(small), &ms);
                         incmoe_mem_register(comm, big, sizeof(big), &mb);
                         incmoe_layout_t l = {1024, 0, 512, nullptr};
                         incmoe_req_t req;
                         /* Rank 1 names 512 bytes at offset 0 of a 256-byte region; nothing is sent
                          * or written. */
                         incmoe_status_t st =
                             incmoe_allgather(comm, rank == 1 ? ms : mb, 0, mb, 0, &l, &req);
                         return st != INCMOE_OK ? st : incmoe_wait(comm, &req);
                     });
}

TEST_F(Errors, UnregisteredBufferAndBadArgumentsAreRejected)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        if (create(sw.addr, harness::unique_job_id(), 0, 1, &comm) != INCMOE_OK)
            return "create";
        incmoe_mr_t *mr;
        static char buf[64];
        incmoe_mem_register(comm, buf, sizeof(buf), &mr);
        incmoe_req_t req;
        if (incmoe_allreduce(comm, mr, 0, mr, 0, 4, (incmoe_dtype_t)INC_DTYPE_COUNT, INCMOE_SUM,
                             &req) != INCMOE_ERR_UNSUPPORTED)
            return "unknown datatype accepted";
        std::string text = comm_text(comm);
        incmoe_comm_destroy(comm);
        if (text.find("datatype") == std::string::npos)
            return "reason: " + text;
        if (incmoe_test(nullptr, &req) != INCMOE_ERR_INVALID_ARG)
            return "NULL communicator accepted";
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* A raw rank 1 next to a real rank 0: whatever the raw one sends wrong, rank 0 hears why.
   Rank 0 posts an AllGather of two blocks of `block` bytes: small (SMALL) at the default,
   in chunks (POST/DATA) from 65544 bytes. */
void expect_raw_breaks_job(const std::string &addr, incmoe_status_t want, const std::string &what,
                           const std::function<void(RawClient &, uint64_t job)> &misbehave,
                           size_t block = 4096)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            if (rank == 1) {
                RawClient c;
                if (!c.connect(addr))
                    return "connect";
                c.join(job, 1, 2);
                if (!c.wait_for(WIRE_MSG_JOIN_ACK, nullptr, 5000))
                    return "no JOIN_ACK";
                c.progress(300); /* let rank 0 finish joining and post */
                misbehave(c, job);
                RawMsg m;
                if (!c.wait_for(WIRE_MSG_ERROR, &m, 5000))
                    return "the misbehaving rank got no ERROR";
                return "";
            }
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, 0, 2, &comm, 5000);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            static float buf[1 << 16];
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            incmoe_layout_t l = {block, 0, block, nullptr};
            incmoe_req_t req;
            st = incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != want)
                return "got " + status_text(st) + " (" + text + "), want " + status_text(want);
            if (text.find(what) == std::string::npos)
                return "reason '" + text + "' does not mention '" + what + "'";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
}

inc_wire_hdr raw_hdr(inc_wire_msg_t msg, uint64_t job, incmoe_stream_t stream)
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, msg, job);
    h.rank = 1;
    h.stream = (uint8_t)stream;
    h.epoch = 1;
    return h;
}

TEST_F(Errors, GarbageAndTruncatedMessages)
{
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "malformed",
                          [](RawClient &c, uint64_t job) {
                              char garbage[10] = "garbage!!";
                              c.send(garbage, sizeof(garbage), nullptr, 0);
                          });
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "truncated",
                          [](RawClient &c, uint64_t job) {
                              inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
                              h.root = 1;
                              h.length = 4096; /* claims 4096, carries 100 */
                              h.total = 4096;
                              char data[100] = {};
                              c.send(h, data, sizeof(data));
                          });
}

TEST_F(Errors, UnknownOperationAndDatatype)
{
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "unknown message type",
                          [](RawClient &c, uint64_t job) {
                              inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
                              h.msg = 99;
                              c.send(h);
                          });
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_PROTOCOL, "unknown datatype", [](RawClient &c, uint64_t job) {
            inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_REDUCESCATTER);
            h.root = 0;
            h.length = 16;
            h.total = 16;
            h.dtype = 42;
            h.redop = INCMOE_SUM;
            char data[16] = {};
            c.send(h, data, sizeof(data));
        });
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_PROTOCOL, "unknown datatype", [](RawClient &c, uint64_t job) {
            inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_REDUCESCATTER);
            h.root = 0;
            h.length = 16;
            h.total = 16;
            h.dtype = INCMOE_FLOAT32;
            h.redop = 17;
            char data[16] = {};
            c.send(h, data, sizeof(data));
        });
}

TEST_F(Errors, RangesOutsideWhatWasAnnounced)
{
    /* Announces its block, then sends a chunk claiming an 8192-byte window (in chunks: the
       blocks are over the small limit). */
    const uint64_t block = 65544;
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_MISMATCH, "announced",
        [&](RawClient &c, uint64_t job) {
            uint64_t bytes[2] = {block, block};
            inc_wire_hdr p = raw_hdr(WIRE_MSG_POST, job, INCMOE_STREAM_ALLGATHER);
            p.total = block;
            p.dtype = INCMOE_UINT8;
            p.sig = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_UINT8, INCMOE_SUM, bytes, 2);
            c.send(p);
            inc_wire_hdr d = p;
            d.msg = WIRE_MSG_DATA;
            d.root = 1;
            d.total = 8192;
            d.length = 8192;
            std::vector<char> data(8192);
            c.send(d, data.data(), data.size());
        },
        block);
    /* A window that does not follow the switch's chunking. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "chunking", [](RawClient &c, uint64_t job) {
        inc_wire_hdr d = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
        d.root = 1;
        d.offset = 3;
        d.length = 16;
        d.total = 4096;
        char data[16] = {};
        c.send(d, data, sizeof(data));
    });
    /* AllGather data for somebody else's block. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "data for root",
                          [](RawClient &c, uint64_t job) {
                              inc_wire_hdr d = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
                              d.root = 0;
                              d.length = 16;
                              d.total = 16;
                              char data[16] = {};
                              c.send(d, data, sizeof(data));
                          });
    /* Claiming to be another rank. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "claiming", [](RawClient &c, uint64_t job) {
        inc_wire_hdr h = raw_hdr(WIRE_MSG_HEARTBEAT, job, INCMOE_STREAM_ALLGATHER);
        h.rank = 0;
        c.send(h);
    });
}

/* A SMALL of allgather epoch `epoch` with this table, header total and payload bytes. */
void send_small(RawClient &c, uint64_t job, uint64_t epoch, std::vector<uint64_t> table,
                uint64_t total, size_t data_bytes, bool honest_sig = true)
{
    inc_wire_hdr h = raw_hdr(WIRE_MSG_SMALL, job, INCMOE_STREAM_ALLGATHER);
    h.epoch = epoch;
    h.dtype = INCMOE_UINT8;
    h.total = total;
    h.sig = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_UINT8, INCMOE_SUM, table.data(),
                               (int)table.size());
    if (!honest_sig) /* a signature of other sizes than the table's */
        h.sig = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_UINT8, INCMOE_SUM,
                                   std::vector<uint64_t>{4096, 4096}.data(), 2);
    std::vector<char> payload(8 * table.size() + data_bytes);
    memcpy(payload.data(), table.data(), 8 * table.size());
    h.length = payload.size();
    c.send(h, payload.data(), payload.size());
}

TEST_F(Errors, MalformedAndMismatchedSmallCollectives)
{
    /* Rank 0 sends its AllGather as SMALL; the raw rank 1 posts it in chunks. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_MISMATCH, "disagree", [](RawClient &c, uint64_t job) {
        uint64_t bytes[2] = {4096, 4096};
        inc_wire_hdr p = raw_hdr(WIRE_MSG_POST, job, INCMOE_STREAM_ALLGATHER);
        p.total = 4096;
        p.dtype = INCMOE_UINT8;
        p.sig = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_UINT8, INCMOE_SUM, bytes, 2);
        c.send(p);
    });
    /* The other way round: rank 0 posts in chunks (large blocks), rank 1 sends SMALL. */
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_MISMATCH, "disagree",
        [](RawClient &c, uint64_t job) {
            send_small(c, job, 1, {65544, 65544}, 65544, 65544);
        },
        65544);
    /* A table whose sizes are not the ones its signature describes. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_MISMATCH, "signature",
                          [](RawClient &c, uint64_t job) {
                              send_small(c, job, 1, {4096, 2048}, 2048, 2048, false);
                          });
    /* A table that gives the sender another window than its header. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "its header",
                          [](RawClient &c, uint64_t job) {
                              send_small(c, job, 1, {4096, 4096}, 1024, 4096);
                          });
    /* Fewer data bytes than the table calls for. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "table calls for",
                          [](RawClient &c, uint64_t job) {
                              send_small(c, job, 1, {4096, 4096}, 4096, 4000);
                          });
    /* Too short to hold the table of the job's 2 sizes. */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "table of", [](RawClient &c, uint64_t job) {
        uint64_t bytes[2] = {4096, 4096};
        inc_wire_hdr h = raw_hdr(WIRE_MSG_SMALL, job, INCMOE_STREAM_ALLGATHER);
        h.dtype = INCMOE_UINT8;
        h.total = 4096;
        h.sig = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_UINT8, INCMOE_SUM, bytes, 2);
        char payload[8] = {};
        h.length = sizeof(payload);
        c.send(h, payload, sizeof(payload));
    });
    /* Windows over the small limit, sent as SMALL anyway (a later epoch, alone). */
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "exceed", [](RawClient &c, uint64_t job) {
        send_small(c, job, 2, {100000, 100000}, 100000, 100000);
    });
    /* A SMALL with a chunk offset is malformed. */
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_PROTOCOL, "malformed", [](RawClient &c, uint64_t job) {
            inc_wire_hdr h = raw_hdr(WIRE_MSG_SMALL, job, INCMOE_STREAM_ALLGATHER);
            h.offset = 8;
            char payload[16] = {};
            h.length = sizeof(payload);
            c.send(h, payload, sizeof(payload));
        });
    /* SMALL_FWD is the switch's to send. */
    expect_raw_breaks_job(
        sw.addr, INCMOE_ERR_PROTOCOL, "never send", [](RawClient &c, uint64_t job) {
            inc_wire_hdr h = raw_hdr(WIRE_MSG_SMALL_FWD, job, INCMOE_STREAM_ALLGATHER);
            c.send(h);
        });
}

TEST_F(Errors, SenderIgnoringCreditsCannotMakeTheSwitchBuffer)
{
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "credits", [](RawClient &c, uint64_t job) {
        /* A 128-chunk window sent without waiting for a single credit back (64 of the default
           128 KiB chunks are granted). */
        const uint64_t chunk = 131072, total = 128 * chunk;
        std::vector<char> data(chunk);
        for (uint64_t k = 0; k < 128; k++) {
            inc_wire_hdr d = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
            d.epoch = 5; /* never armed: nothing is forwarded, so no credit comes back */
            d.root = 1;
            d.offset = k * chunk;
            d.length = chunk;
            d.total = total;
            d.chunk = (uint32_t)k;
            c.send(&d, sizeof(d), data.data(), data.size(), true);
        }
    });
}

TEST_F(Errors, JobsThatWouldExceedTheMemoryBoundAreRefused)
{
    harness::switch_stop(&sw);
    ASSERT_TRUE(harness::switch_start(&sw, {"--max-memory", "100M"}));
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        /* 2 ranks need 64 x ((128K + 16) x 6 + 128K x 6) = 96 MiB + 6 KiB: admitted.  8 ranks
           need over 240 MiB: refused. */
        incmoe_status_t st = create(sw.addr, harness::unique_job_id(), 0, 8, &comm, 3000);
        if (st != INCMOE_ERR_NO_MEMORY)
            return "8-rank job gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* Ranks 0..n-2 wait on a collective (an AllGather, or a dispatch with rows for every rank);
   rank n-1 dies (or hangs) instead of joining it. */
void expect_dead_rank_detected(const std::string &addr, int sig,
                               incmoe_algo_t algo = INCMOE_ALGO_INC, bool dispatch = false)
{
    const int n = 3, bound_ms = 2000;
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, rank, n, &comm, bound_ms, nullptr, algo);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            std::string pidfile = "/tmp/incmoe-stopped-" + std::to_string(job);
            if (rank == n - 1) {
                FILE *f = fopen(pidfile.c_str(), "w");
                fprintf(f, "%d\n", (int)getpid());
                fclose(f);
                usleep(200000);
                raise(sig); /* SIGKILL: dead; SIGSTOP: alive but silent */
                pause();
            }
            static float buf[1 << 18];
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            incmoe_layout_t l = {sizeof(buf) / n / 64 * 64, 0, sizeof(buf) / n / 64 * 64, nullptr};
            incmoe_req_t req;
            double t0 = inc_now_s();
            uint64_t sets[4] = {7, 7, 7, 7};
            incmoe_dispatch_params_t dp = {};
            dp.send_mr = mr;
            dp.nrows = 4;
            dp.row_bytes = 4096;
            dp.sets = sets;
            dp.recv_mr = mr;
            dp.recv_offset = sizeof(buf) / 2;
            dp.capacity = 4 * (size_t)n;
            st = dispatch ? incmoe_dispatch(comm, &dp, &req)
                          : incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            double waited = inc_now_s() - t0;
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (rank == 0) { /* a stopped rank never ends by itself */
                FILE *f = fopen(pidfile.c_str(), "r");
                int pid = 0;
                if (f != nullptr && fscanf(f, "%d", &pid) == 1 && pid > 0)
                    kill(pid, SIGKILL);
                if (f != nullptr)
                    fclose(f);
                unlink(pidfile.c_str());
            }
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find("rank " + std::to_string(n - 1)) == std::string::npos)
                return "reason does not name the rank: " + text;
            /* The bound, plus slack for a loaded 2-core machine: a hang would be caught here. */
            if (waited > bound_ms / 1000.0 * 2 + 3)
                return "noticed after " + std::to_string(waited) + " s";
            return "";
        },
        60);
    for (int r = 0; r < n - 1; r++)
        EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST_F(Errors, KilledRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGKILL);
}

TEST_F(Errors, SilentRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGSTOP);
}

/* On a2a every rank also holds a connection to the dead one: the first to notice names it. */
TEST_F(Errors, A2aKilledRankFailsTheOthersWithinTheBound)
{
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_A2A);
}

/* A rank killed while the others dispatch to it point to point: they fail naming it. */
TEST_F(Errors, RankKilledDuringAPointToPointDispatchFailsThePeersNamingIt)
{
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_A2A, true);
    expect_dead_rank_detected(sw.addr, SIGKILL, INCMOE_ALGO_RING, true);
}

/* Rank 0 destroys its communicator with an AllGather the others never post; they wait on a
   barrier rank 0 never joins.  Destroy returns after its bound, and the others' waits fail
   with a reason naming rank 0 instead of hanging.  release: incmoe_comm_release instead,
   with a long bound (30 s) it must not wait for: it and the others' failures come within a
   tenth of it (a bound that tells waiting from not waiting, no speed figure). */
void expect_destroy_in_flight_fails_peers(const std::string &addr, incmoe_algo_t algo,
                                          bool release = false)
{
    const int n = 3, bound_ms = release ? 30000 : 2000;
    const double within_s = release ? bound_ms / 10000.0 : bound_ms / 1000.0 * 2 + 8;
    unsigned long long job = harness::unique_job_id();
    /* How many of the others have created their communicator: rank 0 leaves only then, so
       none of them hears of it while still joining. */
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    int *created = static_cast<int *>(shared);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            p.timeout_ms = bound_ms;
            p.algo = algo;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            incmoe_req_t req;
            if (rank != 0)
                __atomic_add_fetch(created, 1, __ATOMIC_SEQ_CST);
            for (int ms = 0; rank == 0 && ms < 30000; ms++) {
                if (__atomic_load_n(created, __ATOMIC_SEQ_CST) == n - 1)
                    break;
                usleep(1000);
            }
            double t0 = inc_now_s();
            if (rank == 0) {
                static char buf[3 * 4096];
                incmoe_mr_t *mr;
                incmoe_mem_register(comm, buf, sizeof(buf), &mr);
                incmoe_layout_t l = {4096, 0, 4096, nullptr};
                st = incmoe_allgather(comm, mr, 0, mr, 0, &l, &req);
                if (st != INCMOE_OK)
                    return "allgather: " + status_text(st);
                /* Both also unmap mr, still in use. */
                st = release ? incmoe_comm_release(comm) : incmoe_comm_destroy(comm);
                double waited = inc_now_s() - t0;
                if (st != INCMOE_ERR_TIMEOUT)
                    return "destroy gave " + status_text(st);
                /* Destroy: the bound, plus closing, plus slack for a loaded 2-core machine: a
                   hang would be caught here. */
                if (waited > within_s)
                    return "destroy returned after " + std::to_string(waited) + " s";
                return "";
            }
            st = incmoe_barrier(comm, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            double waited = inc_now_s() - t0;
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find(release ? "rank 0 released" : "rank 0") == std::string::npos)
                return "reason does not name rank 0: " + text;
            if (waited > within_s)
                return "noticed after " + std::to_string(waited) + " s";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
    munmap(shared, 4096);
}

TEST_F(Errors, DestroyWithCollectiveInFlightFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_INC);
}

TEST_F(Errors, RingDestroyWithCollectiveInFlightFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_RING);
}

TEST_F(Errors, ReleaseWithCollectiveInFlightDoesNotWaitAndFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_INC, true);
}

TEST_F(Errors, RingReleaseWithCollectiveInFlightDoesNotWaitAndFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_RING, true);
}

TEST_F(Errors, A2aDestroyWithCollectiveInFlightFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_A2A);
}

TEST_F(Errors, A2aReleaseWithCollectiveInFlightDoesNotWaitAndFailsThePeers)
{
    expect_destroy_in_flight_fails_peers(sw.addr, INCMOE_ALGO_A2A, true);
}

/* With nothing in flight a release leaves in order: the others' next collective, among
   themselves in a job of their own, is unaffected, and release returns INCMOE_OK. */
TEST_F(Errors, ReleaseWithNothingInFlightLeavesInOrder)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(2, [&](int rank) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create(sw.addr, job, rank, 2, &comm);
        if (st != INCMOE_OK)
            return "create: " + status_text(st);
        incmoe_req_t req;
        st = incmoe_barrier(comm, &req);
        if (st == INCMOE_OK)
            st = incmoe_wait(comm, &req);
        if (st != INCMOE_OK)
            return "barrier: " + status_text(st);
        st = incmoe_comm_release(comm);
        return st == INCMOE_OK ? "" : "release gave " + status_text(st);
    });
    EXPECT_EQ(harness::failures(res), "");
    EXPECT_EQ(incmoe_comm_release(nullptr), INCMOE_ERR_INVALID_ARG);
}

/*
 * Rank 2 stays alive but never posts the AllGather ranks 0 and 1 posted: after the
 * switch's progress timeout every rank of the job fails with INCMOE_ERR_TIMEOUT and a
 * reason naming rank 2 and the collective, and the switch serves a new job.
 */
TEST(ProgressTimeout, RankThatNeverPostsFailsTheJobNamingIt)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "1500"}));
    const int n = 3;
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(sw.addr, job, rank, n, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            std::string fail;
            if (rank < 2) {
                static char send[64], recv[3 * 64];
                incmoe_mr_t *ms, *mr;
                incmoe_mem_register(comm, send, sizeof(send), &ms);
                incmoe_mem_register(comm, recv, sizeof(recv), &mr);
                incmoe_layout_t l = {64, 0, 64, nullptr};
                incmoe_req_t req;
                st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
                if (st == INCMOE_OK)
                    st = incmoe_wait(comm, &req);
            } else {
                /* Alive (its proxy answers heartbeats) but posting nothing. */
                double deadline = inc_now_s() + 60;
                while ((st = incmoe_comm_error(comm, nullptr, 0)) == INCMOE_OK &&
                       inc_now_s() < deadline)
                    usleep(20000);
            }
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_TIMEOUT)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find("rank 2 ") == std::string::npos ||
                text.find("allgather epoch 1") == std::string::npos)
                return "reason does not name rank 2 and the collective: " + text;
            return "";
        },
        90);
    EXPECT_EQ(harness::failures(res), "");
    expect_switch_serves(sw.addr);
    harness::switch_stop(&sw);
}

/*
 * The ranks ask the job's progress timeout (progress_timeout_ms): 1.5 s and 1 s, of a switch
 * whose own is ten minutes.  The job takes the largest asked: the AllGather rank 1 never posts
 * fails both ranks after 1.5 s, and the reason says so.  A value out of range is refused.
 */
TEST(ProgressTimeout, TheRanksAskTheJobsProgressTimeout)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "600000"}));
    const int n = 2;
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_PROGRESS_TIMEOUT;
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            p.progress_timeout_ms = -1;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_ERR_INVALID_ARG)
                return "progress_timeout_ms -1 gave " + status_text(st);
            p.progress_timeout_ms = rank == 0 ? 1500 : 1000;
            st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            if (rank == 0) {
                static char send[64], recv[2 * 64];
                incmoe_mr_t *ms, *mr;
                incmoe_mem_register(comm, send, sizeof(send), &ms);
                incmoe_mem_register(comm, recv, sizeof(recv), &mr);
                incmoe_layout_t l = {64, 0, 64, nullptr};
                incmoe_req_t req;
                st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
                if (st == INCMOE_OK)
                    st = incmoe_wait(comm, &req);
            } else {
                /* Alive but posting nothing; at the switch's own timeout this would still wait. */
                double deadline = inc_now_s() + 60;
                while ((st = incmoe_comm_error(comm, nullptr, 0)) == INCMOE_OK &&
                       inc_now_s() < deadline)
                    usleep(20000);
            }
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_TIMEOUT)
                return "got " + status_text(st) + " (" + text + ")";
            if (text.find("rank 1 did not post within 1.5 s") == std::string::npos)
                return "reason does not name rank 1 and 1.5 s: " + text;
            return "";
        },
        90);
    EXPECT_EQ(harness::failures(res), "");
    harness::switch_stop(&sw);
}

/*
 * Rank 0 posts four barriers at once; rank 1 posts each a while after the previous one
 * completed.  Rank 1 is never late for what it could reach, though the last barrier
 * waits for it longer than the progress timeout: the job must not fail.
 */
TEST(ProgressTimeout, PostingAheadDoesNotMakeTheOthersLate)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw, {"--progress-timeout-ms", "3000"}));
    const int n = 2, count = 4;
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(sw.addr, job, rank, n, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            incmoe_req_t req[count];
            for (int k = 0; k < count && st == INCMOE_OK; k++) {
                if (rank == 1) {
                    usleep(1200 * 1000);
                    st = incmoe_barrier(comm, &req[k]);
                    if (st == INCMOE_OK)
                        st = incmoe_wait(comm, &req[k]);
                } else {
                    st = incmoe_barrier(comm, &req[k]);
                }
            }
            for (int k = 0; k < count && st == INCMOE_OK && rank == 0; k++)
                st = incmoe_wait(comm, &req[k]);
            std::string text = comm_text(comm);
            incmoe_status_t dst = incmoe_comm_destroy(comm);
            if (st != INCMOE_OK)
                return "got " + status_text(st) + " (" + text + ")";
            if (dst != INCMOE_OK)
                return "destroy: " + status_text(dst);
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
    harness::switch_stop(&sw);
}

TEST_F(Errors, DeadSwitchFailsEveryRank)
{
    harness::SwitchProc doomed;
    ASSERT_TRUE(harness::switch_start(&doomed));
    unsigned long long job = harness::unique_job_id();
    pid_t victim = doomed.pid;
    /* Shared with the ranks: how many have seen the first barrier complete.  The switch dies
       only once both have, or a rank whose DONE was still in flight fails its first barrier. */
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    int *passed_first = static_cast<int *>(shared);
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(doomed.addr, job, rank, 2, &comm, 2000);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            incmoe_req_t req;
            st = incmoe_barrier(comm, &req); /* both have joined */
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            if (st != INCMOE_OK)
                return "first barrier: " + status_text(st);
            __atomic_add_fetch(passed_first, 1, __ATOMIC_SEQ_CST);
            if (rank == 0) {
                /* At most 10 s: rank 1 may have failed instead. */
                for (int ms = 0; ms < 10000 && __atomic_load_n(passed_first, __ATOMIC_SEQ_CST) < 2;
                     ms++)
                    usleep(1000);
                kill(victim, SIGKILL);
            }
            usleep(100000);
            st = incmoe_barrier(comm, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            incmoe_comm_destroy(comm);
            return st == INCMOE_ERR_PEER_FAILED ? "" : "got " + status_text(st);
        },
        60);
    EXPECT_EQ(res[0], "");
    EXPECT_EQ(res[1], "");
    munmap(shared, 4096);
    harness::switch_stop(&doomed);
}

/* A switch that took the TCP connection but never answers (stopped): the join times out with
   an error, and the rank's process ends normally.  Tearing the endpoint down with the JOIN
   still queued on it used to make UCX abort the process. */
TEST_F(Errors, JoinAgainstAStoppedSwitchTimesOut)
{
    harness::SwitchProc stopped;
    ASSERT_TRUE(harness::switch_start(&stopped));
    ASSERT_EQ(kill(stopped.pid, SIGSTOP), 0);
    auto res = harness::run_ranks(
        1,
        [&](int) -> std::string {
            setenv("INCMOE_TIMEOUT_MS", "1500", 1);
            incmoe_comm_params_t p = {};
            p.switch_addr = stopped.addr.c_str();
            p.job_id = harness::unique_job_id();
            p.rank = 0;
            p.nranks = 2;
            incmoe_comm_t *comm = nullptr;
            double t0 = inc_now_s();
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            double took = inc_now_s() - t0;
            fprintf(stderr, "join against a stopped switch: %s after %.2f s\n",
                    status_text(st).c_str(), took);
            if (st != INCMOE_ERR_TIMEOUT)
                return "create gave " + status_text(st);
            /* It waited its timeout, and not much more: a hang would be caught here. */
            if (took < 1.4 || took > 4.0)
                return "create returned after " + std::to_string(took) + " s";
            return "";
        },
        30);
    EXPECT_EQ(harness::failures(res), "") << "a rank killed by a signal did not end normally";
    kill(stopped.pid, SIGCONT);
    int status = harness::switch_stop(&stopped);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the resumed switch crashed";
}

/* A collective in flight when the switch stops: every rank's wait fails after the job's
   timeout, and each rank's process is gone shortly after that (its teardown waits are short
   once the communicator failed).  The ends are measured here, in the parent. */
TEST_F(Errors, StoppedSwitchDuringACollectiveEndsEveryRankPromptly)
{
    const int n = 2, job_ms = 1500;
    harness::SwitchProc stopped;
    /* The switch's floor is below what the ranks ask: the job runs with the ranks' 1.5 s. */
    ASSERT_TRUE(harness::switch_start(&stopped, {"--timeout-ms", "1000"}));
    /* Shared with the ranks: [0] when the switch was stopped, [1 + r] when rank r's wait failed. */
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    volatile double *when = static_cast<double *>(shared);
    pid_t victim = stopped.pid;
    unsigned long long job = harness::unique_job_id();
    std::vector<double> ended;
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create(stopped.addr, job, rank, n, &comm, job_ms);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            incmoe_req_t req;
            st = incmoe_barrier(comm, &req); /* both have joined */
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            if (st != INCMOE_OK)
                return "first barrier: " + status_text(st);
            static float buf[1 << 21]; /* 8 MiB: data still queued when the switch stops */
            incmoe_mr_t *mr;
            incmoe_mem_register(comm, buf, sizeof(buf), &mr);
            /* Rank 1 posts only once the switch stopped, so the AllReduce cannot finish. */
            if (rank == 1)
                while (when[0] == 0)
                    usleep(1000);
            st = incmoe_allreduce(comm, mr, 0, mr, 0, 1 << 21, INCMOE_FLOAT32, INCMOE_SUM, &req);
            if (rank == 0) {
                usleep(20000);
                when[0] = inc_now_s();
                kill(victim, SIGSTOP);
            }
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            when[1 + rank] = inc_now_s();
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_PEER_FAILED)
                return "got " + status_text(st) + " (" + text + ")";
            return "";
        },
        60, &ended);
    EXPECT_EQ(harness::failures(res), "");
    kill(stopped.pid, SIGCONT);
    harness::switch_stop(&stopped);
    ASSERT_EQ(ended.size(), (size_t)n);
    for (int r = 0; r < n; r++) {
        double failed = when[1 + r] - when[0], exited = ended[r] - when[0];
        fprintf(stderr, "rank %d: failed %.2f s, exited %.2f s after the switch stopped\n", r,
                failed, exited);
        /* Exit within timeout + 0.5 s is the aim; the bound here has slack for a loaded
           machine while still catching a teardown that waits seconds. */
        EXPECT_LT(exited, job_ms / 1000.0 + 1.5) << "rank " << r << " lingered";
    }
    munmap(shared, 4096);
}

/* One rank asks a 250 ms timeout, a quarter of the switch's floor: the switch keeps the job's
   timeout at its floor or above, so neither it nor the ranks give up on a healthy peer that
   heartbeats at the job's pace (400 ms of quiet after each burst of barriers), or that pauses for
   500 ms (rank 0 is stopped that long halfway).  Rank 1 asks its timeout only once the switch has
   rank 0's join, since the ask also bounds its own join: no wait for rank 0 falls under it. */
TEST_F(Errors, ShortTimeoutOnOneRankDoesNotFailTheJob)
{
    const int n = 2;
    std::string log = restart_logged(&sw);
    ASSERT_NE(log, "");
    unsigned long long job = harness::unique_job_id();
    void *shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    volatile pid_t *rank0_pid = static_cast<pid_t *>(shared);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            if (rank == 0) {
                *rank0_pid = getpid();
            } else {
                if (!switch_saw_join(log, job, 0))
                    return "the switch did not log rank 0's join";
                setenv("INCMOE_TIMEOUT_MS", "250", 1);
            }
            incmoe_comm_params_t p = {};
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            /* 100 barriers in bursts of 20, with 400 ms of quiet after each (longer than the
               250 ms asked), ~2.5 s in all. */
            for (int i = 0; i < 100 && st == INCMOE_OK; i++) {
                if (rank == 1 && i == 50) {
                    kill(*rank0_pid, SIGSTOP);
                    usleep(500000);
                    kill(*rank0_pid, SIGCONT);
                }
                incmoe_req_t req;
                st = incmoe_barrier(comm, &req);
                if (st == INCMOE_OK)
                    st = incmoe_wait(comm, &req);
                if (i % 20 == 19)
                    usleep(400000);
            }
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st != INCMOE_OK)
                return "barrier: " + status_text(st) + " (" + text + ")";
            return "";
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
    munmap(shared, 4096);
    unlink(log.c_str());
}

} // namespace

/*
 * A test hook, a slow receive path: in a rank process that sets g_ring_rx_delay_us before it
 * creates its (one) communicator, handling each ring data message takes that much longer, as on
 * a machine slow enough (a sanitizer build, a loaded host) that ring data keeps arriving faster
 * than the proxy takes it in.  The library installs its message handler with
 * ucp_worker_set_am_recv_handler; this program's own definition of that name comes first in the
 * dynamic lookup, so libincmoe's call lands here, which wraps the handler and calls UCX's.
 * Outside the anonymous namespace: the name must stay external.
 */
static unsigned g_ring_rx_delay_us;
static ucp_am_recv_callback_t g_wrapped_cb;
static void *g_wrapped_arg;

static ucs_status_t slow_ring_rx(void *, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    struct inc_wire_hdr h;
    if (header_length >= sizeof(h)) {
        memcpy(&h, header, sizeof(h));
        if (h.msg == WIRE_MSG_RING_GATHER || h.msg == WIRE_MSG_RING_REDUCE)
            usleep(g_ring_rx_delay_us);
    }
    return g_wrapped_cb(g_wrapped_arg, header, header_length, data, length, param);
}

extern "C" ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                                       const ucp_am_handler_param_t *param)
{
    using set_fn = ucs_status_t (*)(ucp_worker_h, const ucp_am_handler_param_t *);
    static set_fn ucx_set = (set_fn)dlsym(RTLD_NEXT, "ucp_worker_set_am_recv_handler");
    if (g_ring_rx_delay_us == 0 || !(param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_CB))
        return ucx_set(worker, param);
    ucp_am_handler_param_t slow = *param;
    g_wrapped_cb = param->cb;
    g_wrapped_arg = (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_ARG) ? param->arg : nullptr;
    slow.cb = slow_ring_rx;
    return ucx_set(worker, &slow);
}

namespace
{

/* Ring data never passes the switch, so it proves nothing to it: a rank whose proxy is busy
   taking in ring data must still heartbeat.  Each ring message is made slow to handle (the test
   hook above) and there are many (256-byte chunks), so both ranks take in data without a pause
   for twice the job's timeout or longer; the job must not lose either as silent. */
TEST_F(Errors, RankBusyWithRingDataStillHeartbeats)
{
    const int n = 2, job_ms = 1000;
    /* 20000 messages of 256 bytes, each handled in at least 100 us: 2 s, twice the timeout. */
    const size_t block = 20000 * 256;
    harness::switch_stop(&sw);
    ASSERT_TRUE(harness::switch_start(
        &sw, {"--timeout-ms", std::to_string(job_ms), "--chunk-size", "256"}));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            g_ring_rx_delay_us = 100;
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_TIMEOUT | INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = sw.addr.c_str();
            p.job_id = job;
            p.rank = rank;
            p.nranks = n;
            p.timeout_ms = job_ms;
            p.algo = INCMOE_ALGO_RING;
            incmoe_comm_t *comm;
            incmoe_status_t st = incmoe_comm_create(&p, &comm);
            if (st != INCMOE_OK)
                return "create: " + status_text(st);
            std::vector<unsigned char> send(block), recv(block * n);
            for (size_t i = 0; i < block; i++)
                send[i] = (unsigned char)(rank * 101 + i % 251);
            incmoe_mr_t *ms = nullptr, *mr = nullptr;
            st = incmoe_mem_register(comm, send.data(), send.size(), &ms);
            if (st == INCMOE_OK)
                st = incmoe_mem_register(comm, recv.data(), recv.size(), &mr);
            incmoe_layout_t l = {block, 0, block, nullptr};
            incmoe_req_t req;
            if (st == INCMOE_OK)
                st = incmoe_allgather(comm, ms, 0, mr, 0, &l, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm); /* before the buffers go: after a failure they are its */
            if (st != INCMOE_OK)
                return "allgather: " + status_text(st) + " (" + text + ")";
            for (int b = 0; b < n; b++)
                for (size_t i = 0; i < block; i++)
                    if (recv[b * block + i] != (unsigned char)(b * 101 + i % 251))
                        return "block " + std::to_string(b) + " byte " + std::to_string(i) +
                               " wrong";
            return "";
        },
        120);
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, UnreachableSwitchAndBadAddress)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        incmoe_comm_t *comm;
        incmoe_status_t st = create("127.0.0.1:1", 1, 0, 2, &comm, 2000);
        if (st != INCMOE_ERR_UNREACHABLE && st != INCMOE_ERR_PEER_FAILED &&
            st != INCMOE_ERR_TIMEOUT)
            return "closed port gave " + status_text(st);
        if (create("no-port-here", 1, 0, 2, &comm) != INCMOE_ERR_INVALID_ARG)
            return "address without port accepted";
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* ---- inputs checked at the edges ------------------------------------------------------------ */

/* Runs fn with this process's stderr going to a fresh file, which stays where any child started
   meanwhile writes; returns the file's path. */
std::string with_stderr_to_file(const std::function<void()> &fn)
{
    char path[] = "/tmp/incmoe-stderr-XXXXXX";
    int fd = mkstemp(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return path;
}

std::string file_text(const std::string &path)
{
    std::string s;
    FILE *f = fopen(path.c_str(), "r");
    char buf[4096];
    size_t n;
    while (f != nullptr && (n = fread(buf, 1, sizeof(buf), f)) > 0)
        s.append(buf, n);
    if (f != nullptr)
        fclose(f);
    return s;
}

/* A peer's worker address from JOIN_ACK passes inc_ucx_addr_check before UCX unpacks it (UCX
   asserts on some malformed ones): a peer that joined with one UCX cannot unpack, or with none,
   fails the rank's create with a reason naming the peer (the ring's to its right neighbour,
   a2a's to every other rank), and the process lives on. */
TEST_F(Errors, PeerAddressUcxCannotUnpackFailsCreateNamingThePeer)
{
    for (incmoe_algo_t algo : {INCMOE_ALGO_RING, INCMOE_ALGO_A2A}) {
        unsigned long long job = harness::unique_job_id();
        auto res = harness::run_ranks(2, [&](int rank) -> std::string {
            if (rank == 0) {
                incmoe_comm_t *comm;
                incmoe_status_t st = INCMOE_OK;
                std::string path = with_stderr_to_file(
                    [&] { st = create(sw.addr, job, 0, 2, &comm, 3000, nullptr, algo); });
                std::string text = file_text(path);
                unlink(path.c_str());
                if (st == INCMOE_OK)
                    incmoe_comm_destroy(comm);
                if (st != INCMOE_ERR_PROTOCOL || text.find("rank 1") == std::string::npos ||
                    text.find("address") == std::string::npos)
                    return "create gave " + status_text(st) + ": " + text;
                return "";
            }
            RawClient c;
            if (!c.connect(sw.addr))
                return "connect";
            c.join(job, 1, 2); /* no usable worker address */
            RawMsg ack;
            if (!c.wait_for(WIRE_MSG_JOIN_ACK, &ack, 3000))
                return "no JOIN_ACK";
            c.progress(1000);
            return "";
        });
        EXPECT_EQ(harness::failures(res), "") << "algo " << algo;
    }
}

/* incmoe_comm_create in this (forked) rank: its status and what the library logged. */
incmoe_status_t create_logged(const std::string &addr, incmoe_comm_t **comm, std::string *log)
{
    incmoe_status_t st = INCMOE_OK;
    std::string path =
        with_stderr_to_file([&] { st = create(addr, harness::unique_job_id(), 0, 1, comm, 3000); });
    *log = file_text(path);
    unlink(path.c_str());
    if (st == INCMOE_OK)
        incmoe_comm_destroy(*comm);
    return st;
}

TEST_F(Errors, NumberSettingsOutOfRangeFailCreateNamingTheVariable)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        for (const char *bad : {"abc", "99999999999", "0", "-1", "1e9junk"}) {
            setenv("INCMOE_TIMEOUT_MS", bad, 1);
            incmoe_comm_t *comm;
            std::string log;
            incmoe_status_t st = create_logged(sw.addr, &comm, &log);
            if (st != INCMOE_ERR_INVALID_ARG)
                return std::string("INCMOE_TIMEOUT_MS=") + bad + " gave " + status_text(st);
            if (log.find(std::string("INCMOE_TIMEOUT_MS=") + bad) == std::string::npos ||
                log.find("1..86400000") == std::string::npos)
                return std::string("INCMOE_TIMEOUT_MS=") + bad + " logged: " + log;
        }
        unsetenv("INCMOE_TIMEOUT_MS");
        setenv("INCMOE_RNDV_THRESH", "64X", 1);
        incmoe_comm_t *comm;
        std::string log;
        incmoe_status_t st = create_logged(sw.addr, &comm, &log);
        unsetenv("INCMOE_RNDV_THRESH");
        if (st != INCMOE_ERR_INVALID_ARG || log.find("INCMOE_RNDV_THRESH=64X") == std::string::npos)
            return "INCMOE_RNDV_THRESH=64X gave " + status_text(st) + ", logged: " + log;
        /* The parameter is checked as well: at most a day. */
        st = create(sw.addr, harness::unique_job_id(), 0, 1, &comm, 86400001);
        if (st != INCMOE_ERR_INVALID_ARG)
            return "timeout_ms 86400001 gave " + status_text(st);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

/* The algorithm table's bound: a value that names no algorithm fails create with a reason. */
TEST_F(Errors, UnknownAlgorithmIsRefusedNamingIt)
{
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        for (int bad : {-1, 1000}) {
            incmoe_comm_params_t p = {};
            p.field_mask = INCMOE_COMM_PARAM_ALGO;
            p.switch_addr = sw.addr.c_str();
            p.job_id = harness::unique_job_id();
            p.rank = 0;
            p.nranks = 1;
            p.algo = (incmoe_algo_t)bad;
            incmoe_comm_t *comm;
            incmoe_status_t st = INCMOE_OK;
            std::string path = with_stderr_to_file([&] { st = incmoe_comm_create(&p, &comm); });
            std::string log = file_text(path);
            unlink(path.c_str());
            if (st == INCMOE_OK)
                incmoe_comm_destroy(comm);
            if (st != INCMOE_ERR_INVALID_ARG ||
                log.find("unknown algorithm " + std::to_string(bad)) == std::string::npos)
                return "algo " + std::to_string(bad) + " gave " + status_text(st) +
                       ", logged: " + log;
        }
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, KeyLongerThanTheLimitIsRefusedByTheClient)
{
    char keyfile[] = "/tmp/incmoe-key-XXXXXX";
    int fd = mkstemp(keyfile);
    ASSERT_GE(fd, 0);
    std::string key(INCMOE_MAX_SECRET + 1, 'k');
    ASSERT_EQ(write(fd, (key + "\n").data(), key.size() + 1), (ssize_t)key.size() + 1);
    close(fd);
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        setenv("INCMOE_AUTH_KEY_FILE", keyfile, 1);
        incmoe_comm_t *comm;
        std::string log;
        incmoe_status_t st = create_logged(sw.addr, &comm, &log);
        unsetenv("INCMOE_AUTH_KEY_FILE");
        if (st != INCMOE_ERR_INVALID_ARG)
            return "65-byte key file gave " + status_text(st);
        if (log.find(keyfile) == std::string::npos || log.find("1..64 bytes") == std::string::npos)
            return "the reason names neither the file nor the limit: " + log;
        setenv("INCMOE_AUTH_KEY", key.c_str(), 1);
        st = create_logged(sw.addr, &comm, &log);
        unsetenv("INCMOE_AUTH_KEY");
        if (st != INCMOE_ERR_INVALID_ARG ||
            log.find("INCMOE_AUTH_KEY is 65 bytes") == std::string::npos)
            return "65-byte INCMOE_AUTH_KEY gave " + status_text(st) + ", logged: " + log;
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    unlink(keyfile);
}

/* A rank's ERROR reason with a newline, a fake log prefix and a terminal escape reaches its peers'
   incmoe_comm_error and the switch's log printable, on one line. */
TEST_F(Errors, RemoteErrorTextIsSanitised)
{
    harness::switch_stop(&sw);
    std::string log_path = with_stderr_to_file([&] { ASSERT_TRUE(harness::switch_start(&sw)); });
    const std::string shown = "\\x0a[switchd] forged line\\x1b[2J";
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PEER_FAILED, shown, [](RawClient &c, uint64_t job) {
        inc_wire_hdr h = raw_hdr(WIRE_MSG_ERROR, job, INCMOE_STREAM_ALLGATHER);
        h.status = INCMOE_ERR_PEER_FAILED;
        const char reason[] = "oops\n[switchd] forged line\x1b[2J";
        c.send(h, reason, sizeof(reason));
    });
    harness::switch_stop(&sw);
    std::string log = file_text(log_path);
    unlink(log_path.c_str());
    EXPECT_NE(log.find("oops" + shown), std::string::npos) << log;
    EXPECT_EQ(log.find("\n[switchd] forged line"), std::string::npos) << log;
    EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
    ASSERT_TRUE(harness::switch_start(&sw));
}

} // namespace
