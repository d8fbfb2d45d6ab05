/* test_reduce.cc - the reduction kernels and 16-bit conversions against independent references. */
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ref_half.h"
#include "ref_op.h"

extern "C" {
#include "base/dtype.h"
#include "base/reduce.h"
#include "incmoe/incmoe.h"
}

/* bf16 reference: pick the nearer of the two truncations, ties to even, via double arithmetic. */
static uint16_t ref_bf16(float f)
{
    if (std::isnan(f))
        return 0x7fc0 | (f < 0 ? 0x8000 : 0);
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = inc_dtype_bf16_to_float(lo), dh = inc_dtype_bf16_to_float(hi);
    double dlo = std::fabs((double)f - dl), dhi = std::fabs((double)f - dh);
    if (std::isinf(dh) && !std::isinf(f))
        dhi = std::fabs((double)f - 3.3961775292304e38 * (f < 0 ? -1 : 1));
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* n floats of random bits from seed, NaNs included (each test passes over what it must). */
static std::vector<float> random_bit_floats(unsigned seed, int n)
{
    std::mt19937 rng(seed);
    std::vector<float> out(n);
    for (float &f : out) {
        uint32_t u = rng();
        memcpy(&f, &u, 4);
    }
    return out;
}

TEST(Dtype, HalfRoundTripsEveryValue)
{
    for (uint32_t u = 0; u < 0x10000; u++) {
        uint16_t h = (uint16_t)u;
        float f = inc_dtype_half_to_float(h);
        if (std::isnan(ref_half::to_float(h))) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << u;
            continue;
        }
        ASSERT_EQ(f, ref_half::to_float(h)) << std::hex << u;
        ASSERT_EQ(inc_dtype_float_to_half(f), h) << std::hex << u;
    }
}

TEST(Dtype, FloatToHalfRoundsLikeTheCompiler)
{
    for (float f : random_bit_floats(1, 2000000)) {
        if (std::isnan(f))
            continue;
        ASSERT_EQ(inc_dtype_float_to_half(f), ref_half::from_float(f)) << f;
    }
}

TEST(Dtype, FloatToBf16RoundsToNearestEven)
{
    for (float f : random_bit_floats(2, 1000000)) {
        if (std::isnan(f) || std::fabs(f) > 3.38e38f)
            continue;
        ASSERT_EQ(inc_dtype_float_to_bf16(f), ref_bf16(f)) << f;
    }
    EXPECT_EQ(inc_dtype_float_to_bf16(1.0f), 0x3f80);
    EXPECT_TRUE(std::isnan(inc_dtype_bf16_to_float(inc_dtype_float_to_bf16(NAN))));
}

/* The sources' reduction by the library, in their order. */
template <typename T>
static std::vector<T> reduced(const std::vector<std::vector<T>> &src, incmoe_dtype_t dt, int op)
{
    std::vector<const void *> ptrs;
    for (auto &v : src)
        ptrs.push_back(v.data());
    std::vector<T> out(src[0].size());
    inc_reduce_ordered(out.data(), ptrs.data(), (int)src.size(), out.size(), dt,
                       (incmoe_redop_t)op);
    return out;
}

template <typename T>
static void check_native(incmoe_dtype_t dt, int op, int nsrc, size_t count, std::mt19937 &rng)
{
    std::vector<std::vector<T>> src(nsrc, std::vector<T>(count));
    for (auto &v : src)
        for (auto &x : v)
            x = (T)(rng() % 7) - (std::is_signed<T>::value ? (T)3 : (T)0);
    std::vector<T> out = reduced(src, dt, op);
    for (size_t i = 0; i < count; i++) {
        T want = src[0][i];
        for (int s = 1; s < nsrc; s++)
            want = ref_op::apply<T>(op, want, src[s][i]);
        ASSERT_EQ(out[i], want) << incmoe_dtype_name(dt) << " "
                                << incmoe_redop_name((incmoe_redop_t)op) << " i=" << i;
    }
}

TEST(Reduce, NativeTypesEveryOp)
{
    std::mt19937 rng(3);
    for (int op = 0; op < INC_REDOP_COUNT; op++) {
        for (int nsrc : {1, 2, 3, 7}) {
            for (size_t count : {1ul, 5ul, 1000ul, 5000ul}) {
                check_native<int8_t>(INCMOE_INT8, op, nsrc, count, rng);
                check_native<uint8_t>(INCMOE_UINT8, op, nsrc, count, rng);
                check_native<int32_t>(INCMOE_INT32, op, nsrc, count, rng);
                check_native<uint32_t>(INCMOE_UINT32, op, nsrc, count, rng);
                check_native<int64_t>(INCMOE_INT64, op, nsrc, count, rng);
                check_native<uint64_t>(INCMOE_UINT64, op, nsrc, count, rng);
                check_native<float>(INCMOE_FLOAT32, op, nsrc, count, rng);
                check_native<double>(INCMOE_FLOAT64, op, nsrc, count, rng);
            }
        }
    }
}

TEST(Reduce, SixteenBitAccumulatesInFp32AndRoundsOnce)
{
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> dist(-4, 4);
    for (incmoe_dtype_t dt : {INCMOE_FLOAT16, INCMOE_BFLOAT16}) {
        for (int op = 0; op < INC_REDOP_COUNT; op++) {
            const int nsrc = 6;
            const size_t count = 3001;
            std::vector<std::vector<uint16_t>> src(nsrc, std::vector<uint16_t>(count));
            for (auto &v : src)
                for (auto &x : v)
                    x = dt == INCMOE_FLOAT16 ? ref_half::from_float(dist(rng))
                                             : ref_bf16(dist(rng));
            std::vector<uint16_t> out = reduced(src, dt, op);
            for (size_t i = 0; i < count; i++) {
                auto wide = [&](uint16_t x) {
                    return dt == INCMOE_FLOAT16 ? ref_half::to_float(x)
                                                : inc_dtype_bf16_to_float(x);
                };
                float acc = wide(src[0][i]);
                for (int s = 1; s < nsrc; s++)
                    acc = ref_op::apply<float>(op, acc, wide(src[s][i]));
                uint16_t want = dt == INCMOE_FLOAT16 ? ref_half::from_float(acc) : ref_bf16(acc);
                ASSERT_EQ(out[i], want) << incmoe_dtype_name(dt) << " op " << op << " i=" << i;
            }
        }
    }
}

TEST(Reduce, PairInPlaceOnEitherSide)
{
    std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
    std::vector<float> a2 = a, b2 = b;
    inc_reduce_pair(a2.data(), a2.data(), b.data(), 3, INCMOE_FLOAT32, INCMOE_SUM);
    inc_reduce_pair(b2.data(), a.data(), b2.data(), 3, INCMOE_FLOAT32, INCMOE_SUM);
    EXPECT_EQ(a2, (std::vector<float>{11, 22, 33}));
    EXPECT_EQ(b2, (std::vector<float>{11, 22, 33}));
    std::vector<uint16_t> h = {ref_half::from_float(1.5f), ref_half::from_float(-2.0f)},
                          g = {ref_half::from_float(0.25f), ref_half::from_float(8.0f)};
    inc_reduce_pair(g.data(), h.data(), g.data(), 2, INCMOE_FLOAT16, INCMOE_MAX);
    EXPECT_EQ(ref_half::to_float(g[0]), 1.5f);
    EXPECT_EQ(ref_half::to_float(g[1]), 8.0f);
}

TEST(Reduce, SupportTable)
{
    for (int d = 0; d < INC_DTYPE_COUNT; d++)
        for (int o = 0; o < INC_REDOP_COUNT; o++)
            EXPECT_TRUE(incmoe_reduce_supported((incmoe_dtype_t)d, (incmoe_redop_t)o));
    EXPECT_FALSE(incmoe_reduce_supported((incmoe_dtype_t)INC_DTYPE_COUNT, INCMOE_SUM));
    EXPECT_FALSE(incmoe_reduce_supported(INCMOE_FLOAT32, (incmoe_redop_t)INC_REDOP_COUNT));
    EXPECT_EQ(incmoe_dtype_size(INCMOE_BFLOAT16), 2u);
    EXPECT_EQ(incmoe_dtype_size((incmoe_dtype_t)INC_DTYPE_COUNT), 0u);
}

/* Wire payloads sit wherever the transport put them: results must not depend on alignment. */
TEST(Reduce, UnalignedBuffersGiveTheSameResults)
{
    std::mt19937 rng(5);
    for (incmoe_dtype_t dt :
         {INCMOE_FLOAT32, INCMOE_FLOAT64, INCMOE_INT32, INCMOE_FLOAT16, INCMOE_BFLOAT16}) {
        const size_t count = 777, es = incmoe_dtype_size(dt), bytes = count * es;
        std::vector<unsigned char> a(bytes), b(bytes);
        for (auto &x : a)
            x = (unsigned char)(rng() % 64); /* small, finite values in every type */
        for (auto &x : b)
            x = (unsigned char)(rng() % 64);
        std::vector<unsigned char> want(bytes);
        inc_reduce_pair(want.data(), a.data(), b.data(), count, dt, INCMOE_SUM);
        /* The same inputs at odd addresses, the result too. */
        std::vector<unsigned char> ua(bytes + 3), ub(bytes + 5), uout(bytes + 7);
        memcpy(ua.data() + 3, a.data(), bytes);
        memcpy(ub.data() + 5, b.data(), bytes);
        inc_reduce_pair(uout.data() + 7, ua.data() + 3, ub.data() + 5, count, dt, INCMOE_SUM);
        EXPECT_EQ(memcmp(uout.data() + 7, want.data(), bytes), 0) << incmoe_dtype_name(dt);
    }
}
