/*
 * test_errors_protocol.cc - the failures of the protocol: collectives the ranks disagree on, ranges
 * outside a buffer, and malformed, unknown or out-of-range messages from a raw client; each fails
 * its job with a reason. Each gets its own error on the job's ranks (or a refused connection), and
 * the switch goes on serving another job (errors_common.h has what the error suites share).
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
#include <utility>
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
            return destroy_expecting(comm, st, want, what);
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
}

TEST_F(Errors, RanksDisagreeingOnACollective)
{
    harness::ExpectErrors errors_expected("the ranks disagree on a collective");
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
    harness::ExpectErrors errors_expected("a range is outside its buffer");
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
    harness::ExpectErrors errors_expected("arguments are bad");
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

TEST_F(Errors, GarbageAndTruncatedMessages)
{
    harness::ExpectErrors errors_expected("a raw client sends garbage");
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
    harness::ExpectErrors errors_expected("a raw client sends unknown operations");
    expect_raw_breaks_job(sw.addr, INCMOE_ERR_PROTOCOL, "unknown message type",
                          [](RawClient &c, uint64_t job) {
                              inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_ALLGATHER);
                              h.msg = 99;
                              c.send(h);
                          });
    /* A reduction's chunk of 16 bytes of an unknown datatype, then of an unknown operation. */
    for (auto bad : {std::pair<int, int>{42, INCMOE_SUM}, {INCMOE_FLOAT32, 17}})
        expect_raw_breaks_job(
            sw.addr, INCMOE_ERR_PROTOCOL, "unknown datatype", [&](RawClient &c, uint64_t job) {
                inc_wire_hdr h = raw_hdr(WIRE_MSG_DATA, job, INCMOE_STREAM_REDUCESCATTER);
                h.root = 0;
                h.length = 16;
                h.total = 16;
                h.dtype = bad.first;
                h.redop = bad.second;
                char data[16] = {};
                c.send(h, data, sizeof(data));
            });
}

TEST_F(Errors, RangesOutsideWhatWasAnnounced)
{
    harness::ExpectErrors errors_expected("a raw client sends ranges outside what it announced");
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
    harness::ExpectErrors errors_expected("a raw client sends malformed small collectives");
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

/* A rank's ERROR reason with a newline, a fake log prefix and a terminal escape reaches its peers'
   incmoe_comm_error and the switch's log printable, on one line. */
TEST_F(Errors, RemoteErrorTextIsSanitised)
{
    harness::ExpectErrors errors_expected("a raw client sends an error text to sanitise");
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
