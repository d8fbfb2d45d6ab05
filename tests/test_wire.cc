/* test_wire.cc - header validation, signatures, layout arithmetic, status texts, settings. */
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <set>
#include <string>

extern "C" {
#include "api/incmoe.h"
#include "base/config.h"
#include "base/wire.h"
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

/* Version 2 put the job's timeout into JOIN_ACK: a version-1 peer's header, or its shorter
   JOIN_ACK, is refused rather than misread. */
TEST(Wire, JoinAckCarriesTheJobTimeout)
{
    EXPECT_EQ(INCMOE_WIRE_VERSION, 2);
    EXPECT_EQ(sizeof(inc_wire_join_ack), 24u);
    EXPECT_EQ(offsetof(inc_wire_join_ack, timeout_ms), 16u);
    inc_wire_hdr a;
    inc_wire_hdr_init(&a, WIRE_MSG_JOIN_ACK, 1);
    EXPECT_EQ(check(a, sizeof(inc_wire_join_ack)), INCMOE_OK);
    std::string why;
    EXPECT_EQ(check(a, 16, &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("truncated"), std::string::npos);
    a.version = 1;
    EXPECT_EQ(check(a, sizeof(inc_wire_join_ack), &why), INCMOE_ERR_PROTOCOL);
    EXPECT_NE(why.find("version"), std::string::npos);
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

TEST(Settings, TableAndParsing)
{
    EXPECT_EQ(inc_config_parse_size("4096"), 4096);
    EXPECT_EQ(inc_config_parse_size("64K"), 65536);
    EXPECT_EQ(inc_config_parse_size("2MiB"), 2 << 20);
    EXPECT_EQ(inc_config_parse_size("1G"), 1ll << 30);
    EXPECT_EQ(inc_config_parse_size("x"), -1);
    EXPECT_EQ(inc_config_parse_size("12Q"), -1);
    EXPECT_EQ(inc_config_parse_size("-5"), -1);
    setenv("INCMOE_CREDITS", "3", 1);
    EXPECT_EQ(inc_config_get_int("INCMOE_CREDITS"), 3);
    unsetenv("INCMOE_CREDITS");
    EXPECT_EQ(inc_config_get_int("INCMOE_CREDITS"), 32);
    for (size_t i = 0; i < inc_config_table_size; i++)
        EXPECT_EQ(std::string(inc_config_table[i].name).rfind("INCMOE_", 0), 0u);
}
