/*
 * test_nccl_collnet.cc - the plugin's CollNet against a real incmoe-switchd on
 * loopback, driven as NCCL's proxy drives it: net init then CollNet init,
 * devices, getProperties, listen, handle exchange, connect, regMr, the same
 * posts in the same order on every rank, test polling, close, finalize.
 * N in {2, 3, 4, 8} x every exported version; every datatype and operation
 * reduceSupport admits; windows inside one block, spanning blocks, missing
 * the caller's block; addresses inside registered regions, including
 * NCCL's staging layout where the window's N-block base lies before the
 * region.  Every result is checked against a reference computed here.
 */
#include "harness.h"
#include "nccl_loader.h"

extern "C" {
#include "base/dtype.h"
#include "plugin/nccl/ptr_support.h"
}

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/clock.h"

using nccltest::Exchange;
using nccltest::Plugin;

namespace
{

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        std::string e_ = (expr);                                                                   \
        if (!e_.empty())                                                                           \
            return e_;                                                                             \
    } while (0)

/* ---- element encoding: our own, independent of the library's ---------- */

const int kTypes = 10; /* int8 .. bfloat16: the types with a switch reduction */

size_t esize(int t)
{
    static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return s[t];
}

bool is_unsigned(int t)
{
    return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

void encode(int t, double v, void *p)
{
    switch (t) {
    case ncclInt8:
        *(int8_t *)p = (int8_t)v;
        break;
    case ncclUint8:
        *(uint8_t *)p = (uint8_t)v;
        break;
    case ncclInt32:
        *(int32_t *)p = (int32_t)v;
        break;
    case ncclUint32:
        *(uint32_t *)p = (uint32_t)v;
        break;
    case ncclInt64:
        *(int64_t *)p = (int64_t)v;
        break;
    case ncclUint64:
        *(uint64_t *)p = (uint64_t)v;
        break;
    case ncclFloat16:
        *(uint16_t *)p = inc_dtype_float_to_half((float)v);
        break;
    case ncclFloat32:
        *(float *)p = (float)v;
        break;
    case ncclFloat64:
        *(double *)p = v;
        break;
    case ncclBfloat16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        *(uint16_t *)p = (uint16_t)(u >> 16);
        break;
    }
    }
}

double decode(int t, const void *p)
{
    switch (t) {
    case ncclInt8:
        return *(const int8_t *)p;
    case ncclUint8:
        return *(const uint8_t *)p;
    case ncclInt32:
        return *(const int32_t *)p;
    case ncclUint32:
        return *(const uint32_t *)p;
    case ncclInt64:
        return (double)*(const int64_t *)p;
    case ncclUint64:
        return (double)*(const uint64_t *)p;
    case ncclFloat16:
        return inc_dtype_half_to_float(*(const uint16_t *)p);
    case ncclFloat32:
        return *(const float *)p;
    case ncclFloat64:
        return *(const double *)p;
    case ncclBfloat16: {
        uint32_t u = (uint32_t) * (const uint16_t *)p << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
    return NAN;
}

/* Rank r's element e for operation op: small integers, so every result is exact. */
double value(int op, int t, int n, int r, size_t e)
{
    bool u = is_unsigned(t);
    switch (op) {
    case ncclSum:
        return u ? (double)((r * 5 + e * 3) % 4) : (double)((r * 5 + e * 3) % 7) - 3;
    case ncclProd: {
        double mag = (e + r) % n == 0 ? 2 : 1;
        return (!u && (e * 7 + r) % 3 == 0) ? -mag : mag;
    }
    default:
        return u ? (double)((r * 37 + e * 11) % 101) : (double)((r * 37 + e * 11) % 101) - 50;
    }
}

double reference(int op, int t, int n, size_t e)
{
    double acc = value(op, t, n, 0, e);
    for (int r = 1; r < n; r++) {
        double v = value(op, t, n, r, e);
        acc = op == ncclSum    ? acc + v
              : op == ncclProd ? acc * v
              : op == ncclMax  ? std::max(acc, v)
                               : std::min(acc, v);
    }
    return acc;
}

unsigned char ag_byte(int r, size_t j)
{
    return (unsigned char)(j * 7 + r * 31 + (j >> 8) * 3 + 1);
}

/* ---- the per-rank driver ------------------------------------------------ */

struct Rank {
    Plugin pl;
    int rank = 0, n = 0;
    void *lc = nullptr, *cc = nullptr;
    bool inited = false, finalized = false;

    Rank() = default;
    Rank(const Rank &) = delete;
    Rank &operator=(const Rank &) = delete;
    /* A body that returned early (a failed check) still closes what it opened before ~Plugin
       unloads the library: the CollNet's proxy thread must not outlive its code.  The buffers
       a body registered are declared before its Rank, so they outlive the close too. */
    ~Rank()
    {
        if (!inited || finalized)
            return;
        if (cc != nullptr)
            pl.coll_close(cc);
        if (lc != nullptr)
            pl.coll_close_listen(lc);
        pl.coll_finalize();
        pl.net_finalize();
    }
};

std::string setup(Rank *c, int version, int rank, int n, Exchange *ex, uint64_t comm_id)
{
    c->rank = rank;
    c->n = n;
    TRY(c->pl.load(version));
    REQUIRE(c->pl.net_init(comm_id) == ncclSuccess, nccltest::warnings());
    c->inited = true; /* the net is up: ~Rank finalizes it */
    REQUIRE(c->pl.coll_init(comm_id) == ncclSuccess, nccltest::warnings());
    int nd = 0, cd = 0;
    REQUIRE(c->pl.net_devices(&nd) == ncclSuccess && c->pl.coll_devices(&cd) == ncclSuccess);
    REQUIRE(nd == 1 && cd == 1, std::to_string(nd) + " / " + std::to_string(cd));
    ncclNetProperties_v11_t np, cp;
    REQUIRE(c->pl.net_props(0, &np) == ncclSuccess && c->pl.coll_props(0, &cp) == ncclSuccess);
    /* NCCL pairs the CollNet device with the net device by name and PCI path. */
    REQUIRE(strcmp(np.name, cp.name) == 0 && np.guid == cp.guid);
    REQUIRE((np.pciPath == nullptr) == (cp.pciPath == nullptr));
    REQUIRE(np.pciPath == nullptr || strcmp(np.pciPath, cp.pciPath) == 0);
    REQUIRE((cp.ptrSupport & NCCL_PTR_HOST) && cp.maxCollBytes >= (1u << 20));
    int vd = -1;
    ncclNetVDeviceProps_t vp = {1, {0}};
    REQUIRE(c->pl.coll_make_vdevice(&vd, &vp) == ncclSuccess && vd == 0);
    vp.devs[0] = 3;
    REQUIRE(c->pl.coll_make_vdevice(&vd, &vp) == ncclInvalidArgument);

    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    REQUIRE(c->pl.coll_listen(0, handle, &c->lc) == ncclSuccess);
    ex->publish(0, rank, handle, sizeof(handle));
    std::vector<std::vector<char>> all;
    REQUIRE(ex->gather(0, n, &all, 60), "handle exchange timed out");
    std::vector<void *> handles(n);
    for (int r = 0; r < n; r++)
        handles[r] = all[r].data();
    REQUIRE(c->pl.coll_connect(handles.data(), n, rank, c->lc, &c->cc) == ncclSuccess,
            nccltest::warnings());
    return "";
}

std::string teardown(Rank *c)
{
    c->finalized = true; /* whatever fails below, ~Rank does not close twice */
    REQUIRE(c->pl.coll_close(c->cc) == ncclSuccess, nccltest::warnings());
    REQUIRE(c->pl.coll_close_listen(c->lc) == ncclSuccess);
    REQUIRE(c->pl.coll_finalize() == ncclSuccess);
    REQUIRE(c->pl.net_finalize() == ncclSuccess);
    return "";
}

/* NCCL's teardown after a failed job or a failed connect: close may report the
   failure again, everything else must still succeed and release what it holds. */
std::string teardown_after_failure(Rank *c)
{
    c->finalized = true;
    if (c->cc != nullptr)
        c->pl.coll_close(c->cc); /* bounded even though the job is dead */
    REQUIRE(c->pl.coll_close_listen(c->lc) == ncclSuccess);
    REQUIRE(c->pl.coll_finalize() == ncclSuccess);
    REQUIRE(c->pl.net_finalize() == ncclSuccess);
    return "";
}

/* A posted request plus the check to run once it is done. */
struct Pending {
    void *req = nullptr;
    std::string what;
    std::function<std::string()> check;
};

/* Poll every request (in a permuted order, as completion order is free) until all are done. */
std::string drain(Rank *c, std::vector<Pending> *ps)
{
    double deadline = inc_now_s() + 60;
    size_t left = ps->size();
    size_t k = 0;
    while (left > 0) {
        for (size_t i = 0; i < ps->size(); i++) {
            /* forwards on even passes, backwards on odd ones */
            Pending &p = (*ps)[k % 2 ? ps->size() - 1 - i : i];
            if (p.req == nullptr)
                continue;
            int done = 0, size = -1;
            ncclResult_t r = c->pl.coll_test(p.req, &done, &size);
            REQUIRE(r == ncclSuccess,
                    p.what + ": test returned " + std::to_string(r) + ": " + nccltest::warnings());
            if (done) {
                p.req = nullptr;
                left--;
                TRY(p.check());
            }
        }
        k++;
        REQUIRE(inc_now_s() < deadline, std::to_string(left) + " requests not done");
        if (left > 0)
            usleep(200);
    }
    ps->clear();
    return "";
}

struct Window {
    size_t off, len; /* in elements */
};

/* Windows of every shape for n blocks of c elements. */
std::vector<Window> windows(int n, size_t c)
{
    std::vector<Window> w = {
        {0, n * c},                              /* everything */
        {c + c / 4, c / 2},                      /* inside block 1: misses every other block */
        {0, c / 3},                              /* the start of block 0 */
        {c / 2, n * c - c},                      /* head, full middle (n > 2), tail */
        {c, std::min(n * c, 2 * c + c / 3) - c}, /* starts on a boundary, ends inside */
        {c / 3, 2 * c - c / 3},                  /* starts inside, ends on a boundary */
        {n * c - c / 5, c / 5},                  /* the end of the last block */
    };
    return w;
}

const char *mode_name(bool staging)
{
    return staging ? "staging" : "user-buffer";
}

/*
 * AllGather of one window.  User-buffer mode: the whole N-block buffer is
 * registered and the window lands at its place in it.  Staging mode (NCCL's
 * default): only a staging region is registered and the window lands at
 * region + 64, so the N-block base lies before the region.
 */
std::string post_allgather(Rank *c, std::vector<Pending> *ps, size_t B, Window w, bool staging,
                           std::deque<std::vector<char>> *keep, std::vector<void *> *mhs)
{
    int n = c->n, me = c->rank;
    size_t wo = w.off, wb = w.len;
    keep->emplace_back(B);
    std::vector<char> &own = keep->back();
    for (size_t j = 0; j < B; j++)
        own[j] = (char)ag_byte(me, j);
    void *smh = nullptr, *rmh = nullptr;
    REQUIRE(c->pl.coll_reg(c->cc, own.data(), B, NCCL_PTR_HOST, &smh) == ncclSuccess);
    mhs->push_back(smh);
    keep->emplace_back(staging ? wb + 128 : n * B + 64, (char)0xEE);
    std::vector<char> &rbuf = keep->back();
    REQUIRE(c->pl.coll_reg(c->cc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess);
    mhs->push_back(rmh);
    char *dst = staging ? rbuf.data() + 64 : rbuf.data() + wo;
    /* NCCL's rule for sendData: offset into the own block when the window starts in it. */
    char *send = own.data() + (wo / B == (size_t)me ? wo % B : 0);
    ncclNetSGE_t part = {rmh, dst, wb};
    Pending p;
    p.what = "allgather " + std::string(mode_name(staging)) + " window [" + std::to_string(wo) +
             ",+" + std::to_string(wb) + ") B=" + std::to_string(B);
    REQUIRE(c->pl.coll_iallgather(c->cc, send, 1, &part, B, wo, wb, smh, &p.req) == ncclSuccess,
            p.what + ": " + nccltest::warnings());
    REQUIRE(p.req != nullptr);
    std::vector<char> *rb = &rbuf;
    size_t dpos = dst - rbuf.data();
    std::string what = p.what;
    p.check = [=]() -> std::string {
        for (size_t k = 0; k < rb->size(); k++) {
            unsigned char got = (unsigned char)(*rb)[k];
            bool in = k >= dpos && k < dpos + wb;
            unsigned char exp =
                in ? ag_byte((int)((wo + k - dpos) / B), (wo + k - dpos) % B) : 0xEE;
            if (got != exp)
                return what + ": byte " + std::to_string(k) + " is " + std::to_string(got) +
                       ", expected " + std::to_string(exp) + (in ? "" : " (outside the window)");
        }
        return "";
    };
    ps->push_back(std::move(p));
    return "";
}

/*
 * ReduceScatter of one window of dtype t with op.  User-buffer mode: the
 * rank's whole N-block input is registered; staging mode: only the window
 * is, at region + 64.  The own reduced part lands in a separate buffer.
 */
std::string post_reducescatter(Rank *c, std::vector<Pending> *ps, size_t C, Window w, int t, int op,
                               bool staging, std::deque<std::vector<char>> *keep,
                               std::vector<void *> *mhs)
{
    int n = c->n, me = c->rank;
    size_t es = esize(t), B = C * es, wo = w.off * es, wb = w.len * es;
    keep->emplace_back(staging ? wb + 128 : n * B);
    std::vector<char> &in = keep->back();
    size_t base = staging ? 64 : 0;
    size_t from = staging ? w.off : 0, to = staging ? w.off + w.len : n * C;
    for (size_t e = from; e < to; e++)
        encode(t, value(op, t, n, me, e), in.data() + base + (e - from) * es);
    void *smh = nullptr, *rmh = nullptr;
    REQUIRE(c->pl.coll_reg(c->cc, in.data(), in.size(), NCCL_PTR_HOST, &smh) == ncclSuccess);
    mhs->push_back(smh);
    keep->emplace_back(B + 64, (char)0xEE);
    std::vector<char> &out = keep->back();
    REQUIRE(c->pl.coll_reg(c->cc, out.data(), out.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess);
    mhs->push_back(rmh);
    size_t lo = std::max(w.off, (size_t)me * C), hi = std::min(w.off + w.len, (size_t)(me + 1) * C);
    size_t own = hi > lo ? hi - lo : 0;
    char *recv = out.data() + 32;
    ncclNetSGE_t part = {smh, staging ? in.data() + 64 : in.data() + wo, wb};
    Pending p;
    p.what = "reducescatter " + std::string(mode_name(staging)) + " type " + std::to_string(t) +
             " op " + std::to_string(op) + " window [" + std::to_string(w.off) + ",+" +
             std::to_string(w.len) + ") of " + std::to_string(C) + " elements per rank";
    REQUIRE(c->pl.coll_ireducescatter(c->cc, 1, &part, recv, B, wo, wb, (ncclDataType_t)t,
                                      (ncclRedOp_t)op, rmh, &p.req) == ncclSuccess,
            p.what + ": " + nccltest::warnings());
    std::vector<char> *ob = &out;
    std::string what = p.what;
    p.check = [=]() -> std::string {
        for (size_t k = 0; k < ob->size(); k++) {
            bool in_part = k >= 32 && k < 32 + own * es;
            if (!in_part && (unsigned char)(*ob)[k] != 0xEE)
                return what + ": byte " + std::to_string(k) + " outside the own part was written";
        }
        for (size_t i = 0; i < own; i++) {
            double got = decode(t, ob->data() + 32 + i * es);
            double exp = reference(op, t, n, lo + i);
            if (got != exp)
                return what + ": element " + std::to_string(lo + i) + " is " + std::to_string(got) +
                       ", expected " + std::to_string(exp);
        }
        return "";
    };
    ps->push_back(std::move(p));
    return "";
}

/* AllReduce of count elements at addresses inside larger registered regions. */
std::string post_allreduce(Rank *c, std::vector<Pending> *ps, size_t count, int t, int op,
                           std::deque<std::vector<char>> *keep, std::vector<void *> *mhs)
{
    int n = c->n, me = c->rank;
    size_t es = esize(t);
    keep->emplace_back(count * es + 96);
    std::vector<char> &in = keep->back();
    for (size_t e = 0; e < count; e++)
        encode(t, value(op, t, n, me, e), in.data() + 40 + e * es);
    keep->emplace_back(count * es + 96, (char)0xEE);
    std::vector<char> &out = keep->back();
    void *smh = nullptr, *rmh = nullptr;
    REQUIRE(c->pl.coll_reg(c->cc, in.data(), in.size(), NCCL_PTR_HOST, &smh) == ncclSuccess);
    REQUIRE(c->pl.coll_reg(c->cc, out.data(), out.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess);
    mhs->push_back(smh);
    mhs->push_back(rmh);
    Pending p;
    p.what = "allreduce type " + std::to_string(t) + " op " + std::to_string(op) + " count " +
             std::to_string(count);
    REQUIRE(c->pl.coll_iallreduce(c->cc, in.data() + 40, out.data() + 24, count, (ncclDataType_t)t,
                                  (ncclRedOp_t)op, smh, rmh, &p.req) == ncclSuccess,
            p.what + ": " + nccltest::warnings());
    std::vector<char> *ob = &out;
    std::string what = p.what;
    p.check = [=]() -> std::string {
        for (size_t e = 0; e < count; e++) {
            double got = decode(t, ob->data() + 24 + e * es);
            double exp = reference(op, t, n, e);
            if (got != exp)
                return what + ": element " + std::to_string(e) + " is " + std::to_string(got) +
                       ", expected " + std::to_string(exp);
        }
        if ((unsigned char)(*ob)[23] != 0xEE || (unsigned char)(*ob)[24 + count * es] != 0xEE)
            return what + ": wrote outside the result";
        return "";
    };
    ps->push_back(std::move(p));
    return "";
}

/* Post up to `batch` requests, then drain them: many outstanding at once. */
struct Batch {
    Rank *c;
    size_t batch;
    std::vector<Pending> ps;
    std::deque<std::vector<char>> keep; /* a deque: references stay valid as it grows */
    std::vector<void *> mhs;
    std::string flush_if_full()
    {
        if (ps.size() < batch)
            return "";
        return flush();
    }
    std::string flush()
    {
        TRY(drain(c, &ps));
        for (void *mh : mhs)
            REQUIRE(c->pl.coll_dereg(c->cc, mh) == ncclSuccess);
        mhs.clear();
        keep.clear();
        return "";
    }
};

std::string check_reduce_support(Rank *c)
{
    for (int t = 0; t < 12; t++) {
        for (int op = 0; op < 5; op++) {
            int s = -1;
            REQUIRE(c->pl.coll_reduce_support((ncclDataType_t)t, (ncclRedOp_t)op, &s) ==
                    ncclSuccess);
            /* The switch reduces sum/prod/max/min of every type but fp8; avg reaches us as sum. */
            int expect = t < kTypes && op < 4;
            REQUIRE(s == expect, "type " + std::to_string(t) + " op " + std::to_string(op));
        }
    }
    return "";
}

/* Bad arguments are refused up front and leave the job usable. */
std::string check_bad_arguments(Rank *c)
{
    std::vector<char> buf(4096);
    void *mh = nullptr, *req = nullptr;
    REQUIRE(c->pl.coll_reg(c->cc, buf.data(), buf.size(), 0x8 /* no such type */, &mh) ==
            ncclInvalidArgument);
    REQUIRE(c->pl.coll_reg(c->cc, buf.data(), buf.size(), NCCL_PTR_HOST, &mh) == ncclSuccess);
    ncclNetSGE_t parts[2] = {{mh, buf.data(), 100}, {mh, buf.data() + 100, 100}};
    REQUIRE(c->pl.coll_iallgather(c->cc, buf.data(), 2, parts, 100, 0, 200, mh, &req) ==
            ncclInvalidArgument);
    REQUIRE(c->pl.coll_iallgather(c->cc, buf.data(), 1, parts, 100, c->n * 100 - 50, 100, mh,
                                  &req) == ncclInvalidArgument); /* past the buffer */
    ncclNetSGE_t out = {mh, buf.data() + 4000, 200};
    REQUIRE(c->pl.coll_iallgather(c->cc, buf.data(), 1, &out, 100, 0, 200, mh, &req) ==
            ncclInvalidArgument); /* outside the region */
    REQUIRE(c->pl.coll_ireducescatter(c->cc, 1, parts, buf.data(), 100, 0, 100, ncclFloat8e4m3,
                                      ncclSum, mh, &req) == ncclInvalidArgument);
    REQUIRE(c->pl.coll_ireducescatter(c->cc, 1, parts, buf.data(), 100, 0, 100, ncclFloat32,
                                      ncclAvg, mh, &req) == ncclInvalidArgument);
    REQUIRE(c->pl.coll_ireducescatter(c->cc, 1, parts, buf.data(), 100, 2, 40, ncclFloat32, ncclSum,
                                      mh, &req) == ncclInvalidArgument); /* misaligned */
    REQUIRE(c->pl.coll_iallreduce(c->cc, buf.data(), buf.data(), 2000, ncclFloat32, ncclSum, mh, mh,
                                  &req) == ncclInvalidArgument); /* 8000 bytes > 4096 */
    void *freq = (void *)1;
    REQUIRE(c->pl.coll_iflush(c->cc, buf.data(), 100, mh, &freq) == ncclSuccess);
    if (freq != nullptr) {
        int done = 0;
        while (!done)
            REQUIRE(c->pl.coll_test(freq, &done, nullptr) == ncclSuccess);
    }
    REQUIRE(c->pl.coll_dereg(c->cc, mh) == ncclSuccess);
    REQUIRE(nccltest::warnings().find("outside the registered") != std::string::npos);
    nccltest::clear_warnings(); /* later failures show only their own warnings */
    return "";
}

/*
 * One job: the checks every rank makes, then the windows of every shape in one
 * buffer layout (staging: NCCL's default, the window's N-block base before
 * the registered region; user-buffer: the whole N-block buffer registered).
 */
std::string collnet_rank(int version, int rank, int n, Exchange *ex, bool staging)
{
    Batch b{nullptr, 10, {}, {}, {}};
    Rank c;
    b.c = &c;
    TRY(setup(&c, version, rank, n, ex, 0xC0FFEEull + n * 2 + staging));
    TRY(check_reduce_support(&c));
    TRY(check_bad_arguments(&c));

    /* AllGather: every window shape. */
    for (Window w : windows(n, 1000)) {
        TRY(post_allgather(&c, &b.ps, 1000, w, staging, &b.keep, &b.mhs));
        TRY(b.flush_if_full());
    }
    TRY(b.flush());

    /* ReduceScatter: every window shape for two type/op pairs. */
    const int pairs[2][2] = {{ncclFloat32, ncclSum}, {ncclBfloat16, ncclMax}};
    for (auto &tp : pairs)
        for (Window w : windows(n, 60)) {
            TRY(post_reducescatter(&c, &b.ps, 60, w, tp[0], tp[1], staging, &b.keep, &b.mhs));
            TRY(b.flush_if_full());
        }
    TRY(b.flush());

    /* Every supported type and operation: RS on a window across blocks, and AllReduce. */
    Window span = {30, (size_t)n * 60 - 45};
    for (int t = 0; t < kTypes; t++)
        for (int op = 0; op < 4; op++) {
            TRY(post_reducescatter(&c, &b.ps, 60, span, t, op, staging, &b.keep, &b.mhs));
            if (!staging)
                TRY(post_allreduce(&c, &b.ps, 333, t, op, &b.keep, &b.mhs));
            TRY(b.flush_if_full());
        }
    TRY(b.flush());

    /* Larger messages: 1 MiB per rank through every collective at once. */
    TRY(post_allgather(&c, &b.ps, 1 << 20, {(1 << 19), (size_t)n * (1 << 20) - (1 << 19)}, staging,
                       &b.keep, &b.mhs));
    TRY(post_reducescatter(&c, &b.ps, 1 << 18, {0, (size_t)n << 18}, ncclFloat32, ncclSum, staging,
                           &b.keep, &b.mhs));
    TRY(post_allreduce(&c, &b.ps, 1 << 18, ncclFloat32, ncclSum, &b.keep, &b.mhs));
    TRY(b.flush());

    REQUIRE(ex->barrier(1, rank, n, 60));
    return teardown(&c);
}

class NcclCollNet : public ::testing::TestWithParam<std::tuple<int, int>>
{
  protected:
    static harness::SwitchProc sw;
    static void SetUpTestSuite()
    {
        ASSERT_TRUE(harness::switch_start(&sw));
    }
    static void TearDownTestSuite()
    {
        harness::switch_stop(&sw);
    }
    void SetUp() override
    {
        ASSERT_GT(sw.pid, 0);
        setenv("INCMOE_SWITCH", sw.addr.c_str(), 1);
        setenv("INCMOE_NCCL_ADDR", "127.0.0.1", 1);
        setenv("INCMOE_TIMEOUT_MS", "3000", 1);
        unsetenv("INCMOE_JOB_ID");
    }
};
harness::SwitchProc NcclCollNet::sw;

void run_job(int version, int n, bool staging)
{
    Exchange *ex = Exchange::create(n);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        n, [&](int rank) { return collnet_rank(version, rank, n, ex, staging); }, 150);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

TEST_P(NcclCollNet, UserBufferWindowsMatchTheReference)
{
    run_job(std::get<0>(GetParam()), std::get<1>(GetParam()), false);
}

TEST_P(NcclCollNet, StagingWindowsMatchTheReference)
{
    run_job(std::get<0>(GetParam()), std::get<1>(GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(VersionsAndSizes, NcclCollNet,
                         ::testing::Combine(::testing::Values(11, 10, 9),
                                            ::testing::Values(2, 3, 4, 8)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>> &i) {
                             return "v" + std::to_string(std::get<0>(i.param)) + "_n" +
                                    std::to_string(std::get<1>(i.param));
                         });

/* Single scenarios against the same switch: failures, secrets, GPU buffers, two communicators. */
class NcclCollNetBehaviour : public NcclCollNet
{
};

/* A rank dies mid-collective: the others' test() returns an error, not a hang. */
TEST_F(NcclCollNetBehaviour, DeadRankFailsTheOthersTest)
{
    setenv("INCMOE_TIMEOUT_MS", "1500", 1);
    const int n = 3;
    Exchange *ex = Exchange::create(n);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            std::deque<std::vector<char>> keep;
            std::vector<void *> mhs;
            std::vector<Pending> ps;
            Rank c;
            TRY(setup(&c, 11, rank, n, ex, 0xDEADull)); /* The others post and wait for it; the last
    rank dies instead of posting, so the collective is in flight and can never complete. */
            if (rank != n - 1)
                TRY(post_allgather(&c, &ps, 1 << 20, {0, (size_t)n << 20}, false, &keep, &mhs));
            REQUIRE(ex->barrier(1, rank, n, 60));
            if (rank == n - 1)
                raise(SIGKILL);
            double deadline = inc_now_s() + 60;
            ncclResult_t r = ncclSuccess;
            int done = 0;
            while (r == ncclSuccess && !done && inc_now_s() < deadline) {
                r = c.pl.coll_test(ps[0].req, &done, nullptr);
                usleep(1000);
            }
            REQUIRE(r == ncclRemoteError || r == ncclSystemError,
                    "test returned " + std::to_string(r) + " done " + std::to_string(done));
            REQUIRE(nccltest::warnings().find("failed") != std::string::npos, nccltest::warnings());
            return teardown_after_failure(&c);
        },
        120);
    ex->destroy();
    EXPECT_EQ(res[0], "");
    EXPECT_EQ(res[1], "");
    EXPECT_NE(res[2].find("signal 9"), std::string::npos) << res[2];
}

/*
 * 5,000 iallgathers posted without testing any: once a stream's window is full the
 * plugin answers "no request yet" (ncclSuccess, NULL) instead of blocking NCCL's proxy,
 * and the retries go through as earlier collectives complete.  Rank 1 starts posting
 * only after rank 0 saw a NULL, so rank 0 is sure to fill its window first.
 */
TEST_F(NcclCollNetBehaviour, FullWindowAnswersNoRequestYetAndRetriesComplete)
{
    const int n = 2, iters = 5000;
    const size_t B = 4;
    Exchange *ex = Exchange::create(n);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            std::vector<unsigned char> own(iters * B), recv(iters * n * B, 0xEE);
            Rank c;
            TRY(setup(&c, 11, rank, n, ex, 0x5EEDull));
            for (size_t j = 0; j < own.size(); j++)
                own[j] = ag_byte(rank, j);
            void *smh = nullptr, *rmh = nullptr;
            REQUIRE(c.pl.coll_reg(c.cc, own.data(), own.size(), NCCL_PTR_HOST, &smh) ==
                    ncclSuccess);
            REQUIRE(c.pl.coll_reg(c.cc, recv.data(), recv.size(), NCCL_PTR_HOST, &rmh) ==
                    ncclSuccess);
            if (rank == 1)
                REQUIRE(ex->barrier(1, rank, n, 60), "rank 0 never filled its window");
            std::vector<void *> reqs(iters, nullptr);
            long nulls = 0;
            bool synced = rank == 1;
            double deadline = inc_now_s() + 120;
            for (int k = 0; k < iters; k++) {
                ncclNetSGE_t part = {rmh, recv.data() + (size_t)k * n * B, n * B};
                for (;;) {
                    REQUIRE(c.pl.coll_iallgather(c.cc, own.data() + k * B, 1, &part, B, 0, n * B,
                                                 smh, &reqs[k]) == ncclSuccess,
                            nccltest::warnings());
                    if (reqs[k] != nullptr)
                        break;
                    nulls++;
                    if (!synced) {
                        REQUIRE(ex->barrier(1, rank, n, 60));
                        synced = true;
                    }
                    REQUIRE(inc_now_s() < deadline, "no room after 120 s at " + std::to_string(k));
                    usleep(100);
                }
            }
            if (!synced) /* never refused: let rank 1 go, then report */
                ex->barrier(1, rank, n, 60);
            REQUIRE(rank == 1 || nulls > 0, "5000 posts and never a NULL request");
            for (int k = 0; k < iters; k++) {
                int done = 0, size = -1;
                while (!done) {
                    REQUIRE(c.pl.coll_test(reqs[k], &done, &size) == ncclSuccess,
                            nccltest::warnings());
                    REQUIRE(inc_now_s() < deadline, "request " + std::to_string(k) + " not done");
                    if (!done)
                        usleep(100);
                }
            }
            for (int k = 0; k < iters; k++)
                for (int r = 0; r < n; r++)
                    for (size_t j = 0; j < B; j++)
                        REQUIRE(recv[((size_t)k * n + r) * B + j] == ag_byte(r, k * B + j),
                                "allgather " + std::to_string(k) + " block " + std::to_string(r) +
                                    " wrong");
            REQUIRE(c.pl.coll_dereg(c.cc, smh) == ncclSuccess);
            REQUIRE(c.pl.coll_dereg(c.cc, rmh) == ncclSuccess);
            REQUIRE(ex->barrier(2, rank, n, 60));
            return teardown(&c);
        },
        240);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

/* Connecting to the switch at addr fails with ncclSystemError and a warning, so NCCL falls
   back to the net; the rank's process then ends normally (no abort on teardown). */
void expect_connect_falls_back(const std::string &addr)
{
    setenv("INCMOE_SWITCH", addr.c_str(), 1);
    setenv("INCMOE_TIMEOUT_MS", "1000", 1);
    Exchange *ex = Exchange::create(2);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        2,
        [&](int rank) -> std::string {
            Rank c;
            TRY(c.pl.load(11));
            REQUIRE(c.pl.net_init(7) == ncclSuccess && c.pl.coll_init(7) == ncclSuccess);
            c.inited = true;
            char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
            REQUIRE(c.pl.coll_listen(0, handle, &c.lc) == ncclSuccess);
            ex->publish(0, rank, handle, sizeof(handle));
            std::vector<std::vector<char>> all;
            REQUIRE(ex->gather(0, 2, &all, 30));
            void *h[2] = {all[0].data(), all[1].data()};
            ncclResult_t r = c.pl.coll_connect(h, 2, rank, c.lc, &c.cc);
            REQUIRE(r == ncclSystemError, "connect returned " + std::to_string(r));
            REQUIRE(nccltest::warnings().find("falls back") != std::string::npos,
                    nccltest::warnings());
            return teardown_after_failure(&c);
        },
        60);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

/* No switch at the address: connect fails loudly, so NCCL falls back to the net. */
TEST_F(NcclCollNetBehaviour, UnreachableSwitchFailsConnectWithAWarning)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd); /* a port nobody listens on */
    expect_connect_falls_back("127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
}

/* A stopped switch takes the connection and never answers: connect times out and fails the
   same way instead of aborting the process. */
TEST_F(NcclCollNetBehaviour, StoppedSwitchFailsConnectWithoutAborting)
{
    harness::SwitchProc stopped;
    ASSERT_TRUE(harness::switch_start(&stopped));
    ASSERT_EQ(kill(stopped.pid, SIGSTOP), 0);
    expect_connect_falls_back(stopped.addr);
    kill(stopped.pid, SIGCONT);
    harness::switch_stop(&stopped);
}

/*
 * The CollNet offers host memory only, whatever UCX can move: its client adds
 * the root's own partial and copies eager payloads with the CPU.  NCCL then
 * stages GPU data through its own pinned host buffers, and regMr refuses GPU
 * memory rather than letting the CPU read a device pointer.
 */
TEST_F(NcclCollNetBehaviour, HostMemoryOnlyWhateverUcxMoves)
{
    uint64_t memtypes = nccltest::ucx_memory_types();
    ASSERT_NE(memtypes, 0u) << "UCX reported no memory types";
    EXPECT_EQ(plugin_ptr_support_of(memtypes, 1), NCCL_PTR_HOST);
    const int n = 2;
    Exchange *ex = Exchange::create(n);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            Rank c;
            TRY(setup(&c, 11, rank, n, ex, 0xC0DAull));
            ncclNetProperties_v11_t p, np;
            REQUIRE(c.pl.coll_props(0, &p) == ncclSuccess && p.ptrSupport == NCCL_PTR_HOST);
            /* The net beside it reports what UCX moves. */
            REQUIRE(c.pl.net_props(0, &np) == ncclSuccess &&
                    np.ptrSupport == plugin_ptr_support_of(memtypes, 0));
            std::vector<char> probe(64);
            void *mh = nullptr;
            REQUIRE(c.pl.coll_reg(c.cc, probe.data(), probe.size(), NCCL_PTR_CUDA, &mh) ==
                    ncclInvalidArgument);
            REQUIRE(nccltest::warnings().find("not supported") != std::string::npos);
            REQUIRE(ex->barrier(1, rank, n, 60));
            return teardown(&c);
        },
        120);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

/* listen, exchange, connect; the connect result goes to *res (for tests where it may fail). */
std::string connect_only(Rank *c, int version, int rank, int n, Exchange *ex, ncclResult_t *res)
{
    c->rank = rank;
    c->n = n;
    TRY(c->pl.load(version));
    REQUIRE(c->pl.net_init(9) == ncclSuccess && c->pl.coll_init(9) == ncclSuccess);
    c->inited = true;
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    REQUIRE(c->pl.coll_listen(0, handle, &c->lc) == ncclSuccess);
    ex->publish(0, rank, handle, sizeof(handle));
    std::vector<std::vector<char>> all;
    REQUIRE(ex->gather(0, n, &all, 30));
    std::vector<void *> h(n);
    for (int r = 0; r < n; r++)
        h[r] = all[r].data();
    *res = c->pl.coll_connect(h.data(), n, rank, c->lc, &c->cc);
    return "";
}

/* The secret comes from INCMOE_AUTH_KEY_FILE (or INCMOE_AUTH_KEY), the job id may be set. */
TEST_F(NcclCollNetBehaviour, SecretFromKeyFileAndJobIdOverride)
{
    char path[] = "/tmp/incmoe-nccl-key-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const char key[] = "nccl-plugin-secret\n";
    ASSERT_EQ(write(fd, key, sizeof(key) - 1), (ssize_t)sizeof(key) - 1);
    close(fd);
    harness::SwitchProc ksw;
    ASSERT_TRUE(harness::switch_start(&ksw, {"--auth-key-file", path}));
    setenv("INCMOE_SWITCH", ksw.addr.c_str(), 1);
    setenv("INCMOE_AUTH_KEY_FILE", path, 1);
    setenv("INCMOE_JOB_ID", "0x5eed", 1);
    for (int right : {1, 0}) {
        if (!right)
            setenv("INCMOE_AUTH_KEY", "not-the-secret", 1); /* takes precedence over the file */
        Exchange *ex = Exchange::create(2);
        ASSERT_NE(ex, nullptr);
        auto res = harness::run_ranks(
            2,
            [&](int rank) -> std::string {
                Batch b{nullptr, 10, {}, {}, {}};
                Rank c;
                b.c = &c;
                ncclResult_t r = ncclInternalError;
                TRY(connect_only(&c, 10, rank, 2, ex, &r));
                if (!right) {
                    REQUIRE(r == ncclSystemError, "connect returned " + std::to_string(r));
                    REQUIRE(nccltest::warnings().find("could not join job 0x5eed") !=
                                std::string::npos,
                            nccltest::warnings());
                    return teardown_after_failure(&c);
                }
                REQUIRE(r == ncclSuccess, nccltest::warnings());
                TRY(post_allreduce(&c, &b.ps, 1000, ncclFloat32, ncclSum, &b.keep, &b.mhs));
                TRY(b.flush());
                return teardown(&c);
            },
            60);
        ex->destroy();
        EXPECT_EQ(harness::failures(res), "") << (right ? "right secret" : "wrong secret");
    }
    unsetenv("INCMOE_AUTH_KEY");
    unsetenv("INCMOE_AUTH_KEY_FILE");
    unsetenv("INCMOE_JOB_ID");
    harness::switch_stop(&ksw);
    unlink(path);
}

/* Two NCCL communicators in one process: two CollNet comms, two jobs, no crosstalk. */
TEST_F(NcclCollNetBehaviour, TwoCommunicatorsInOneProcessAreSeparateJobs)
{
    const int n = 2;
    Exchange *ex = Exchange::create(n);
    ASSERT_NE(ex, nullptr);
    auto res = harness::run_ranks(
        n,
        [&](int rank) -> std::string {
            /* The same loaded plugin twice (dlopen() hands back the one instance), as NCCL
               uses it for every communicator. */
            Rank a, b;
            TRY(a.pl.load(11));
            TRY(b.pl.load(11));
            REQUIRE(a.pl.lib == b.pl.lib && a.pl.coll == b.pl.coll);
            a.rank = b.rank = rank;
            a.n = b.n = n;
            REQUIRE(a.pl.net_init(1) == ncclSuccess);
            REQUIRE(a.pl.coll_init(0xA) == ncclSuccess && b.pl.coll_init(0xB) == ncclSuccess);
            char ha[NCCL_NET_HANDLE_MAXSIZE] = {}, hb[NCCL_NET_HANDLE_MAXSIZE] = {};
            REQUIRE(a.pl.coll_listen(0, ha, &a.lc) == ncclSuccess);
            REQUIRE(b.pl.coll_listen(0, hb, &b.lc) == ncclSuccess);
            ex->publish(0, rank, ha, sizeof(ha));
            std::vector<std::vector<char>> all;
            REQUIRE(ex->gather(0, n, &all, 30));
            void *hs[2] = {all[0].data(), all[1].data()};
            REQUIRE(a.pl.coll_connect(hs, n, rank, a.lc, &a.cc) == ncclSuccess,
                    nccltest::warnings());
            ex->publish(1, rank, hb, sizeof(hb));
            REQUIRE(ex->gather(1, n, &all, 30));
            void *hs2[2] = {all[0].data(), all[1].data()};
            REQUIRE(b.pl.coll_connect(hs2, n, rank, b.lc, &b.cc) == ncclSuccess,
                    nccltest::warnings());
            /* Different operations in flight on both at once must not mix. */
            Batch ba{&a, 10, {}, {}, {}}, bb{&b, 10, {}, {}, {}};
            TRY(post_allreduce(&a, &ba.ps, 5000, ncclFloat32, ncclSum, &ba.keep, &ba.mhs));
            TRY(post_allreduce(&b, &bb.ps, 5000, ncclFloat32, ncclMax, &bb.keep, &bb.mhs));
            TRY(post_allgather(&b, &bb.ps, 3000, {0, 3000u * n}, false, &bb.keep, &bb.mhs));
            TRY(post_allgather(&a, &ba.ps, 3000, {1000, 3000u * n - 2000}, false, &ba.keep,
                               &ba.mhs));
            TRY(bb.flush());
            TRY(ba.flush());
            REQUIRE(ex->barrier(2, rank, n, 30));
            REQUIRE(a.pl.coll_close(a.cc) == ncclSuccess && b.pl.coll_close(b.cc) == ncclSuccess);
            REQUIRE(a.pl.coll_close_listen(a.lc) == ncclSuccess);
            REQUIRE(b.pl.coll_close_listen(b.lc) == ncclSuccess);
            void *actx = a.pl.coll_ctx;
            REQUIRE(a.pl.coll_finalize() == ncclSuccess && b.pl.coll_finalize() == ncclSuccess);
            REQUIRE(actx != b.pl.coll_ctx, "one context for two communicators");
            REQUIRE(a.pl.net_finalize() == ncclSuccess);
            return "";
        },
        60);
    ex->destroy();
    EXPECT_EQ(harness::failures(res), "");
}

/* Without INCMOE_SWITCH the CollNet has no device (and says why); the net still works. */
TEST_F(NcclCollNetBehaviour, NoSwitchMeansNoCollNetDevice)
{
    unsetenv("INCMOE_SWITCH");
    auto res = harness::run_ranks(1, [&](int) -> std::string {
        Plugin pl;
        TRY(pl.load_newest());
        REQUIRE(pl.net_init(1) == ncclSuccess && pl.coll_init(1) == ncclSuccess);
        int nd = -1, cd = -1;
        REQUIRE(pl.net_devices(&nd) == ncclSuccess && nd == 1);
        REQUIRE(pl.coll_devices(&cd) == ncclSuccess && cd == 0);
        REQUIRE(nccltest::warnings().find("INCMOE_SWITCH") != std::string::npos);
        REQUIRE(pl.coll_finalize() == ncclSuccess && pl.net_finalize() == ncclSuccess);
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace
