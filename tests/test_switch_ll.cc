/* test_switch_ll.cc - the switch's low-latency form of dispatch and combine, spoken raw
   (raw_client) to a real incmoe-switchd: forwarding, reduction against a reference folded here,
   verdicts, credits, malformed payloads, a dead or silent rank, a form mismatch, a switch tree,
   and the trips the switch counts. */
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dc_ref.h"
#include "errors_common.h"
#include "exact_int.h"
#include "harness.h"
#include "raw_client.h"

extern "C" {
#include "base/clock.h"
#include "base/ll_wire.h"
#include "base/wire.h"
}

namespace
{

/* N raw ranks of one job on a switch. */
struct Ranks {
    std::vector<std::unique_ptr<RawClient>> c;
    uint64_t job = 0;
    uint32_t credits = 0;
    uint64_t chunk = 0;
    int n() const
    {
        return (int)c.size();
    }
};

/* Progress every rank until done() or timeout_ms; done()'s last answer. */
bool pump(Ranks &r, const std::function<bool()> &done, int timeout_ms = 5000)
{
    for (double end = inc_now_s() + timeout_ms / 1000.0; inc_now_s() < end;) {
        if (done())
            return true;
        for (auto &c : r.c)
            c->progress(1);
    }
    return done();
}

/* Messages of type msg rank got for stream and epoch (any epoch if 0). */
std::vector<RawMsg> got(const RawClient &c, unsigned msg, int stream = -1, uint64_t epoch = 0)
{
    std::vector<RawMsg> out;
    for (const RawMsg &m : c.received)
        if (m.hdr.msg == msg && (stream < 0 || m.hdr.stream == stream) &&
            (epoch == 0 || m.hdr.epoch == epoch))
            out.push_back(m);
    return out;
}

/* n ranks join job on the switches at addr[r % addr.size()]; false if a JOIN_ACK is missing. */
bool join(Ranks *r, const std::vector<std::string> &addr, int n)
{
    r->job = harness::unique_job_id();
    for (int i = 0; i < n; i++) {
        r->c.emplace_back(new RawClient);
        if (!r->c.back()->connect(addr[(size_t)i % addr.size()]))
            return false;
        r->c.back()->join(r->job, (uint32_t)i, (uint32_t)n);
    }
    bool ok = pump(*r, [&] {
        for (auto &c : r->c)
            if (got(*c, WIRE_MSG_JOIN_ACK).empty())
                return false;
        return true;
    });
    if (!ok)
        return false;
    inc_wire_join_ack ack;
    memcpy(&ack, got(*r->c[0], WIRE_MSG_JOIN_ACK)[0].payload.data(), sizeof(ack));
    r->credits = ack.credits;
    r->chunk = ack.chunk_size;
    return true;
}

/* Every rank says LEAVE and goes: the job ends in order. */
void leave_all(Ranks &rk)
{
    for (int r = 0; r < rk.n(); r++) {
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_LEAVE, rk.job);
        h.rank = (uint32_t)r;
        rk.c[(size_t)r]->send(h);
    }
    rk.c.clear();
}

/* ------------------------------------------------------------------------ */
/* what the ranks send                                                       */

/* One rank's part of a low-latency dispatch and combine. */
struct Rank {
    inc_wire_ll ll = {};
    std::string reason;
    std::vector<uint64_t> sets; /* [T x W] */
    std::vector<uint32_t> recvd;
    std::string rows; /* the rows (or partials) after the arrays, n of them */
    uint64_t n = 0;
};

inc_wire_hdr ll_hdr(uint64_t job, int stream, uint64_t epoch, int rank, uint64_t total,
                    size_t length)
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_LL, job);
    h.stream = (uint8_t)stream;
    h.epoch = epoch;
    h.rank = (uint32_t)rank;
    h.total = total;
    h.length = length;
    return h;
}

/* The payload of an LL, laid out by base/ll_wire.h (whose layout test_wire_ll checks against
   wire.h's text). */
std::string pack(int stream, int nranks, const Rank &r)
{
    inc_wire_ll_layout_t at;
    EXPECT_EQ(inc_wire_ll_layout(WIRE_MSG_LL, stream, nranks, &r.ll, r.n, &at), 0);
    std::string p(at.length, '\0');
    memcpy(&p[0], &r.ll, sizeof(r.ll));
    memcpy(&p[at.reason], r.reason.data(), r.reason.size());
    if (r.ll.status != 0)
        return p;
    if (!r.sets.empty())
        memcpy(&p[at.sets], r.sets.data(), 8 * r.sets.size());
    if (at.recvd != 0)
        memcpy(&p[at.recvd], r.recvd.data(), 4 * r.recvd.size());
    std::copy(r.rows.begin(), r.rows.end(), p.begin() + (ptrdiff_t)at.rows);
    return p;
}

void send_ll(Ranks &rk, int stream, uint64_t epoch, int s, const Rank &r, bool rndv = false)
{
    std::string p = pack(stream, rk.n(), r);
    inc_wire_hdr h = ll_hdr(rk.job, stream, epoch, s, r.ll.rows, p.size());
    rk.c[(size_t)s]->send(&h, sizeof(h), p.data(), p.size(), rndv);
}

bool holds(const Rank &r, size_t j, int d, int nranks)
{
    return (r.sets[j * INCMOE_SET_WORDS(nranks) + (size_t)d / 64] >> (d % 64)) & 1;
}

bool network(const Rank &r, size_t j, int s, int nranks)
{
    for (int d = 0; d < nranks; d++)
        if (d != s && holds(r, j, d, nranks))
            return true;
    return false;
}

/* A dispatch of nranks ranks with rows[s] rows each of row_bytes, random sets (some rows only
   for their own rank, some for all), and row bytes from the seed. */
std::vector<Rank> make_dispatch(int nranks, const std::vector<uint64_t> &rows, uint64_t row_bytes,
                                unsigned seed)
{
    std::mt19937 g(seed);
    const size_t W = INCMOE_SET_WORDS(nranks);
    std::vector<Rank> out((size_t)nranks);
    for (int s = 0; s < nranks; s++) {
        Rank &r = out[(size_t)s];
        r.ll.rows = rows[(size_t)s];
        r.ll.row_bytes = row_bytes;
        r.ll.max_tokens = 8;
        r.ll.nranks = (uint32_t)nranks;
        r.sets.assign(r.ll.rows * W, 0);
        for (size_t j = 0; j < r.ll.rows; j++) {
            uint64_t pick = j == 0 ? ~0ull : j == 1 ? (1ull << s) : g();
            for (int d = 0; d < nranks; d++)
                if ((pick >> (d % 64)) & 1)
                    r.sets[j * W + (size_t)d / 64] |= 1ull << (d % 64);
            if (network(r, j, s, nranks)) {
                for (uint64_t b = 0; b < row_bytes; b++)
                    r.rows.push_back((char)(s * 31 + j * 7 + b + seed));
                r.n++;
            }
        }
    }
    return out;
}

/* ------------------------------------------------------------------------ */
/* the suite                                                                 */

class SwitchLL : public ::testing::Test
{
  protected:
    harness::SwitchProc sw;
    std::string log;
    std::vector<std::string> args = {"--timeout-ms", "1000", "--log-level", "info"};

    void SetUp() override
    {
        log = "/tmp/incmoe-switch-ll-" + std::to_string(harness::unique_job_id());
        ASSERT_TRUE(harness::switch_start(&sw, args, log));
    }
    void TearDown() override
    {
        errtest::expect_switch_serves(sw.addr);
        int status = harness::switch_stop(&sw);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the switch crashed";
        unlink(log.c_str());
    }
    /* A fresh switch with these arguments instead. */
    void restart(const std::vector<std::string> &more)
    {
        harness::switch_stop(&sw);
        std::vector<std::string> a = args;
        a.insert(a.end(), more.begin(), more.end());
        ASSERT_TRUE(harness::switch_start(&sw, a, log));
    }
};

/* What rank d must get from source s: s's head, its rows for d and their source rows. */
std::string expect_fwd(const inc_wire_ll_view_t &v, const Rank &src, int s, int d, int nranks)
{
    if (memcmp(&v.ll, &src.ll, sizeof(v.ll)) != 0)
        return "the head differs from the source's";
    uint64_t i = 0, net = 0;
    for (size_t j = 0; j < src.ll.rows; j++) {
        if (!network(src, j, s, nranks))
            continue;
        if (holds(src, j, d, nranks)) {
            if (i >= v.n || inc_wire_ll_src_row(&v, i) != j)
                return "source row " + std::to_string(j) + " missing at " + std::to_string(i);
            if (memcmp(v.rows + i * src.ll.row_bytes, src.rows.data() + net * src.ll.row_bytes,
                       src.ll.row_bytes) != 0)
                return "row " + std::to_string(j) + " differs";
            i++;
        }
        net++;
    }
    return i == v.n ? "" : "more rows than the sets send";
}

/* Every rank d got exactly one LL_FWD of epoch from every other source, as expect_fwd says. */
void check_dispatch(Ranks &rk, const std::vector<Rank> &ranks, uint64_t epoch)
{
    const int n = rk.n();
    ASSERT_TRUE(pump(rk, [&] {
        for (int d = 0; d < n; d++)
            if ((int)got(*rk.c[(size_t)d], WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, epoch).size() <
                n - 1)
                return false;
        return true;
    }));
    for (int d = 0; d < n; d++) {
        std::vector<RawMsg> fwd =
            got(*rk.c[(size_t)d], WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, epoch);
        ASSERT_EQ((int)fwd.size(), n - 1) << "rank " << d;
        std::vector<int> seen((size_t)n, 0);
        for (const RawMsg &m : fwd) {
            inc_wire_ll_view_t v;
            char why[256] = "";
            ASSERT_EQ(inc_wire_ll_parse(&m.hdr, n, m.payload.data(), m.payload.size(), &v, why,
                                        sizeof(why)),
                      INCMOE_OK)
                << why;
            int s = (int)m.hdr.root;
            ASSERT_NE(s, d);
            seen[(size_t)s]++;
            EXPECT_EQ(expect_fwd(v, ranks[(size_t)s], s, d, n), "")
                << "rank " << d << " from " << s << " epoch " << epoch;
        }
        for (int s = 0; s < n; s++)
            EXPECT_EQ(seen[(size_t)s], s == d ? 0 : 1) << "rank " << d << " from " << s;
    }
}

/* Every rank got CREDIT back for what its LL of stream and epoch took (one each here). */
void check_credits(Ranks &rk, int stream, uint64_t epoch)
{
    EXPECT_TRUE(pump(rk, [&] {
        for (auto &c : rk.c)
            if (got(*c, WIRE_MSG_CREDIT, stream, epoch).empty())
                return false;
        return true;
    }));
    for (auto &c : rk.c) {
        std::vector<RawMsg> cr = got(*c, WIRE_MSG_CREDIT, stream, epoch);
        ASSERT_EQ(cr.size(), 1u);
        EXPECT_EQ(cr[0].hdr.length, 1u);
    }
}

TEST_F(SwitchLL, DispatchForwardsEachSourceAsItArrivesEmptyOnesIncluded)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 4));
    std::vector<Rank> ranks = make_dispatch(4, {5, 0, 3, 8}, 24, 7);
    /* Rank 0's rows reach the others before anyone else sent anything. */
    send_ll(rk, INCMOE_STREAM_DISPATCH, 1, 0, ranks[0]);
    ASSERT_TRUE(pump(rk, [&] {
        for (int d = 1; d < 4; d++)
            if (got(*rk.c[(size_t)d], WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, 1).empty())
                return false;
        return true;
    }));
    for (int s = 1; s < 4; s++) /* rank 1 has no rows: every other rank hears so all the same */
        send_ll(rk, INCMOE_STREAM_DISPATCH, 1, s, ranks[(size_t)s], s == 3);
    check_dispatch(rk, ranks, 1);
    check_credits(rk, INCMOE_STREAM_DISPATCH, 1);
    /* The next epoch takes the credits that came back. */
    std::vector<Rank> next = make_dispatch(4, {1, 2, 3, 4}, 16, 9);
    for (int s = 3; s >= 0; s--)
        send_ll(rk, INCMOE_STREAM_DISPATCH, 2, s, next[(size_t)s]);
    check_dispatch(rk, next, 2);
}

/* ------------------------------------------------------------------------ */
/* combine                                                                   */

/* The partials of a combine: for owner o and contributor d, d's partials of o's rows that hold
   d (ascending row), each row_count elements made by value(d, o, j, e). */
struct CombineCase {
    int n;
    incmoe_dtype_t dtype;
    incmoe_redop_t op;
    size_t row_count = 3;
    std::vector<Rank> owners; /* the dispatch whose sets the combine inverts */
    std::function<void(int d, int o, size_t j, size_t e, void *dst)> value;
};

std::vector<Rank> make_combine(const CombineCase &cc, uint64_t dispatch_epoch)
{
    const int n = cc.n;
    const size_t esize = incmoe_dtype_size(cc.dtype);
    std::vector<Rank> out((size_t)n);
    for (int d = 0; d < n; d++) {
        Rank &r = out[(size_t)d];
        r.ll.rows = cc.owners[(size_t)d].ll.rows;
        r.ll.row_bytes = cc.row_count * esize;
        r.ll.max_tokens = 8;
        r.ll.dispatch_epoch = dispatch_epoch;
        r.ll.row_count = cc.row_count;
        r.ll.nranks = (uint32_t)n;
        r.ll.dtype = (uint8_t)cc.dtype;
        r.ll.redop = (uint8_t)cc.op;
        r.sets = cc.owners[(size_t)d].sets;
        r.recvd.assign((size_t)n, 0);
        for (int o = 0; o < n; o++) {
            if (o == d)
                continue;
            for (size_t j = 0; j < cc.owners[(size_t)o].ll.rows; j++) {
                if (!holds(cc.owners[(size_t)o], j, d, n))
                    continue;
                r.recvd[(size_t)o]++;
                r.n++;
                std::string row(r.ll.row_bytes, '\0');
                for (size_t e = 0; e < cc.row_count; e++)
                    cc.value(d, o, j, e, &row[e * esize]);
                r.rows += row;
            }
        }
        r.recvd.resize(((size_t)n + 1) / 2 * 2, 0); /* padded to 8 */
    }
    return out;
}

/* bf16 of f, rounded to nearest even, written out here. */
uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The owners' results against the reference: row j of owner o with a rank other than o in its
   set must be ref(o, j, e, the ranks in its set but o, ascending), element by element. */
std::string check_combine(Ranks &rk, const CombineCase &cc, uint64_t epoch,
                          const std::function<void(int o, size_t j, size_t e,
                                                   const std::vector<int> &ds, void *want)> &ref)
{
    const int n = cc.n;
    const size_t esize = incmoe_dtype_size(cc.dtype), rb = cc.row_count * esize;
    bool ok = pump(rk, [&] {
        for (auto &c : rk.c)
            if (got(*c, WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, epoch).empty())
                return false;
        return true;
    });
    if (!ok)
        return "an owner got no LL_FWD";
    for (int o = 0; o < n; o++) {
        std::vector<RawMsg> fwd =
            got(*rk.c[(size_t)o], WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, epoch);
        if (fwd.size() != 1)
            return "owner " + std::to_string(o) + " got " + std::to_string(fwd.size());
        const RawMsg &m = fwd[0];
        inc_wire_ll_view_t v;
        char why[256] = "";
        if (inc_wire_ll_parse(&m.hdr, n, m.payload.data(), m.payload.size(), &v, why,
                              sizeof(why)) != INCMOE_OK)
            return why;
        if (m.hdr.status != 0)
            return "owner " + std::to_string(o) + " got verdict " + std::string(v.reason);
        const Rank &own = cc.owners[(size_t)o];
        uint64_t i = 0;
        for (size_t j = 0; j < own.ll.rows; j++) {
            std::vector<int> ds;
            for (int d = 0; d < n; d++)
                if (d != o && holds(own, j, d, n))
                    ds.push_back(d);
            if (ds.empty())
                continue;
            if (i >= v.n)
                return "owner " + std::to_string(o) + " has too few rows";
            std::string want(rb, '\0');
            for (size_t e = 0; e < cc.row_count; e++)
                ref(o, j, e, ds, &want[e * esize]);
            if (memcmp(v.rows + i * rb, want.data(), rb) != 0)
                return "owner " + std::to_string(o) + " row " + std::to_string(j) + " differs";
            i++;
        }
        if (i != v.n)
            return "owner " + std::to_string(o) + " has more rows than its sets send";
    }
    return "";
}

/* A small exact integer per element: sums of up to 4 and products of +-1 stay exact in every
   type, so the fold below needs no rounding. */
long long small_int(const CombineCase &cc, int d, int o, size_t j, size_t e)
{
    unsigned h = (unsigned)(d * 1000003 + o * 7919 + (int)j * 131 + (int)e * 17);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    if (cc.op == INCMOE_PROD)
        return (h & 1) ? 1 : -1;
    bool uns = cc.dtype == INCMOE_UINT8 || cc.dtype == INCMOE_UINT32 || cc.dtype == INCMOE_UINT64;
    return uns ? (long long)(h % 9) : (long long)(h % 9) - 4;
}

/* Send every rank's combine LL and check the owners' results against ref. */
void run_combine(
    Ranks &rk, const CombineCase &cc, uint64_t epoch,
    const std::function<void(int, size_t, size_t, const std::vector<int> &, void *)> &ref)
{
    std::vector<Rank> ranks = make_combine(cc, 1);
    for (int d = cc.n - 1; d >= 0; d--) /* arrival order is not reduction order */
        send_ll(rk, INCMOE_STREAM_COMBINE, epoch, d, ranks[(size_t)d]);
    EXPECT_EQ(check_combine(rk, cc, epoch, ref), "")
        << incmoe_dtype_name(cc.dtype) << " " << incmoe_redop_name(cc.op);
    check_credits(rk, INCMOE_STREAM_COMBINE, epoch);
}

TEST_F(SwitchLL, CombineReducesEveryTypeAndOperationAsTheReferenceFolds)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 4));
    uint64_t epoch = 1;
    for (int t = 0; t <= (int)INCMOE_BFLOAT16; t++) {
        for (int op = 0; op <= (int)INCMOE_MIN; op++) {
            CombineCase cc;
            cc.n = 4;
            cc.dtype = (incmoe_dtype_t)t;
            cc.op = (incmoe_redop_t)op;
            cc.owners = make_dispatch(4, {3, 5, 0, 6}, 8, (unsigned)(t * 4 + op));
            cc.value = [&cc](int d, int o, size_t j, size_t e, void *dst) {
                exact_int::put(cc.dtype, small_int(cc, d, o, j, e), dst);
            };
            run_combine(rk, cc, epoch++,
                        [&cc](int o, size_t j, size_t e, const std::vector<int> &ds, void *want) {
                            long long acc = small_int(cc, ds[0], o, j, e);
                            for (size_t k = 1; k < ds.size(); k++) {
                                long long x = small_int(cc, ds[k], o, j, e);
                                acc = cc.op == INCMOE_SUM    ? acc + x
                                      : cc.op == INCMOE_PROD ? acc * x
                                      : cc.op == INCMOE_MAX  ? std::max(acc, x)
                                                             : std::min(acc, x);
                            }
                            exact_int::put(cc.dtype, acc, want);
                        });
        }
    }
}

/* Values whose sums round differently in another order: fp32 and bf16 (fp32 accumulation,
   rounded once) must be bitwise the ascending-rank fold. */
TEST_F(SwitchLL, CombineIsBitwiseTheAscendingRankFoldInFp32)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 5));
    uint64_t epoch = 1;
    for (incmoe_dtype_t t : {INCMOE_FLOAT32, INCMOE_BFLOAT16}) {
        CombineCase cc;
        cc.n = 5;
        cc.dtype = t;
        cc.op = INCMOE_SUM;
        cc.row_count = 16;
        cc.owners = make_dispatch(5, {4, 4, 4, 4, 4}, 8, 3);
        auto val = [](int d, int o, size_t j, size_t e) {
            /* magnitudes far apart: the order of the additions shows in the last bits */
            std::mt19937 g((unsigned)(d * 7919 + o * 131 + j * 17 + e));
            return std::ldexp((float)(g() % 100000) / 7.0f, (int)(g() % 40) - 20);
        };
        cc.value = [&cc, val](int d, int o, size_t j, size_t e, void *dst) {
            float f = val(d, o, j, e);
            if (cc.dtype == INCMOE_FLOAT32)
                memcpy(dst, &f, 4);
            else
                *(uint16_t *)dst = bf16_of(f);
        };
        auto elem = [&cc, val](int d, int o, size_t j, size_t e) {
            float f = val(d, o, j, e);
            return cc.dtype == INCMOE_FLOAT32 ? f : bf16_to_f(bf16_of(f));
        };
        int order_matters = 0;
        run_combine(rk, cc, epoch++,
                    [&](int o, size_t j, size_t e, const std::vector<int> &ds, void *want) {
                        float acc = elem(ds[0], o, j, e), back = elem(ds.back(), o, j, e);
                        for (size_t k = 1; k < ds.size(); k++)
                            acc += elem(ds[k], o, j, e);
                        for (size_t k = ds.size() - 1; k-- > 0;)
                            back += elem(ds[k], o, j, e);
                        order_matters += acc != back;
                        if (cc.dtype == INCMOE_FLOAT32)
                            memcpy(want, &acc, 4);
                        else
                            *(uint16_t *)want = bf16_of(acc);
                    });
        EXPECT_GT(order_matters, 0) << "the values do not tell the orders apart";
    }
}

/* ------------------------------------------------------------------------ */
/* verdicts                                                                  */

/* Every rank got one LL_FWD of the combine of epoch: the verdict st, whose reason holds what. */
void expect_verdict(Ranks &rk, uint64_t epoch, incmoe_status_t st, const std::string &what)
{
    ASSERT_TRUE(pump(rk, [&] {
        for (auto &c : rk.c)
            if (got(*c, WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, epoch).empty())
                return false;
        return true;
    }));
    for (int r = 0; r < rk.n(); r++) {
        std::vector<RawMsg> v =
            got(*rk.c[(size_t)r], WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, epoch);
        ASSERT_EQ(v.size(), 1u);
        EXPECT_EQ(v[0].hdr.status, st) << "rank " << r;
        inc_wire_ll_view_t view;
        char why[256] = "";
        ASSERT_EQ(inc_wire_ll_parse(&v[0].hdr, rk.n(), v[0].payload.data(), v[0].payload.size(),
                                    &view, why, sizeof(why)),
                  INCMOE_OK)
            << why;
        EXPECT_NE(std::string(view.reason).find(what), std::string::npos) << view.reason;
    }
    check_credits(rk, INCMOE_STREAM_COMBINE, epoch);
}

CombineCase fp32_case(int n)
{
    CombineCase cc;
    cc.n = n;
    cc.dtype = INCMOE_FLOAT32;
    cc.op = INCMOE_SUM;
    cc.owners = make_dispatch(n, std::vector<uint64_t>((size_t)n, 3), 8, 5);
    cc.value = [](int d, int o, size_t j, size_t e, void *dst) {
        *(float *)dst = (float)(d + o + j + e);
    };
    return cc;
}

TEST_F(SwitchLL, ARefusalOrADisagreementFailsTheCombineOnEveryRankAndTheJobGoesOn)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 3));
    CombineCase cc = fp32_case(3);
    /* Rank 2 refuses, rank 1 too: the lowest refusal is every rank's answer. */
    std::vector<Rank> ranks = make_combine(cc, 1);
    for (int r : {1, 2}) {
        Rank &x = ranks[(size_t)r];
        x = Rank{};
        x.ll.nranks = 3;
        x.ll.status = INCMOE_ERR_INVALID_ARG;
        x.reason = r == 1 ? "partials on the wrong device" : "no";
        x.ll.refused = (uint16_t)x.reason.size();
    }
    for (int r = 0; r < 3; r++)
        send_ll(rk, INCMOE_STREAM_COMBINE, 1, r, ranks[(size_t)r]);
    expect_verdict(rk, 1, INCMOE_ERR_INVALID_ARG, "rank 1 refused its combine arguments: partials");

    /* Rank 1 names another dispatch. */
    ranks = make_combine(cc, 1);
    ranks[1].ll.dispatch_epoch = 2;
    for (int r = 0; r < 3; r++)
        send_ll(rk, INCMOE_STREAM_COMBINE, 2, r, ranks[(size_t)r]);
    expect_verdict(rk, 2, INCMOE_ERR_MISMATCH, "rank 1's dispatch_epoch");

    /* Rank 2 gives rank 0 one partial fewer than rank 0's sets send it (its payload agrees with
       its counts, so only the owner's sets tell). */
    ranks = make_combine(cc, 1);
    Rank &liar = ranks[2];
    ASSERT_GT(liar.recvd[0], 0u);
    liar.recvd[0]--;
    liar.n--;
    liar.rows.erase(0, liar.ll.row_bytes);
    for (int r = 0; r < 3; r++)
        send_ll(rk, INCMOE_STREAM_COMBINE, 3, r, ranks[(size_t)r]);
    expect_verdict(rk, 3, INCMOE_ERR_MISMATCH, "rank 2 gives");

    /* And the next combine goes through. */
    run_combine(rk, cc, 4, [](int o, size_t j, size_t e, const std::vector<int> &ds, void *want) {
        float acc = 0;
        for (int d : ds)
            acc += (float)(d + o + j + e);
        *(float *)want = acc;
    });
}

/* ------------------------------------------------------------------------ */
/* what fails the job                                                        */

/* Every rank hears an ERROR with status st whose reason holds what. */
void expect_job_fails(Ranks &rk, incmoe_status_t st, const std::string &what)
{
    ASSERT_TRUE(pump(rk, [&] {
        for (auto &c : rk.c)
            if (got(*c, WIRE_MSG_ERROR).empty())
                return false;
        return true;
    }));
    for (int r = 0; r < rk.n(); r++) {
        RawMsg e = got(*rk.c[(size_t)r], WIRE_MSG_ERROR)[0];
        EXPECT_EQ(e.hdr.status, st) << "rank " << r << ": " << e.payload;
        EXPECT_NE(e.payload.find(what), std::string::npos) << "rank " << r << ": " << e.payload;
    }
}

TEST_F(SwitchLL, AnLLOverTheCreditsFailsTheJob)
{
    restart({"--credits", "2", "--chunk-size", "1024"});
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 2));
    Rank r = make_dispatch(2, {8, 1}, 3000, 1)[0];
    const size_t len = pack(INCMOE_STREAM_DISPATCH, 2, r).size(), k = (len + 1023) / 1024;
    ASSERT_GT(k, 2u);
    send_ll(rk, INCMOE_STREAM_DISPATCH, 1, 0, r);
    expect_job_fails(rk, INCMOE_ERR_PROTOCOL,
                     "takes " + std::to_string(k) + " credits of dispatch, it has 2 left");
}

TEST_F(SwitchLL, MalformedLLsFailTheJobWithTheirReason)
{
    struct Bad {
        const char *what;
        bool refuse; /* damage a refusal (it has a reason to pad) */
        std::function<void(Rank &)> damage;
        std::function<void(std::string &)> bytes;
    };
    const Bad bads[] = {
        {"at or above", false, [](Rank &r) { r.sets[0] |= 1ull << 5; }, nullptr},
        {"over max_tokens", false, [](Rank &r) { r.ll.max_tokens = 1; }, nullptr},
        {"describes 4 ranks", false, [](Rank &r) { r.ll.nranks = 4; }, nullptr},
        {"padding", true, nullptr, [](std::string &p) { p[64 + 4] = 1; }},
        {"payload bytes", false, nullptr, [](std::string &p) { p.resize(p.size() - 8); }},
    };
    for (const Bad &bad : bads) {
        Ranks rk;
        ASSERT_TRUE(join(&rk, {sw.addr}, 3));
        Rank r = make_dispatch(3, {1, 3, 2}, 16, 2)[1];
        if (bad.refuse) {
            r = Rank{};
            r.ll.nranks = 3;
            r.ll.status = INCMOE_ERR_INVALID_ARG;
            r.reason = "why";
            r.ll.refused = 3;
        }
        if (bad.damage)
            bad.damage(r);
        std::string p = pack(INCMOE_STREAM_DISPATCH, 3, r);
        if (bad.bytes)
            bad.bytes(p);
        inc_wire_hdr h = ll_hdr(rk.job, INCMOE_STREAM_DISPATCH, 1, 1, r.ll.rows, p.size());
        rk.c[1]->send(&h, sizeof(h), p.data(), p.size());
        SCOPED_TRACE(bad.what);
        expect_job_fails(rk, INCMOE_ERR_PROTOCOL, bad.what);
    }
}

TEST_F(SwitchLL, ARankThatDiesMidCombineFailsTheOthers)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 3));
    std::vector<Rank> ranks = make_combine(fp32_case(3), 1);
    send_ll(rk, INCMOE_STREAM_COMBINE, 1, 0, ranks[0]);
    send_ll(rk, INCMOE_STREAM_COMBINE, 1, 1, ranks[1]);
    rk.c.pop_back(); /* rank 2's process is gone: its connection closes */
    expect_job_fails(rk, INCMOE_ERR_PEER_FAILED, "rank 2");
}

TEST_F(SwitchLL, ASilentRankFailsTheOthersWithinTheProgressTimeout)
{
    restart({"--progress-timeout-ms", "300"});
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 3));
    std::vector<Rank> ranks = make_dispatch(3, {2, 2, 2}, 8, 4);
    send_ll(rk, INCMOE_STREAM_DISPATCH, 1, 0, ranks[0]);
    send_ll(rk, INCMOE_STREAM_DISPATCH, 1, 2, ranks[2]);
    expect_job_fails(rk, INCMOE_ERR_TIMEOUT, "dispatch epoch 1: rank 1 did not post");
}

TEST_F(SwitchLL, APostForAnEpochOthersSentAsLLFailsTheJobWithMismatch)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 2));
    std::vector<Rank> ranks = make_dispatch(2, {2, 2}, 8, 4);
    send_ll(rk, INCMOE_STREAM_DISPATCH, 1, 0, ranks[0]);
    ASSERT_TRUE(pump(rk, [&] { return !got(*rk.c[1], WIRE_MSG_LL_FWD).empty(); }));
    inc_wire_hdr h = ll_hdr(rk.job, INCMOE_STREAM_DISPATCH, 1, 1, 2, 0);
    h.msg = WIRE_MSG_POST;
    std::string post(inc_wire_dc_post_length(INCMOE_STREAM_DISPATCH, 2, 0), '\0');
    inc_wire_dc_post dp = {};
    dp.rows = 2;
    dp.row_bytes = 8;
    dp.capacity = 4;
    dp.nranks = 2;
    memcpy(&post[0], &dp, sizeof(dp));
    h.length = post.size();
    rk.c[1]->send(&h, sizeof(h), post.data(), post.size());
    expect_job_fails(rk, INCMOE_ERR_MISMATCH, "in the low-latency form (LL)");
}

/* ------------------------------------------------------------------------ */
/* trips                                                                     */

/* The switch's trips line of job and stream (waiting at most 10 s for the job to end). */
std::string trips_line(const std::string &log, uint64_t job, const char *stream)
{
    std::string head = "job " + std::to_string(job) + " trips " + stream + ": ";
    for (double end = inc_now_s() + 10; inc_now_s() < end; usleep(10000)) {
        std::string text = errtest::file_text(log);
        size_t at = text.find(head);
        if (at != std::string::npos)
            return text.substr(at + head.size(), text.find('\n', at) - at - head.size());
    }
    return "(no line)";
}

TEST_F(SwitchLL, TheSwitchCountsOneLLUpPerRankAndCollective)
{
    Ranks rk;
    ASSERT_TRUE(join(&rk, {sw.addr}, 3));
    for (uint64_t e = 1; e <= 2; e++) {
        std::vector<Rank> ranks = make_dispatch(3, {2, 3, 1}, 8, (unsigned)e);
        for (int s = 0; s < 3; s++)
            send_ll(rk, INCMOE_STREAM_DISPATCH, e, s, ranks[(size_t)s]);
        check_dispatch(rk, ranks, e);
        check_credits(rk, INCMOE_STREAM_DISPATCH, e);
        CombineCase cc = fp32_case(3);
        cc.owners = ranks;
        std::vector<Rank> comb = make_combine(cc, e);
        for (int s = 0; s < 3; s++)
            send_ll(rk, INCMOE_STREAM_COMBINE, e, s, comb[(size_t)s]);
        ASSERT_TRUE(pump(rk, [&] {
            for (auto &c : rk.c)
                if (got(*c, WIRE_MSG_CREDIT, INCMOE_STREAM_COMBINE, e).empty())
                    return false;
            return true;
        }));
    }
    const uint64_t job = rk.job;
    leave_all(rk);
    EXPECT_EQ(trips_line(log, job, "dispatch"), "in LL=6 out CREDIT=6 LL_FWD=12");
    EXPECT_EQ(trips_line(log, job, "combine"), "in LL=6 out CREDIT=6 LL_FWD=6");
}

/* One rank's low-latency dispatch and combine through the library: 2 rows of 16 bytes, row 0
   for every rank, row 1 for the next; partials of 1.0, so an owner's row sums its holders. */
std::string library_step(incmoe_comm_t *comm, int me, int n)
{
    const size_t rows = 2, rb = 16, cap = (size_t)n * rows, count = 2;
    auto &send = harness::buffer<unsigned char>(rows * rb, (unsigned char)me);
    auto &recv = harness::buffer<unsigned char>(cap * rb);
    auto &sets = harness::buffer<uint64_t>(rows);
    sets[0] = (1ull << n) - 1;
    sets[1] = 1ull << ((me + 1) % n);
    auto &part = harness::buffer<float>(cap * count, 1.0f);
    auto &out = harness::buffer<float>(rows * count, -1.0f);
    incmoe_mr_t *m_send, *m_recv, *m_part, *m_out;
    CHECK_OK(incmoe_mem_register(comm, send.data(), send.size(), &m_send));
    CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size(), &m_recv));
    CHECK_OK(incmoe_mem_register(comm, part.data(), part.size() * 4, &m_part));
    CHECK_OK(incmoe_mem_register(comm, out.data(), out.size() * 4, &m_out));
    incmoe_dispatch_params_t d = {};
    d.field_mask = INCMOE_DISPATCH_PARAM_LOW_LATENCY;
    d.send_mr = m_send;
    d.nrows = rows;
    d.row_bytes = rb;
    d.sets = sets.data();
    d.recv_mr = m_recv;
    d.capacity = cap;
    d.max_tokens = rows;
    incmoe_req_t dreq, creq;
    CHECK_OK(incmoe_dispatch(comm, &d, &dreq));
    CHECK_OK(incmoe_wait(comm, &dreq));
    incmoe_combine_params_t c = dc_ref::combine_params(dreq, m_part, m_out, count);
    CHECK_OK(incmoe_combine(comm, &c, &creq));
    CHECK_OK(incmoe_wait(comm, &creq));
    const float want[2] = {(float)n, 1.0f};
    for (size_t i = 0; i < rows; i++)
        for (size_t e = 0; e < count; e++)
            if (out[i * count + e] != want[i])
                return "combined row " + std::to_string(i) + " is " +
                       std::to_string(out[i * count + e]);
    for (incmoe_mr_t *m : {m_send, m_recv, m_part, m_out})
        CHECK_OK(incmoe_mem_deregister(comm, m));
    return "";
}

TEST_F(SwitchLL, TheLibrarySendsOneLLUpPerRankAndCollective)
{
    const int n = 3, steps = 2;
    const unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(n, [&](int me) -> std::string {
        incmoe_comm_t *comm;
        CHECK_OK_ON(nullptr, harness::comm_create(sw.addr, job, me, n, &comm));
        for (int step = 0; step < steps; step++) {
            std::string bad = library_step(comm, me, n);
            if (!bad.empty())
                return bad;
        }
        return harness::destroy_then_free(comm) == INCMOE_OK ? "" : "destroy failed";
    });
    ASSERT_EQ(harness::failures(res), "");
    EXPECT_EQ(trips_line(log, job, "dispatch"), "in LL=6 out CREDIT=6 LL_FWD=12");
    EXPECT_EQ(trips_line(log, job, "combine"), "in LL=6 out CREDIT=6 LL_FWD=6");
}

/* ------------------------------------------------------------------------ */
/* switch trees                                                              */

TEST(SwitchLLTree, EveryLLOfAJobOverATreeIsAnsweredUnsupported)
{
    harness::SwitchProc root, leaf;
    ASSERT_TRUE(harness::switch_start(&root, {"--timeout-ms", "1000"}));
    ASSERT_TRUE(harness::switch_start(&leaf, {"--timeout-ms", "1000", "--parent", root.addr}));
    {
        Ranks rk; /* rank 0 on the root, rank 1 on the leaf */
        ASSERT_TRUE(join(&rk, {root.addr, leaf.addr}, 2));
        std::vector<Rank> ranks = make_dispatch(2, {2, 2}, 8, 4);
        for (uint64_t e = 1; e <= 2; e++)
            for (int s = 0; s < 2; s++)
                send_ll(rk, INCMOE_STREAM_DISPATCH, e, s, ranks[(size_t)s]);
        ASSERT_TRUE(pump(rk, [&] {
            for (auto &c : rk.c)
                if (got(*c, WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH).size() < 2 ||
                    got(*c, WIRE_MSG_CREDIT, INCMOE_STREAM_DISPATCH).size() < 2)
                    return false;
            return true;
        }));
        for (auto &c : rk.c) {
            for (const RawMsg &m : got(*c, WIRE_MSG_LL_FWD)) {
                EXPECT_EQ(m.hdr.status, INCMOE_ERR_UNSUPPORTED);
                EXPECT_NE(m.payload.find("does not cross switch trees"), std::string::npos);
            }
            EXPECT_TRUE(got(*c, WIRE_MSG_ERROR).empty());
        }
        leave_all(rk);
    }
    for (harness::SwitchProc *s : {&leaf, &root}) {
        int status = harness::switch_stop(s);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a switch crashed";
    }
}

} // namespace
