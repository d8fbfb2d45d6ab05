/* test_wire.cc - header validation, signatures, layout arithmetic, status texts, settings,
   numbers, key files and remote text. */
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>

#include <gtest/gtest.h>

extern "C" {
#include "base/bootstrap.h"
#include "base/config.h"
#include "base/keyfile.h"
#include "base/text.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
}

static inc_wire_hdr data_hdr()
{
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_DATA, 42);
    h.stream = INCMOE_STREAM_REDUCESCATTER;
    h.epoch = 1;
    h.offset = 0;
    h.length = 64;
    h.total = 128;
    h.dtype = INCMOE_FLOAT32;
    h.redop = INCMOE_SUM;
    return h;
}

static incmoe_status_t check(const inc_wire_hdr &h, size_t payload, std::string *why = nullptr)
{
    char buf[200] = "";
    incmoe_status_t st = inc_wire_hdr_check(&h, sizeof(h), payload, buf, sizeof(buf));
    if (why)
        *why = buf;
    return st;
}

TEST(Wire, AcceptsAWellFormedData)
{
    EXPECT_EQ(check(data_hdr(), 64), INCMOE_OK);
}

TEST(Wire, RejectsEachKindOfDamage)
{
    std::string why;
    inc_wire_hdr h = data_hdr();
    EXPECT_EQ(inc_wire_hdr_check(&h, sizeof(h) - 1, 64, nullptr, 0), INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(inc_wire_hdr_check(nullptr, 0, 0, nullptr, 0), INCMOE_ERR_PROTOCOL);

    h = data_hdr();
    h.magic = 0xdeadbeef;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("magic"), std::string::npos);
    h = data_hdr();
    h.version = 99;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("version"), std::string::npos);
    h = data_hdr();
    h.msg = 200;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("message type"), std::string::npos);
    h = data_hdr();
    h.stream = 9;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("stream"), std::string::npos);
    h = data_hdr();
    h.epoch = 0;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    h = data_hdr();
    EXPECT_EQ(check(h, 63, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("carries"), std::string::npos);
    h = data_hdr();
    h.offset = 100;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("outside"), std::string::npos);
    h = data_hdr();
    h.offset = ~0ull - 10;
    EXPECT_EQ(check(h, 64), INCMOE_ERR_PROTOCOL);
    h = data_hdr();
    h.dtype = 77;
    EXPECT_EQ(check(h, 64, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("datatype"), std::string::npos);
    h = data_hdr();
    h.redop = 9;
    EXPECT_EQ(check(h, 64), INCMOE_ERR_PROTOCOL);
    h = data_hdr();
    h.length = 6;
    h.dtype = INCMOE_FLOAT32;
    EXPECT_EQ(check(h, 6, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("aligned"), std::string::npos);
    h = data_hdr();
    h.stream = INCMOE_STREAM_BARRIER;
    EXPECT_EQ(check(h, 64), INCMOE_ERR_PROTOCOL);
    h = data_hdr();
    h.length = 0;
    EXPECT_EQ(check(h, 0), INCMOE_ERR_PROTOCOL);

    inc_wire_hdr j;
    inc_wire_hdr_init(&j, WIRE_MSG_JOIN, 1);
    EXPECT_EQ(check(j, 3), INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(check(j, sizeof(inc_wire_join)), INCMOE_OK);
    inc_wire_hdr_init(&j, WIRE_MSG_HEARTBEAT, 1);
    EXPECT_EQ(check(j, 1), INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(check(j, 0), INCMOE_OK);
    inc_wire_hdr_init(&j, WIRE_MSG_ERROR, 1);
    EXPECT_EQ(check(j, INCMOE_WIRE_MAX_TEXT + 1), INCMOE_ERR_PROTOCOL);
    inc_wire_hdr_init(&j, WIRE_MSG_POST, 1);
    j.epoch = 1;
    EXPECT_EQ(check(j, 8), INCMOE_ERR_PROTOCOL);
}

/* Version 2 put the job's timeout into JOIN_ACK; version 3 put the bootstrap token into JOIN
   (instead of the key) and the ring token into JOIN_ACK: an older peer's header, or its
   shorter JOIN_ACK, is refused rather than misread. */
TEST(Wire, JoinAckCarriesTheJobTimeoutAndRingToken)
{
    EXPECT_EQ(INCMOE_WIRE_VERSION, 10);
    EXPECT_EQ(sizeof(inc_wire_join_ack), 40u);
    EXPECT_EQ(offsetof(inc_wire_join_ack, timeout_ms), 16u);
    EXPECT_EQ(offsetof(inc_wire_join_ack, ring_token), 24u);
    EXPECT_EQ(sizeof(inc_wire_join), 32u);
    EXPECT_EQ(offsetof(inc_wire_join, progress_timeout_ms), 12u); /* 0 (reserved) before */
    EXPECT_EQ(offsetof(inc_wire_join, token), 16u);
    inc_wire_hdr a;
    inc_wire_hdr_init(&a, WIRE_MSG_JOIN_ACK, 1);
    EXPECT_EQ(check(a, sizeof(inc_wire_join_ack)), INCMOE_OK);
    std::string why;
    EXPECT_EQ(check(a, 16, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("truncated"), std::string::npos);
    EXPECT_EQ(check(a, 24, &why), INCMOE_ERR_PROTOCOL); /* a version-2 JOIN_ACK */
    inc_wire_hdr_init(&a, WIRE_MSG_PEER_HELLO, 1);
    EXPECT_EQ(check(a, INCMOE_WIRE_TOKEN), INCMOE_OK);
    EXPECT_EQ(check(a, 0), INCMOE_ERR_PROTOCOL);
    inc_wire_hdr_init(&a, WIRE_MSG_JOIN_ACK, 1);
    a.version = 2;
    EXPECT_EQ(check(a, sizeof(inc_wire_join_ack), &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("version"), std::string::npos);
}

/* Dispatch and combine between the ranks: each message on its own stream, rows inside what
   was announced, whole elements of partials, credits without payload. */
TEST(Wire, PeerDispatchAndCombineMessages)
{
    std::string why;
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_PEER_PLAN, 1);
    h.stream = INCMOE_STREAM_DISPATCH;
    h.epoch = 3;
    h.length = sizeof(inc_wire_dc_post) + 8;
    EXPECT_EQ(check(h, h.length), INCMOE_OK);
    h.length = 8;
    EXPECT_EQ(check(h, 8, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("truncated"), std::string::npos) << why;
    h.stream = INCMOE_STREAM_ALLGATHER;
    h.length = sizeof(inc_wire_dc_post);
    EXPECT_EQ(check(h, h.length), INCMOE_ERR_PROTOCOL);

    inc_wire_hdr_init(&h, WIRE_MSG_PEER_ROWS, 1);
    h.stream = INCMOE_STREAM_DISPATCH;
    h.epoch = 1;
    h.offset = 4;
    h.total = 5;
    h.length = 100;
    EXPECT_EQ(check(h, 100), INCMOE_OK);
    EXPECT_EQ(check(h, 99), INCMOE_ERR_PROTOCOL); /* truncated */
    h.offset = 5;
    EXPECT_EQ(check(h, 100, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("row 5 of 5"), std::string::npos) << why;
    h.offset = 0;
    h.stream = INCMOE_STREAM_COMBINE;
    EXPECT_EQ(check(h, 100), INCMOE_ERR_PROTOCOL); /* rows belong to a dispatch */

    inc_wire_hdr_init(&h, WIRE_MSG_PEER_PARTIALS, 1);
    h.stream = INCMOE_STREAM_COMBINE;
    h.epoch = 2;
    h.total = 3;
    h.length = 12;
    h.dtype = INCMOE_FLOAT32;
    EXPECT_EQ(check(h, 12), INCMOE_OK);
    h.length = 10;
    EXPECT_EQ(check(h, 10, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("whole float"), std::string::npos) << why;
    h.length = 12;
    h.dtype = 200;
    EXPECT_EQ(check(h, 12), INCMOE_ERR_PROTOCOL);

    inc_wire_hdr_init(&h, WIRE_MSG_PEER_CREDIT, 1);
    h.stream = INCMOE_STREAM_COMBINE;
    h.epoch = 2;
    h.length = 1;
    EXPECT_EQ(check(h, 0), INCMOE_OK);
    EXPECT_EQ(check(h, 4), INCMOE_ERR_PROTOCOL);
    h.length = 0;
    EXPECT_EQ(check(h, 0), INCMOE_ERR_PROTOCOL);
    h.length = 1;
    h.epoch = 0;
    EXPECT_EQ(check(h, 0), INCMOE_ERR_PROTOCOL);
}

/* Dispatch and combine: their payload layouts, and what the header check refuses. */
TEST(Wire, DispatchAndCombineMessages)
{
    EXPECT_EQ(sizeof(inc_wire_dc_post), 48u);
    EXPECT_EQ(sizeof(inc_wire_dc_plan), 16u + INCMOE_WIRE_MAX_TEXT);
    EXPECT_EQ(sizeof(inc_wire_dc_piece), 32u);
    EXPECT_EQ(inc_wire_dc_post_length(INCMOE_STREAM_DISPATCH, 3, 0), 48u + 12u);
    EXPECT_EQ(inc_wire_dc_post_length(INCMOE_STREAM_COMBINE, 3, 0), 48u + 24u);
    EXPECT_EQ(inc_wire_dc_post_length(INCMOE_STREAM_COMBINE, 3, 5), 48u + 24u + 5u);
    EXPECT_EQ(inc_wire_dc_rows_per_chunk(120, 8, 4096), 32u);  /* 120 + 8 bytes a row */
    EXPECT_EQ(inc_wire_dc_rows_per_chunk(120, 65, 4096), 30u); /* two set words */
    EXPECT_EQ(inc_wire_dc_rows_per_chunk(9000, 2, 4096), 1u);  /* at least one */
    EXPECT_TRUE(inc_wire_dc_is_small(4096, 4096));
    EXPECT_FALSE(inc_wire_dc_is_small(4097, 4096));
    EXPECT_EQ(inc_wire_dc_piece_length(1), 40u);

    std::string why;
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_POST, 1);
    h.stream = INCMOE_STREAM_DISPATCH;
    h.epoch = 1;
    h.length = 60;
    EXPECT_EQ(check(h, 60), INCMOE_OK);
    h.length = 8;
    EXPECT_EQ(check(h, 8, &why), INCMOE_ERR_PROTOCOL); /* shorter than its fields */
    EXPECT_NE(why.find("POST"), std::string::npos);
    inc_wire_hdr_init(&h, WIRE_MSG_PLAN, 1);
    h.stream = INCMOE_STREAM_ALLGATHER;
    h.epoch = 1;
    h.length = sizeof(inc_wire_dc_plan);
    EXPECT_EQ(check(h, sizeof(inc_wire_dc_plan), &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("neither dispatch nor combine"), std::string::npos);
    h.stream = INCMOE_STREAM_COMBINE;
    EXPECT_EQ(check(h, sizeof(inc_wire_dc_plan)), INCMOE_OK);
    inc_wire_hdr_init(&h, WIRE_MSG_DATA, 1);
    h.stream = INCMOE_STREAM_COMBINE;
    h.epoch = 1;
    h.dtype = 77;
    h.length = 16;
    EXPECT_EQ(check(h, 16, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("unknown datatype"), std::string::npos);
    h.dtype = INCMOE_FLOAT32;
    h.length = 0;
    EXPECT_EQ(check(h, 0, &why), INCMOE_ERR_PROTOCOL); /* never empty */
    inc_wire_hdr_init(&h, WIRE_MSG_DONE, 1);
    h.stream = INCMOE_STREAM_DISPATCH;
    h.epoch = 1;
    EXPECT_EQ(check(h, 0, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("DONE on the dispatch stream"), std::string::npos);
}

TEST(Wire, AllGatherDataNeedsNoDatatype)
{
    inc_wire_hdr h = data_hdr();
    h.stream = INCMOE_STREAM_ALLGATHER;
    h.dtype = 250;
    h.length = 3;
    EXPECT_EQ(check(h, 3), INCMOE_OK);
}

TEST(Wire, SignatureSeesEveryField)
{
    uint64_t a[3] = {1, 2, 3}, b[3] = {1, 2, 4};
    uint64_t s = inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT32, INCMOE_SUM, a, 3);
    EXPECT_EQ(s, inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT32, INCMOE_SUM, a, 3));
    std::set<uint64_t> all = {
        s,
        inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT32, INCMOE_SUM, b, 3),
        inc_wire_signature(INCMOE_STREAM_REDUCESCATTER, INCMOE_FLOAT32, INCMOE_SUM, a, 3),
        inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT16, INCMOE_SUM, a, 3),
        inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT32, INCMOE_MAX, a, 3),
        inc_wire_signature(INCMOE_STREAM_ALLGATHER, INCMOE_FLOAT32, INCMOE_SUM, a, 2)};
    EXPECT_EQ(all.size(), 6u);
}

/* The small rule every rank and the switch apply alike, at its limits. */
TEST(Wire, SmallRuleAtItsLimits)
{
    const uint64_t chunk = 4096;
    uint64_t b[4] = {1024, 1024, 1024, 1024};
    EXPECT_TRUE(inc_wire_is_small(INCMOE_STREAM_REDUCESCATTER, b, 4, chunk));
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_ALLGATHER, b, 4, chunk)); /* half a chunk */
    b[3] = 1025;
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_REDUCESCATTER, b, 4, chunk));
    uint64_t g[4] = {512, 512, 512, 512};
    EXPECT_TRUE(inc_wire_is_small(INCMOE_STREAM_ALLGATHER, g, 4, chunk));
    g[0] = 513;
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_ALLGATHER, g, 4, chunk));
    uint64_t v[4] = {chunk, chunk, chunk, chunk};
    EXPECT_TRUE(inc_wire_is_small(INCMOE_STREAM_ALLREDUCE, v, 4, chunk));
    v[0] = chunk + 1;
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_ALLREDUCE, v, 4, chunk));
    uint64_t z[4] = {0, 0, 0, 0};
    EXPECT_TRUE(inc_wire_is_small(INCMOE_STREAM_ALLGATHER, z, 4, chunk));
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_BARRIER, z, 4, chunk));
    EXPECT_FALSE(
        inc_wire_is_small(INCMOE_STREAM_ALLGATHER, z, 1, chunk)); /* N = 1: nothing to send */
    /* Sizes whose sum wraps around 64 bits are not small. */
    uint64_t huge[2] = {UINT64_MAX, 2};
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_REDUCESCATTER, huge, 2, chunk));
    uint64_t wrap[2] = {2, UINT64_MAX};
    EXPECT_FALSE(inc_wire_is_small(INCMOE_STREAM_ALLGATHER, wrap, 2, chunk));
}

/* What each rank sends in its SMALL and receives in its SMALL_FWD. */
TEST(Wire, SmallLengths)
{
    uint64_t b[3] = {8, 16, 24};
    EXPECT_EQ(inc_wire_small_length(INCMOE_STREAM_ALLGATHER, b, 3, 1), 24u + 16u);
    EXPECT_EQ(inc_wire_small_length(INCMOE_STREAM_REDUCESCATTER, b, 3, 1), 24u + 8u + 24u);
    EXPECT_EQ(inc_wire_small_result_length(INCMOE_STREAM_ALLGATHER, b, 3, 1), 8u + 24u);
    EXPECT_EQ(inc_wire_small_result_length(INCMOE_STREAM_REDUCESCATTER, b, 3, 1), 16u);
    uint64_t v[3] = {40, 40, 40};
    EXPECT_EQ(inc_wire_small_length(INCMOE_STREAM_ALLREDUCE, v, 3, 2), 24u + 40u);
    EXPECT_EQ(inc_wire_small_result_length(INCMOE_STREAM_ALLREDUCE, v, 3, 2), 40u);
}

TEST(Layout, BytesClipToValidAndWindow)
{
    size_t valid[4] = {100, 0, 40, 64};
    incmoe_layout_t l = {64, 32, 16, valid};
    EXPECT_EQ(incmoe_layout_bytes(&l, 0), 16u); /* 100 > window end */
    EXPECT_EQ(incmoe_layout_bytes(&l, 1), 0u);  /* empty block */
    EXPECT_EQ(incmoe_layout_bytes(&l, 2), 8u);  /* ends inside the window */
    EXPECT_EQ(incmoe_layout_bytes(&l, 3), 16u);
    l.valid = nullptr;
    EXPECT_EQ(incmoe_layout_bytes(&l, 1), 16u);
    l.offset = 64;
    l.length = 0;
    EXPECT_EQ(incmoe_layout_bytes(&l, 1), 0u);
}

TEST(Status, EveryCodeHasItsOwnText)
{
    std::set<std::string> texts;
    for (int s = 1; s >= -13; s--)
        texts.insert(incmoe_strerror((incmoe_status_t)s));
    EXPECT_EQ(texts.size(), 15u);
    EXPECT_STREQ(incmoe_strerror((incmoe_status_t)-99), "unknown status");
}

/* A size as the settings and the command lines read it; -1 when refused. */
static long long size_of(const char *text)
{
    long long v;
    return inc_parse_int(text, 0, LLONG_MAX, 1, &v, nullptr, 0) == 0 ? v : -1;
}

TEST(Settings, TableAndParsing)
{
    EXPECT_EQ(size_of("4096"), 4096);
    EXPECT_EQ(size_of("64K"), 65536);
    EXPECT_EQ(size_of("2MiB"), 2 << 20);
    EXPECT_EQ(size_of("1G"), 1ll << 30);
    EXPECT_EQ(size_of("x"), -1);
    EXPECT_EQ(size_of("12Q"), -1);
    EXPECT_EQ(size_of("-5"), -1);
    long long v = 0;
    setenv("INCMOE_CREDITS", "3", 1);
    EXPECT_EQ(inc_config_get_int("INCMOE_CREDITS", &v), INCMOE_OK);
    EXPECT_EQ(v, 3);
    unsetenv("INCMOE_CREDITS");
    EXPECT_EQ(inc_config_get_int("INCMOE_CREDITS", &v), INCMOE_OK);
    EXPECT_EQ(v, 64);
    for (size_t i = 0; i < inc_config_table_size; i++)
        EXPECT_EQ(std::string(inc_config_table[i].name).rfind("INCMOE_", 0), 0u);
}

/* Numbers from users: in range or refused with the range, never wrapped or cut short. */
TEST(Settings, NumbersAreRangeChecked)
{
    struct Case {
        const char *text;
        long long lo, hi;
        int size;
        long long want; /* -1: refused */
        const char *why;
    } cases[] = {
        {"10000", 1, INC_TIMEOUT_MS_MAX, 0, 10000, ""},
        {"2147483648", 1, INC_TIMEOUT_MS_MAX, 0, -1, "out of range (allowed: 1..86400000)"},
        {"99999999999999999999", 1, 10, 0, -1, "out of range"},
        {"0", 1, 10, 0, -1, "out of range"},
        {"-1", 1, 10, 0, -1, "out of range"},
        {"1e9junk", 1, 10, 0, -1, "not an integer (allowed: 1..10)"},
        {"", 1, 10, 0, -1, "not an integer"},
        {" 5", 1, 10, 0, -1, "not an integer"},
        {"+5", 1, 10, 0, -1, "not an integer"},
        {"4K", 1, 1 << 20, 0, -1, "not an integer"}, /* counts take no suffix */
        {"4K", 1, 1 << 20, 1, 4096, ""},
        {"1T", 1, 1ll << 40, 1, 1ll << 40, ""},
        {"2G", 64, 1 << 30, 1, -1, "out of range (allowed: 64..1G bytes)"},
        {"9999999999999G", 0, LLONG_MAX, 1, -1, "out of range"}, /* the shift would overflow */
        {"12Q", 0, 100, 1, -1, "not a size"},
    };
    for (const Case &c : cases) {
        long long v = -7;
        char why[128] = "";
        int rc = inc_parse_int(c.text, c.lo, c.hi, c.size, &v, why, sizeof(why));
        if (c.want >= 0) {
            EXPECT_EQ(rc, 0) << c.text << ": " << why;
            EXPECT_EQ(v, c.want) << c.text;
        } else {
            EXPECT_EQ(rc, -1) << c.text;
            EXPECT_EQ(v, -7) << c.text << ": written although refused";
            EXPECT_NE(std::string(why).find(c.why), std::string::npos) << c.text << ": " << why;
        }
    }
}

TEST(Settings, OutOfRangeEnvironmentIsAnErrorAndKeepsTheDefault)
{
    for (const char *bad : {"abc", "99999999999", "0", "-5", "1e4"}) {
        setenv("INCMOE_TIMEOUT_MS", bad, 1);
        long long v = 0;
        EXPECT_EQ(inc_config_get_int("INCMOE_TIMEOUT_MS", &v), INCMOE_ERR_INVALID_ARG) << bad;
        EXPECT_EQ(v, 10000) << bad;
    }
    unsetenv("INCMOE_TIMEOUT_MS");
    char range[64];
    for (size_t i = 0; i < inc_config_table_size; i++) {
        const inc_config_entry_t *e = &inc_config_table[i];
        if (e->kind == INC_CONFIG_TEXT)
            continue;
        long long v;
        EXPECT_EQ(inc_config_get_int(e->name, &v), INCMOE_OK) << e->name << ": default in range";
        inc_config_range(e, range, sizeof(range));
        EXPECT_NE(std::string(range).find(".."), std::string::npos) << e->name;
    }
}

TEST(Text, RemoteTextIsPrintableAndBounded)
{
    char out[INCMOE_WIRE_MAX_TEXT + 1];
    const char forged[] = "oops\n[switchd] forged line\x1b[2J\\ \xc3\xa9";
    inc_text_sanitize(out, sizeof(out), forged, sizeof(forged));
    EXPECT_STREQ(out, "oops\\x0a[switchd] forged line\\x1b[2J\\ \\xc3\\xa9");
    char twice[sizeof(out)];
    inc_text_sanitize(twice, sizeof(twice), out, strlen(out));
    EXPECT_STREQ(twice, out);
    /* Stops at the first NUL, never reads past src_len. */
    inc_text_sanitize(out, sizeof(out), "ab\0cd", 5);
    EXPECT_STREQ(out, "ab");
    inc_text_sanitize(out, sizeof(out), "abcdef", 3);
    EXPECT_STREQ(out, "abc");
    /* Bounded by INCMOE_WIRE_MAX_TEXT bytes of input and by dst, never mid-escape. */
    std::string big(10000, 'x');
    inc_text_sanitize(out, sizeof(out), big.data(), big.size());
    EXPECT_EQ(strlen(out), (size_t)INCMOE_WIRE_MAX_TEXT);
    char small[8];
    inc_text_sanitize(small, sizeof(small), "ab\n\n", 4);
    EXPECT_STREQ(small, "ab\\x0a");
    for (int c = 0; c < 256; c++) {
        char in[1] = {(char)c}, one[8];
        inc_text_sanitize(one, sizeof(one), in, c == 0 ? 0 : 1);
        for (const char *p = one; *p; p++)
            EXPECT_TRUE(*p >= 0x20 && *p < 0x7f) << "byte " << c;
    }
}

/* The key file: its first line, 1..INCMOE_MAX_SECRET bytes, else refused naming file and limit. */
TEST(Keyfile, LengthIsChecked)
{
    struct Case {
        std::string content;
        incmoe_status_t want;
        size_t len;
    } cases[] = {
        {std::string(64, 'k'), INCMOE_OK, 64},
        {std::string(64, 'k') + "\n", INCMOE_OK, 64},
        {std::string(64, 'k') + "\r\n", INCMOE_OK, 64},
        {"s3cret\nsecond line is not the key\n", INCMOE_OK, 6},
        {std::string(65, 'k'), INCMOE_ERR_INVALID_ARG, 0},
        {std::string(65, 'k') + "\n", INCMOE_ERR_INVALID_ARG, 0},
        {std::string(4000, 'k'), INCMOE_ERR_INVALID_ARG, 0},
        {"\n", INCMOE_ERR_INVALID_ARG, 0},
        {"", INCMOE_ERR_INVALID_ARG, 0},
        {std::string("ab\0cd\n", 6), INCMOE_ERR_INVALID_ARG, 0},
    };
    for (const Case &c : cases) {
        char path[] = "/tmp/incmoe-keyfile-XXXXXX";
        int fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, c.content.data(), c.content.size()), (ssize_t)c.content.size());
        close(fd);
        /* Guard bytes after the key: a write past INCMOE_MAX_SECRET would show. */
        char secret[INCMOE_MAX_SECRET + 8];
        memset(secret, '#', sizeof(secret));
        size_t len = 99;
        char why[256] = "";
        incmoe_status_t st = inc_keyfile_read(path, secret, &len, why, sizeof(why));
        EXPECT_EQ(st, c.want) << c.content.size() << " bytes: " << why;
        for (size_t i = INCMOE_MAX_SECRET; i < sizeof(secret); i++)
            EXPECT_EQ(secret[i], '#') << "written past the limit";
        if (c.want == INCMOE_OK) {
            EXPECT_EQ(len, c.len);
            EXPECT_EQ(std::string(secret, len), c.content.substr(0, c.len));
        } else {
            EXPECT_NE(std::string(why).find(path), std::string::npos) << why;
            EXPECT_NE(std::string(why).find("1..64 bytes"), std::string::npos) << why;
        }
        unlink(path);
    }
    char why[256] = "";
    char secret[INCMOE_MAX_SECRET];
    size_t len;
    EXPECT_EQ(inc_keyfile_read("/nonexistent/key", secret, &len, why, sizeof(why)),
              INCMOE_ERR_AUTH);
    EXPECT_NE(std::string(why).find("/nonexistent/key"), std::string::npos) << why;
}

/* ------------------------------------------------------------------------ */
/* the bootstrap handshake (base/bootstrap.h), as pure machines             */

static std::string boot_msg(unsigned type, const std::string &payload)
{
    std::string m(INC_BOOT_HDR, '\0');
    uint32_t magic = INC_BOOT_MAGIC;
    memcpy(&m[0], &magic, 4);
    m[4] = INC_BOOT_VERSION;
    m[5] = (char)type;
    m[6] = (char)(payload.size() & 0xff);
    m[7] = (char)(payload.size() >> 8);
    return m + payload;
}

static incmoe_status_t boot_parse(const std::string &bytes, std::string *why = nullptr)
{
    inc_boot_msg_t m;
    size_t used = 0;
    char text[160] = "";
    incmoe_status_t st =
        inc_boot_parse((const uint8_t *)bytes.data(), bytes.size(), &m, &used, text, sizeof(text));
    if (why != nullptr)
        *why = text;
    if (st == INCMOE_OK) {
        EXPECT_EQ(used, bytes.size());
    }
    return st;
}

TEST(Bootstrap, ParserRefusesJunkAtOnce)
{
    std::string why;
    EXPECT_EQ(boot_parse(std::string(17, '\0'), &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("magic"), std::string::npos);
    EXPECT_EQ(boot_parse(std::string(16, '\xff')), INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(boot_parse(std::string(1, 'X')), INCMOE_ERR_PROTOCOL); /* the first byte tells */
    std::string hello = boot_msg(INC_BOOT_HELLO, std::string(1, '\1') + std::string(32, 'n'));
    EXPECT_EQ(boot_parse(hello), INCMOE_OK);
    for (size_t n = 0; n < hello.size(); n++)
        EXPECT_EQ(boot_parse(hello.substr(0, n)), INCMOE_IN_PROGRESS) << n;
    std::string bad = hello;
    bad[4] = 9;
    EXPECT_EQ(boot_parse(bad, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("version"), std::string::npos);
    bad = hello;
    bad[5] = 77;
    EXPECT_EQ(boot_parse(bad), INCMOE_ERR_PROTOCOL);
    /* A length past the bound fails on the header, before its payload is awaited. */
    bad = hello.substr(0, INC_BOOT_HDR);
    bad[6] = bad[7] = '\xff';
    EXPECT_EQ(boot_parse(bad, &why), INCMOE_ERR_PROTOCOL);
    /* Each type's length is exact; an address is 1..INC_BOOT_MAX_ADDR and fills the rest. */
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_HELLO, std::string(1, '\1') + std::string(31, 'n'))),
              INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_HELLO, std::string(1, '\2') + std::string(32, 'n'))),
              INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_PROOF_MSG, std::string("\0\4\0addr", 7))), INCMOE_OK);
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_PROOF_MSG, std::string("\0\5\0addr", 7))),
              INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_PROOF_MSG, std::string("\0\0\0", 3))),
              INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(boot_parse(boot_msg(INC_BOOT_REJECT, std::string(2 + INC_BOOT_MAX_TEXT + 1, 'r'))),
              INCMOE_ERR_PROTOCOL);
}

/* Shuttle bytes between two machines until neither moves; returns the rounds taken. */
static int boot_pump(inc_boot_t *c, inc_boot_t *s, std::string *c_sent = nullptr)
{
    int rounds = 0;
    for (; rounds < 10; rounds++) {
        const uint8_t *out;
        size_t n = inc_boot_output(c, &out), moved = n;
        if (c_sent != nullptr)
            c_sent->append((const char *)out, n);
        inc_boot_feed(s, out, n, nullptr);
        inc_boot_sent(c, n);
        n = inc_boot_output(s, &out);
        moved += n;
        inc_boot_feed(c, out, n, nullptr);
        inc_boot_sent(s, n);
        if (moved == 0)
            break;
    }
    return rounds;
}

/* The smallest packed UCX worker address (v2 layout, a uuid, no transports): the handshake
   takes only addresses that inc_ucx_addr_check passes. */
static std::string worker_addr(const char uuid[8])
{
    return std::string("\x01\x02", 2) + std::string(uuid, 8) + "\xff";
}
static const std::string kClientWorker = worker_addr("client-w"),
                         kSwitchWorker = worker_addr("switch-w");

struct BootPair {
    inc_boot_t *c = new inc_boot_t, *s = new inc_boot_t;
    BootPair(const std::string &ckey, const std::string &skey,
             const std::string &caddr = kClientWorker)
    {
        EXPECT_EQ(
            inc_boot_init(c, INC_BOOT_CLIENT, ckey.data(), ckey.size(), caddr.data(), caddr.size()),
            INCMOE_IN_PROGRESS);
        EXPECT_EQ(inc_boot_init(s, INC_BOOT_SERVER, skey.data(), skey.size(), kSwitchWorker.data(),
                                kSwitchWorker.size()),
                  INCMOE_IN_PROGRESS);
    }
    ~BootPair()
    {
        delete c;
        delete s;
    }
};

TEST(Bootstrap, MutualProofSwapsAddressesAndAToken)
{
    for (std::string key : {"s3cret", ""}) {
        BootPair p(key, key);
        boot_pump(p.c, p.s);
        ASSERT_EQ(p.c->status, INCMOE_OK) << key << ": " << p.c->why;
        ASSERT_EQ(p.s->status, INCMOE_OK) << key << ": " << p.s->why;
        EXPECT_EQ(memcmp(p.c->token, p.s->token, INC_BOOT_TOKEN), 0);
        EXPECT_EQ(std::string((char *)p.c->peer_addr, p.c->peer_addr_len), kSwitchWorker);
        EXPECT_EQ(std::string((char *)p.s->peer_addr, p.s->peer_addr_len), kClientWorker);
    }
    BootPair a("k", "k"), b("k", "k");
    boot_pump(a.c, a.s);
    boot_pump(b.c, b.s);
    EXPECT_NE(memcmp(a.c->token, b.c->token, INC_BOOT_TOKEN), 0); /* fresh per session */
    /* A server that chose its token (the NCCL net's accept: one whose data id is free) sends
       that one. */
    BootPair chosen("k", "k");
    const uint8_t token[INC_BOOT_TOKEN] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
    inc_boot_choose_token(chosen.s, token);
    boot_pump(chosen.c, chosen.s);
    ASSERT_EQ(chosen.c->status, INCMOE_OK) << chosen.c->why;
    EXPECT_EQ(memcmp(chosen.c->token, token, INC_BOOT_TOKEN), 0);
}

TEST(Bootstrap, WrongKeyAndMismatchFailWithAuth)
{
    BootPair wrong("s3cret", "other");
    boot_pump(wrong.c, wrong.s);
    EXPECT_EQ(wrong.c->status, INCMOE_ERR_AUTH);
    EXPECT_NE(std::string(wrong.c->why).find("wrong key"), std::string::npos) << wrong.c->why;
    EXPECT_NE(wrong.s->status, INCMOE_OK);
    EXPECT_EQ(wrong.s->peer_addr_len, 0u); /* the client's address never reached it */

    BootPair keyless_rank("", "s3cret");
    boot_pump(keyless_rank.c, keyless_rank.s);
    EXPECT_EQ(keyless_rank.c->status, INCMOE_ERR_AUTH);
    EXPECT_NE(std::string(keyless_rank.c->why).find("requires a key"), std::string::npos)
        << keyless_rank.c->why;
    EXPECT_EQ(keyless_rank.s->status, INCMOE_ERR_AUTH);

    BootPair keyless_switch("s3cret", "");
    boot_pump(keyless_switch.c, keyless_switch.s);
    EXPECT_EQ(keyless_switch.c->status, INCMOE_ERR_AUTH);
    EXPECT_NE(std::string(keyless_switch.c->why).find("has no key"), std::string::npos)
        << keyless_switch.c->why;
}

/* A key holder's malformed worker address never leaves the handshake: the server refuses it
   with a reason naming it, and the client's side of the refusal says so. */
TEST(Bootstrap, MalformedWorkerAddressIsRefusedNotHandedOn)
{
    std::string bad_version = kClientWorker;
    bad_version[0] = '\x0e'; /* version field 14: UCX 1.13 asserts on it */
    std::string trailing = kClientWorker + "x";
    for (const std::string &addr : {bad_version, trailing}) {
        BootPair p("s3cret", "s3cret");
        /* The client's own address passed init; what goes into PROOF is this one. */
        p.c->local_addr = addr.data();
        p.c->local_addr_len = addr.size();
        boot_pump(p.c, p.s);
        EXPECT_EQ(p.s->status, INCMOE_ERR_PROTOCOL);
        EXPECT_EQ(p.s->peer_addr_len, 0u);
        EXPECT_NE(std::string(p.s->why).find("connecting side's UCX worker address"),
                  std::string::npos)
            << p.s->why;
        EXPECT_EQ(p.c->status, INCMOE_ERR_PROTOCOL);
        EXPECT_NE(std::string(p.c->why).find("refused by the accepting side"), std::string::npos)
            << p.c->why;
    }
    /* And a (keyless) server whose WELCOME carries one: the client fails and keeps nothing. */
    inc_boot_t *c = new inc_boot_t;
    ASSERT_EQ(
        inc_boot_init(c, INC_BOOT_CLIENT, nullptr, 0, kClientWorker.data(), kClientWorker.size()),
        INCMOE_IN_PROGRESS);
    auto msg = [](int type, const std::string &payload) {
        std::string m = "INCB";
        m += (char)INC_BOOT_VERSION;
        m += (char)type;
        m += (char)(payload.size() & 0xff);
        m += (char)(payload.size() >> 8);
        return m + payload;
    };
    std::string challenge = msg(INC_BOOT_CHALLENGE, std::string(1 + INC_BOOT_NONCE, '\0'));
    std::string welcome = msg(INC_BOOT_WELCOME, std::string(INC_BOOT_TOKEN, 't') +
                                                    (char)bad_version.size() + '\0' + bad_version);
    inc_boot_feed(c, challenge.data(), challenge.size(), nullptr);
    ASSERT_EQ(c->status, INCMOE_IN_PROGRESS) << c->why;
    inc_boot_feed(c, welcome.data(), welcome.size(), nullptr);
    EXPECT_EQ(c->status, INCMOE_ERR_PROTOCOL);
    EXPECT_EQ(c->peer_addr_len, 0u);
    EXPECT_NE(std::string(c->why).find("accepting side's UCX worker address"), std::string::npos)
        << c->why;
    delete c;
    /* A side whose own address fails the check cannot start (UCX_UNIFIED_MODE=y). */
    inc_boot_t *b = new inc_boot_t;
    EXPECT_EQ(inc_boot_init(b, INC_BOOT_CLIENT, nullptr, 0, "w", 1), INCMOE_ERR_INVALID_ARG);
    EXPECT_NE(std::string(b->why).find("this side's UCX worker address"), std::string::npos)
        << b->why;
    delete b;
}

/* A captured client side (HELLO, PROOF) replayed to a fresh server: its nonce is new, so the
   old proof fails and no session is made. */
TEST(Bootstrap, ReplayedClientMessagesFail)
{
    BootPair p("s3cret", "s3cret");
    std::string captured;
    boot_pump(p.c, p.s, &captured);
    ASSERT_EQ(p.s->status, INCMOE_OK);
    inc_boot_t *s = new inc_boot_t;
    inc_boot_init(s, INC_BOOT_SERVER, "s3cret", 6, kSwitchWorker.data(), kSwitchWorker.size());
    inc_boot_feed(s, captured.data(), captured.size(), nullptr);
    EXPECT_EQ(s->status, INCMOE_ERR_AUTH);
    EXPECT_NE(std::string(s->why).find("wrong key"), std::string::npos) << s->why;
    delete s;
}

/* The proof is HMAC-SHA256(key, label || nonce_c || nonce_s): checked against an independent
   computation, the openssl command line's. */
TEST(Bootstrap, ProofIsHmacSha256OfLabelAndNonces)
{
    uint8_t out[INC_BOOT_PROOF];
    uint8_t nc[32], ns[32];
    for (int i = 0; i < 32; i++) {
        nc[i] = (uint8_t)('a' + i % 26);
        ns[i] = (uint8_t)('A' + i % 26);
    }
    for (auto role : {INC_BOOT_CLIENT, INC_BOOT_SERVER}) {
        ASSERT_EQ(inc_boot_proof("s3cret", 6, role, nc, ns, out), 0);
        std::string data =
            std::string(role == INC_BOOT_CLIENT ? "incmoe-boot-1 client" : "incmoe-boot-1 server") +
            std::string((char *)nc, 32) + std::string((char *)ns, 32);
        char path[] = "/tmp/incmoe-hmac-XXXXXX";
        int fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, data.data(), data.size()), (ssize_t)data.size());
        close(fd);
        std::string cmd = std::string("openssl dgst -sha256 -hmac s3cret -r ") + path;
        FILE *f = popen(cmd.c_str(), "r");
        ASSERT_NE(f, nullptr);
        char line[256] = "";
        ASSERT_NE(fgets(line, sizeof(line), f), nullptr);
        pclose(f);
        unlink(path);
        char hex[65];
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", out[i]);
        EXPECT_EQ(std::string(line).substr(0, 64), std::string(hex));
    }
}
