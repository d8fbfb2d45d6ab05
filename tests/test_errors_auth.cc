/*
 * test_errors_auth.cc - the failures of authentication: the job key, the public bootstrap port
 * facing junk, the session and job tokens, worker addresses UCX could not unpack. Each gets its own
 * error on the job's ranks (or a refused connection), and the switch goes on serving another job
 * (errors_common.h has what the error suites share).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/bootstrap.h"
#include "base/clock.h"
#include "base/dtype.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
#include "switch/throttle.h"
}

#include "errors_common.h"

using namespace errtest;

namespace
{

/* A fresh key file holding key and a newline; its path, "" when it could not be written. */
std::string key_file(const std::string &key)
{
    char path[] = "/tmp/incmoe-key-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return "";
    const std::string line = key + "\n";
    bool ok = write(fd, line.data(), line.size()) == (ssize_t)line.size();
    close(fd);
    return ok ? path : "";
}

/* Restarts the fixture's switch holding key; the key file's path, "" when it failed. */
std::string restart_keyed(harness::SwitchProc *sw, const std::string &key)
{
    harness::switch_stop(sw);
    const std::string path = key_file(key);
    return !path.empty() && harness::switch_start(sw, {"--auth-key-file", path}) ? path : "";
}

/* The keyed switch of restart_keyed(sw, "s3cret") still serves a job holding the key; then the
   fixture's keyless switch again, for TearDown's check. */
void restore_keyless(harness::SwitchProc *sw, const std::string &keyfile)
{
    setenv("INCMOE_AUTH_KEY", "s3cret", 1);
    expect_switch_serves(sw->addr);
    unsetenv("INCMOE_AUTH_KEY");
    harness::switch_stop(sw);
    unlink(keyfile.c_str());
    ASSERT_TRUE(harness::switch_start(sw));
}

TEST_F(Errors, WrongOrMissingSecretIsRefused)
{
    harness::ExpectErrors errors_expected("secrets are wrong or missing");
    const std::string keyfile = restart_keyed(&sw, "s3cret");
    ASSERT_NE(keyfile, "");
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
    restore_keyless(&sw, keyfile);
}

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
    harness::ExpectErrors errors_expected("ranks hold wrong keys");
    const std::string keyfile = restart_keyed(&sw, "s3cret");
    ASSERT_NE(keyfile, "");
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
    restore_keyless(&sw, keyfile);
}

TEST_F(Errors, KeyedRankRefusesAKeylessSwitch)
{
    harness::ExpectErrors errors_expected("the switch has no key");
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
    harness::ExpectErrors errors_expected("a neighbour's address is malformed");
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
            incmoe_comm_t *comm;
            incmoe_status_t st = create(addr, job, 0, 2, &comm, 2000, nullptr, algo);
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

TEST_P(ErrorsByAlgo, HelloWithoutTheJobsTokenIsRefused)
{
    harness::ExpectErrors errors_expected("a hello without the job's token is refused");
    expect_hello_without_token_refused(sw.addr, GetParam());
}

/* The algorithms whose ranks meet each other (in-network ranks meet only the switch). */
INSTANTIATE_TEST_SUITE_P(PeerAlgos, ErrorsByAlgo,
                         ::testing::Values(INCMOE_ALGO_RING, INCMOE_ALGO_A2A), algo_param_name);

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

TEST_F(Errors, KeyLongerThanTheLimitIsRefusedByTheClient)
{
    const std::string key(INCMOE_MAX_SECRET + 1, 'k');
    const std::string keyfile = key_file(key);
    ASSERT_NE(keyfile, "");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        setenv("INCMOE_AUTH_KEY_FILE", keyfile.c_str(), 1);
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
    unlink(keyfile.c_str());
}

} // namespace
