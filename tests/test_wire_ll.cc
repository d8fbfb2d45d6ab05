/* test_wire_ll.cc - the low-latency payloads (base/ll_wire.h): where each part sits, good
   payloads parse to what was packed, every kind of damage is refused with a reason, and the
   verdict the ranks share. */
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "base/ll_wire.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
}

namespace
{

/* One message: its header and payload, packed by hand at the offsets wire.h states (so the
   layout function is checked against the text, not against itself). */
struct Msg {
    inc_wire_hdr h;
    std::vector<char> p;
};

inc_wire_ll head(uint64_t rows, uint64_t row_bytes, int nranks)
{
    inc_wire_ll ll;
    memset(&ll, 0, sizeof(ll));
    ll.rows = rows;
    ll.row_bytes = row_bytes;
    ll.max_tokens = 4;
    ll.nranks = (uint32_t)nranks;
    return ll;
}

inc_wire_ll combine_head(uint64_t rows, int nranks)
{
    inc_wire_ll ll = head(rows, 8, nranks);
    ll.dispatch_epoch = 3;
    ll.row_count = 2;
    ll.dtype = INCMOE_FLOAT32;
    ll.redop = INCMOE_SUM;
    return ll;
}

inc_wire_hdr hdr_of(inc_wire_msg_t msg, incmoe_stream_t stream, uint32_t rank, uint32_t root,
                    uint64_t total, size_t length)
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, msg, 9);
    h.stream = (uint8_t)stream;
    h.epoch = 5;
    h.rank = rank;
    h.root = root;
    h.total = total;
    h.length = length;
    return h;
}

template <typename T> void put(std::vector<char> &p, const T &x)
{
    const char *b = reinterpret_cast<const char *>(&x);
    p.insert(p.end(), b, b + sizeof(x));
}

void pad8(std::vector<char> &p)
{
    while (p.size() % 8 != 0)
        p.push_back(0);
}

void put_rows(std::vector<char> &p, uint64_t n, uint64_t row_bytes, char first)
{
    for (uint64_t i = 0; i < n * row_bytes; i++)
        p.push_back((char)(first + i));
}

/* Rank 1 of 3 dispatches 3 rows: row 0 to rank 0 and 2, row 1 to itself only, row 2 to 2. */
Msg dispatch_ll()
{
    Msg m;
    put(m.p, head(3, 16, 3));
    put(m.p, (uint64_t)0x5);
    put(m.p, (uint64_t)0x2);
    put(m.p, (uint64_t)0x6);
    put_rows(m.p, 2, 16, 'a');
    m.h = hdr_of(WIRE_MSG_LL, INCMOE_STREAM_DISPATCH, 1, 0, 3, m.p.size());
    return m;
}

/* Rank 0 of 3 combines: 2 rows of its own (to 1; to 1 and 2), partials 2 for rank 1, 1 for 2. */
Msg combine_ll()
{
    Msg m;
    put(m.p, combine_head(2, 3));
    put(m.p, (uint64_t)0x2);
    put(m.p, (uint64_t)0x6);
    put(m.p, (uint32_t)0);
    put(m.p, (uint32_t)2);
    put(m.p, (uint32_t)1);
    pad8(m.p);
    put_rows(m.p, 3, 8, 'A');
    m.h = hdr_of(WIRE_MSG_LL, INCMOE_STREAM_COMBINE, 0, 0, 2, m.p.size());
    return m;
}

/* The switch forwards rank 2's rows 1 and 3 (of 4) to rank 0. */
Msg dispatch_fwd()
{
    Msg m;
    put(m.p, head(4, 24, 3));
    put(m.p, (uint32_t)1);
    put(m.p, (uint32_t)3);
    put_rows(m.p, 2, 24, 'r');
    m.h = hdr_of(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, 0, 2, 2, m.p.size());
    return m;
}

/* A refused dispatch of rank 2: its reason, padded, and nothing else. */
Msg refused_ll()
{
    Msg m;
    inc_wire_ll ll = head(0, 16, 3);
    ll.status = INCMOE_ERR_NO_MEMORY;
    ll.refused = 5;
    put(m.p, ll);
    m.p.insert(m.p.end(), {'o', 'v', 'e', 'r', '!'});
    pad8(m.p);
    m.h = hdr_of(WIRE_MSG_LL, INCMOE_STREAM_DISPATCH, 2, 0, 0, m.p.size());
    return m;
}

incmoe_status_t parse(const Msg &m, inc_wire_ll_view_t *v, std::string *why = nullptr)
{
    char buf[256] = "";
    EXPECT_EQ(inc_wire_hdr_check(&m.h, sizeof(m.h), m.p.size(), buf, sizeof(buf)), INCMOE_OK)
        << buf;
    incmoe_status_t st = inc_wire_ll_parse(&m.h, 3, m.p.data(), m.p.size(), v, buf, sizeof(buf));
    if (why)
        *why = buf;
    return st;
}

} // namespace

TEST(WireLL, HeadIsSixtyFourBytes)
{
    EXPECT_EQ(sizeof(inc_wire_ll), 64u);
}

TEST(WireLL, LayoutPutsEachPartWhereTheTextSays)
{
    inc_wire_ll_layout_t at;
    inc_wire_ll ll = head(3, 16, 3);
    ASSERT_EQ(inc_wire_ll_layout(WIRE_MSG_LL, INCMOE_STREAM_DISPATCH, 3, &ll, 2, &at), 0);
    EXPECT_EQ(at.sets, 64u);
    EXPECT_EQ(at.recvd, 0u);
    EXPECT_EQ(at.rows, 64u + 3 * 8);
    EXPECT_EQ(at.length, dispatch_ll().p.size());

    ll = combine_head(2, 3);
    ASSERT_EQ(inc_wire_ll_layout(WIRE_MSG_LL, INCMOE_STREAM_COMBINE, 3, &ll, 3, &at), 0);
    EXPECT_EQ(at.recvd, 64u + 2 * 8);
    EXPECT_EQ(at.rows, 64u + 2 * 8 + 16);
    EXPECT_EQ(at.length, combine_ll().p.size());

    ll = head(4, 24, 3);
    ASSERT_EQ(inc_wire_ll_layout(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, 3, &ll, 2, &at), 0);
    EXPECT_EQ(at.src_row, 64u);
    EXPECT_EQ(at.rows, 72u);
    EXPECT_EQ(at.length, dispatch_fwd().p.size());

    ll = head(0, 16, 3);
    ll.status = INCMOE_ERR_NO_MEMORY;
    ll.refused = 5;
    ASSERT_EQ(inc_wire_ll_layout(WIRE_MSG_LL, INCMOE_STREAM_DISPATCH, 3, &ll, 7, &at), 0);
    EXPECT_EQ(at.length, 72u);
    EXPECT_EQ(at.rows, 0u);

    ll = head(1, UINT64_MAX / 2, 3);
    EXPECT_EQ(inc_wire_ll_layout(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, 3, &ll, 3, &at), -1);
}

TEST(WireLL, ADispatchLLParsesToItsSetsAndNetworkRows)
{
    Msg m = dispatch_ll();
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.sender, 1);
    EXPECT_EQ(v.n, 2u); /* row 1 stays on rank 1 */
    EXPECT_TRUE(inc_wire_ll_set_holds(&v, 0, 2));
    EXPECT_FALSE(inc_wire_ll_set_holds(&v, 2, 0));
    EXPECT_EQ(inc_wire_ll_set_word(&v, 2, 0), 0x6u);
    EXPECT_EQ(v.rows, m.p.data() + 64 + 24);
    EXPECT_EQ(v.rows[0], 'a');
    EXPECT_EQ(v.reason, nullptr);
}

TEST(WireLL, ACombineLLParsesToItsRecvdCounts)
{
    Msg m = combine_ll();
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.n, 3u);
    EXPECT_EQ(inc_wire_ll_recvd(&v, 1), 2u);
    EXPECT_EQ(inc_wire_ll_recvd(&v, 2), 1u);
    EXPECT_EQ(v.rows[0], 'A');
}

TEST(WireLL, AForwardedDispatchParsesToItsSourceRows)
{
    Msg m = dispatch_fwd();
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.sender, 2);
    ASSERT_EQ(v.n, 2u);
    EXPECT_EQ(inc_wire_ll_src_row(&v, 0), 1u);
    EXPECT_EQ(inc_wire_ll_src_row(&v, 1), 3u);
    EXPECT_EQ(v.rows[0], 'r');
}

TEST(WireLL, ARefusalParsesToItsReason)
{
    Msg m = refused_ll();
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.ll.status, INCMOE_ERR_NO_MEMORY);
    EXPECT_EQ(std::string(v.reason, v.reason_len), "over!");
    EXPECT_EQ(v.n, 0u);
}

TEST(WireLL, AVerdictParsesToItsStatusAndReason)
{
    Msg m;
    const char text[] = "combine epoch 5: no";
    m.p.assign(text, text + sizeof(text));
    m.h = hdr_of(WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, 0, 1, 0, m.p.size());
    m.h.status = INCMOE_ERR_MISMATCH;
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.verdict, INCMOE_ERR_MISMATCH);
    EXPECT_STREQ(v.reason, text);

    m.h.root = 3; /* no rank of the job */
    EXPECT_EQ(parse(m, &v), INCMOE_ERR_PROTOCOL);
    m.h.root = 1;
    m.p.back() = 'x'; /* no NUL */
    std::string why;
    EXPECT_EQ(parse(m, &v, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("NUL"), std::string::npos) << why;
}

TEST(WireLL, AForwardedCombineAndAPeerCombineParse)
{
    Msg m;
    put(m.p, combine_head(3, 3));
    put_rows(m.p, 2, 8, 'c');
    m.h = hdr_of(WIRE_MSG_LL_FWD, INCMOE_STREAM_COMBINE, 0, 1, 2, m.p.size());
    inc_wire_ll_view_t v;
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.sender, 1);
    EXPECT_EQ(v.n, 2u);
    EXPECT_EQ(v.src_row, nullptr);

    m.h = hdr_of(WIRE_MSG_PEER_LL, INCMOE_STREAM_COMBINE, 2, 0, 2, m.p.size());
    ASSERT_EQ(parse(m, &v), INCMOE_OK);
    EXPECT_EQ(v.sender, 2);
}

/* Each damage, applied to a good message, and a word its reason must hold. */
struct Damage {
    const char *name;
    std::function<Msg()> base;
    std::function<void(Msg &)> apply;
    const char *reason;
};

static inc_wire_ll &head_of(Msg &m)
{
    return *reinterpret_cast<inc_wire_ll *>(m.p.data());
}

static void resize(Msg &m, size_t n)
{
    m.p.resize(n);
    m.h.length = n;
}

TEST(WireLL, EveryKindOfDamageIsRefusedWithAReason)
{
    const Damage damages[] = {
        {"nranks", dispatch_ll, [](Msg &m) { head_of(m).nranks = 4; }, "ranks"},
        {"reserved", dispatch_ll, [](Msg &m) { head_of(m).reserved = 1; }, "reserved"},
        {"status", dispatch_ll, [](Msg &m) { head_of(m).status = -7; }, "status"},
        {"refused long", refused_ll, [](Msg &m) { head_of(m).refused = INCMOE_REFUSAL_MAX; },
         "reason"},
        {"reason unrefused", dispatch_ll, [](Msg &m) { head_of(m).refused = 3; }, "without"},
        {"refused rows", refused_ll, [](Msg &m) { head_of(m).rows = 1; }, "refused with"},
        {"reason pad", refused_ll, [](Msg &m) { m.p[64 + 6] = 'x'; }, "padding"},
        {"refused tail", refused_ll, [](Msg &m) { resize(m, m.p.size() + 8); }, "payload bytes"},
        {"over max", dispatch_ll, [](Msg &m) { head_of(m).max_tokens = 2; }, "max_tokens"},
        {"max 0", dispatch_ll, [](Msg &m) { head_of(m).max_tokens = 0; }, "max_tokens 0"},
        {"row_bytes 0", dispatch_ll, [](Msg &m) { head_of(m).row_bytes = 0; }, "0 bytes"},
        {"layout", dispatch_ll, [](Msg &m) { head_of(m).layout = 2; }, "layout"},
        {"topk by source", dispatch_ll, [](Msg &m) { head_of(m).topk = 1; }, "by source"},
        {"topk 0 by expert", dispatch_ll, [](Msg &m) { head_of(m).layout = 1; }, "topk"},
        {"ids overflow row", dispatch_ll,
         [](Msg &m) {
             head_of(m).layout = 1;
             head_of(m).topk = 4;
         },
         "expert ids"},
        {"combine fields", dispatch_ll, [](Msg &m) { head_of(m).row_count = 1; }, "combine"},
        {"dtype", combine_ll, [](Msg &m) { head_of(m).dtype = 99; }, "datatype"},
        {"dispatch 0", combine_ll, [](Msg &m) { head_of(m).dispatch_epoch = 0; }, "epoch 0"},
        {"elements", combine_ll, [](Msg &m) { head_of(m).row_count = 3; }, "elements"},
        {"total", dispatch_ll, [](Msg &m) { m.h.total = 2; }, "says"},
        {"set bit", dispatch_ll, [](Msg &m) { m.p[64] = 0x9; }, "at or above"},
        {"truncated", dispatch_ll, [](Msg &m) { resize(m, m.p.size() - 1); }, "payload bytes"},
        {"overlong", dispatch_ll, [](Msg &m) { resize(m, m.p.size() + 16); }, "payload bytes"},
        {"head only", dispatch_ll, [](Msg &m) { resize(m, 64); }, "do not fit"},
        {"recvd self", combine_ll, [](Msg &m) { m.p[64 + 16] = 1; }, "itself"},
        {"recvd max", combine_ll, [](Msg &m) { m.p[64 + 16 + 4] = 9; }, "max_tokens"},
        {"recvd pad", combine_ll, [](Msg &m) { m.p[64 + 16 + 12] = 1; }, "padding"},
        {"fwd rows", dispatch_fwd, [](Msg &m) { head_of(m).rows = 1; }, "rows"},
        {"src order", dispatch_fwd, [](Msg &m) { m.p[64] = 3; }, "ascending"},
        {"src range", dispatch_fwd, [](Msg &m) { m.p[68] = 4; }, "source row 4"},
        {"fwd n", dispatch_fwd, [](Msg &m) { m.h.total = 3; }, "payload bytes"},
        {"sender", dispatch_fwd, [](Msg &m) { m.h.root = 3; }, "rank 3"},
        {"sender's sign", dispatch_fwd, [](Msg &m) { m.h.root = 0x80000001u; }, "rank 2147483649"},
    };
    for (const Damage &d : damages) {
        Msg m = d.base();
        d.apply(m);
        inc_wire_ll_view_t v;
        std::string why;
        EXPECT_EQ(parse(m, &v, &why), INCMOE_ERR_PROTOCOL) << d.name;
        EXPECT_NE(why.find(d.reason), std::string::npos) << d.name << ": " << why;
    }
}

TEST(WireLL, HeadersOfTheFormAreChecked)
{
    std::string why;
    char buf[200];
    Msg m = dispatch_ll();
    EXPECT_STREQ(inc_wire_msg_name(WIRE_MSG_LL), "LL");
    EXPECT_STREQ(inc_wire_msg_name(WIRE_MSG_LL_FWD), "LL_FWD");
    EXPECT_STREQ(inc_wire_msg_name(WIRE_MSG_PEER_LL), "PEER_LL");
    const std::function<void(inc_wire_hdr &)> damages[] = {
        [](inc_wire_hdr &h) { h.stream = INCMOE_STREAM_ALLREDUCE; },
        [](inc_wire_hdr &h) { h.epoch = 0; },
        [](inc_wire_hdr &h) { h.length += 1; },
        [](inc_wire_hdr &h) { h.offset = 8; },
        [](inc_wire_hdr &h) { h.chunk = 1; },
        [](inc_wire_hdr &h) { h.root = 1; },
        [](inc_wire_hdr &h) { h.status = INCMOE_ERR_MISMATCH; },
    };
    for (const auto &damage : damages) {
        inc_wire_hdr h = m.h;
        damage(h);
        EXPECT_EQ(inc_wire_hdr_check(&h, sizeof(h), m.p.size(), buf, sizeof(buf)),
                  INCMOE_ERR_PROTOCOL);
    }
    inc_wire_hdr h = m.h;
    h.length = 32;
    EXPECT_EQ(inc_wire_hdr_check(&h, sizeof(h), 32, buf, sizeof(buf)), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(std::string(buf).find("truncated"), std::string::npos) << buf;
    h = hdr_of(WIRE_MSG_LL_FWD, INCMOE_STREAM_DISPATCH, 0, 0, 0, INCMOE_WIRE_MAX_TEXT + 1);
    h.status = INCMOE_ERR_UNSUPPORTED;
    EXPECT_EQ(inc_wire_hdr_check(&h, sizeof(h), INCMOE_WIRE_MAX_TEXT + 1, buf, sizeof(buf)),
              INCMOE_ERR_PROTOCOL);
    h.length = 10;
    EXPECT_EQ(inc_wire_hdr_check(&h, sizeof(h), 10, buf, sizeof(buf)), INCMOE_OK) << buf;
}

TEST(WireLL, TheVerdictNamesTheLowestRefusalThenTheFirstDisagreement)
{
    inc_wire_ll d[3] = {combine_head(1, 3), combine_head(2, 3), combine_head(0, 3)};
    const char *reason[3] = {nullptr, nullptr, nullptr};
    inc_dc_verdict_t v;
    inc_wire_ll_verdict(INCMOE_STREAM_COMBINE, 7, 3, d, reason, &v);
    EXPECT_EQ(v.status, INCMOE_OK);
    EXPECT_EQ(v.rank, -1);

    d[2].redop = INCMOE_MAX;
    d[1].max_tokens = 9;
    inc_wire_ll_verdict(INCMOE_STREAM_COMBINE, 7, 3, d, reason, &v);
    EXPECT_EQ(v.status, INCMOE_ERR_MISMATCH);
    EXPECT_EQ(v.rank, 1);
    EXPECT_NE(std::string(v.reason).find("max_tokens"), std::string::npos) << v.reason;

    d[1].max_tokens = 4;
    inc_wire_ll_verdict(INCMOE_STREAM_COMBINE, 7, 3, d, reason, &v);
    EXPECT_EQ(v.rank, 2);
    /* A dispatch does not compare the combine's fields. */
    inc_wire_ll_verdict(INCMOE_STREAM_DISPATCH, 7, 3, d, reason, &v);
    EXPECT_EQ(v.status, INCMOE_OK);

    d[2].status = INCMOE_ERR_NO_MEMORY;
    d[2].refused = 18;
    reason[2] = "rank 2 has 70 rows";
    d[1].status = INCMOE_ERR_INVALID_ARG;
    d[1].refused = 3;
    reason[1] = "badXXX"; /* only refused bytes count */
    inc_wire_ll_verdict(INCMOE_STREAM_DISPATCH, 7, 3, d, reason, &v);
    EXPECT_EQ(v.status, INCMOE_ERR_INVALID_ARG);
    EXPECT_EQ(v.rank, 1);
    EXPECT_STREQ(v.reason, "dispatch epoch 7: rank 1 refused its dispatch arguments: bad");
    d[1].status = 0;
    inc_wire_ll_verdict(INCMOE_STREAM_DISPATCH, 7, 3, d, reason, &v);
    EXPECT_EQ(v.status, INCMOE_ERR_NO_MEMORY);
    EXPECT_STREQ(v.reason, "dispatch epoch 7: rank 2 has 70 rows");
}
