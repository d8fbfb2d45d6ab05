/*
 * test_tree.cc - jobs across a tree of incmoe-switchd processes (--parent) on
 * loopback.  Every collective, and dispatch with its combine, on 2 and 3
 * levels, on leaves of uneven sizes (one with one rank), on ranks interleaved
 * across leaves and on a job wholly under one leaf, in the small and the
 * chunked form, each result checked bitwise against a reference written here
 * that applies the tree's reduction order (base/wire.h "Switch trees") to
 * every rank's inputs, and against the one-switch order within the type's
 * rounding.  Then the faults of a tree: a leaf or the root killed
 * mid-collective, a parent that refuses a job for its memory or for the key
 * of the link, a root restarted under its leaf, a quiet link, a leaf's
 * failure reaching every rank, a switch port that breaks the protocol.
 *
 * Every switch runs with a short liveness and progress timeout, so a failure
 * ends a test in seconds instead of hanging it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "raw_client.h"
#include "ref_half.h"
#include "ref_op.h"

extern "C" {
#include "base/clock.h"
#include "base/wire.h"
#include "incmoe/incmoe.h"
}

namespace
{

/* ------------------------------------------------------------------------ */
/* the tree's reduction order, as a reference independent of the switch      */

/* A tree of switches and where each rank of one job connects.  parent[s] < s and switch 0 is
   the root, so starting the switches in index order starts every parent before its children. */
struct Topology {
    std::vector<int> parent; /* per switch; -1 for the root */
    std::vector<int> at;     /* per rank of the job: the switch it connects to */
};

enum PortKind { RANK_PORT, CHILD_PORT, PARENT_PORT };

/* A port of a switch: a rank connected to it, a child switch, or its parent. */
struct Port {
    PortKind kind;
    int peer;                 /* the rank (RANK_PORT) or the switch (CHILD_PORT, PARENT_PORT) */
    int key;                  /* the lowest rank the port covers */
    std::vector<bool> covers; /* per rank of the job: does the port cover it */
};

/*
 * The ports of every switch for one job, in ascending key order.  A rank port covers its rank,
 * a child port every rank beneath the child, the parent port every rank not beneath the switch;
 * a port that covers no rank of the job carries nothing and is left out.
 */
class TreeOrder
{
  public:
    explicit TreeOrder(const Topology &t) : parent_(t.parent), at_(t.at)
    {
        const int ns = (int)t.parent.size(), n = (int)t.at.size();
        std::vector<std::vector<bool>> beneath(ns, std::vector<bool>(n, false));
        for (int r = 0; r < n; r++)
            for (int s = t.at[r]; s != -1; s = t.parent[s])
                beneath[s][r] = true;
        ports_.resize(ns);
        for (int s = 0; s < ns; s++) {
            for (int r = 0; r < n; r++) {
                if (t.at[r] != s)
                    continue;
                std::vector<bool> just(n, false);
                just[r] = true;
                ports_[s].push_back({RANK_PORT, r, r, just});
            }
            for (int c = 0; c < ns; c++) {
                if (t.parent[c] != s)
                    continue;
                int key = lowest(beneath[c], true);
                if (key >= 0)
                    ports_[s].push_back({CHILD_PORT, c, key, beneath[c]});
            }
            int key = lowest(beneath[s], false);
            if (t.parent[s] != -1 && key >= 0) {
                std::vector<bool> beyond(n);
                for (int r = 0; r < n; r++)
                    beyond[r] = !beneath[s][r];
                ports_[s].push_back({PARENT_PORT, t.parent[s], key, beyond});
            }
            std::sort(ports_[s].begin(), ports_[s].end(),
                      [](const Port &a, const Port &b) { return a.key < b.key; });
        }
    }
    const std::vector<Port> &ports(int s) const
    {
        return ports_[s];
    }
    int switch_of(int rank) const
    {
        return at_[rank];
    }
    int nranks() const
    {
        return (int)at_.size();
    }
    int root() const
    {
        return (int)(std::find(parent_.begin(), parent_.end(), -1) - parent_.begin());
    }

  private:
    static int lowest(const std::vector<bool> &in, bool want)
    {
        for (size_t r = 0; r < in.size(); r++)
            if (in[r] == want)
                return (int)r;
        return -1;
    }
    std::vector<int> parent_, at_;
    std::vector<std::vector<Port>> ports_;
};

/* The arithmetic of one element type: what a switch accumulates in (fp32 for the 16-bit
   floats), and the inputs the tests use. */
template <typename E, typename A> struct ArithBase {
    using T = E;   /* the element as it sits in a buffer */
    using Acc = A; /* what a reduction accumulates in */
    static A apply(incmoe_redop_t op, A a, A b)
    {
        return ref_op::apply<A>(op, a, b);
    }
};

/* splitmix64: the inputs are a function of (seed, rank, block, element), so any rank can
   regenerate any other rank's data for its reference. */
uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t input_hash(uint64_t seed, int rank, int block, size_t i)
{
    return mix(mix(mix(seed) ^ (uint64_t)rank) ^ ((uint64_t)block << 32 | (uint64_t)i));
}

/* A value in [-16, 16) with a spread of exponents, so sums in different orders round apart. */
double spread_value(uint64_t h)
{
    return std::ldexp((double)(h >> 11) / 9007199254740992.0 * 2 - 1, (int)(h & 7) - 3);
}

/* A type that accumulates in itself: widen and narrow keep a value as it is; its inputs are
   spread values (a type of integers says its own). */
template <typename E> struct SelfArith : ArithBase<E, E> {
    static E widen(E x)
    {
        return x;
    }
    static E narrow(E a)
    {
        return a;
    }
    static E input(uint64_t h)
    {
        return (E)spread_value(h);
    }
};

struct F32 : SelfArith<float> {
    static constexpr const char *name = "float32";
    static constexpr incmoe_dtype_t dtype = INCMOE_FLOAT32;
    static constexpr double unit_roundoff = 0x1p-24;
};

struct F64 : SelfArith<double> {
    static constexpr const char *name = "float64";
    static constexpr incmoe_dtype_t dtype = INCMOE_FLOAT64;
    static constexpr double unit_roundoff = 0x1p-53;
};

/* Signed sums wrap (two's complement), so every order gives the same bits. */
struct I32 : SelfArith<int32_t> {
    static constexpr const char *name = "int32";
    static constexpr incmoe_dtype_t dtype = INCMOE_INT32;
    static constexpr double unit_roundoff = 0;
    static int32_t apply(incmoe_redop_t op, int32_t a, int32_t b)
    {
        if (op == INCMOE_SUM)
            return (int32_t)((uint32_t)a + (uint32_t)b);
        return ArithBase::apply(op, a, b);
    }
    static int32_t input(uint64_t h)
    {
        return (int32_t)(uint32_t)(h >> 32);
    }
};

/* bfloat16 as its bits: the top half of an fp32, rounded to nearest even. */
struct BF16 : ArithBase<uint16_t, float> {
    static constexpr const char *name = "bfloat16";
    static constexpr incmoe_dtype_t dtype = INCMOE_BFLOAT16;
    static constexpr double unit_roundoff = 0x1p-8;
    static float widen(uint16_t x)
    {
        uint32_t u = (uint32_t)x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t narrow(float a)
    {
        uint32_t u;
        memcpy(&u, &a, 4);
        uint32_t lower = u & 0xffffu, upper = u >> 16;
        if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
            upper++;
        return (uint16_t)upper;
    }
    static uint16_t input(uint64_t h)
    {
        return narrow((float)spread_value(h));
    }
};

/* IEEE binary16 as its bits, converted by the compiler's _Float16. */
struct F16 : ArithBase<uint16_t, float> {
    static constexpr const char *name = "float16";
    static constexpr incmoe_dtype_t dtype = INCMOE_FLOAT16;
    static constexpr double unit_roundoff = 0x1p-11;
    static float widen(uint16_t x)
    {
        return ref_half::to_float(x);
    }
    static uint16_t narrow(float a)
    {
        return ref_half::from_float(a);
    }
    static uint16_t input(uint64_t h)
    {
        return narrow((float)spread_value(h));
    }
};

/* One reduction step, at a switch or at a rank: op over vals in the order given, accumulated in
   A::Acc and rounded to the element type once at the end. */
template <class A> typename A::T fold(incmoe_redop_t op, const typename A::T *vals, int n)
{
    if (n < 1)
        throw std::logic_error("a reduction over no port");
    typename A::Acc acc = A::widen(vals[0]);
    for (int k = 1; k < n; k++)
        acc = A::apply(op, acc, A::widen(vals[k]));
    return A::narrow(acc);
}

const int kMaxRanks = 16; /* the most ranks (and so ports) of a job in this suite */

template <class A>
typename A::T side_partial(const TreeOrder &t, int s, int toward, const typename A::T *in,
                           incmoe_redop_t op);

/* Rule "a port's partial" (ReduceScatter): what port p of switch s brings to one block, from
   in[q], rank q's partial for that block.  A rank port: that rank's partial.  A child port: the
   child's reduction over its ports but its parent port.  The parent port: the parent's reduction
   over its ports but the one toward s (its own parent port included). */
template <class A>
typename A::T port_partial(const TreeOrder &t, int s, const Port &p, const typename A::T *in,
                           incmoe_redop_t op)
{
    if (p.kind == RANK_PORT)
        return in[p.peer];
    return side_partial<A>(t, p.peer, s, in, op);
}

/* Rule "a switch's side": the reduction at switch s, in ascending key order, over the partials
   of its ports except the one toward switch `toward`. */
template <class A>
typename A::T side_partial(const TreeOrder &t, int s, int toward, const typename A::T *in,
                           incmoe_redop_t op)
{
    typename A::T vals[kMaxRanks];
    int n = 0;
    for (const Port &p : t.ports(s))
        if (p.kind == RANK_PORT || p.peer != toward)
            vals[n++] = port_partial<A>(t, s, p, in, op);
    return fold<A>(op, vals, n);
}

/* A ReduceScatter root's block: the others' n partials folded, then the root's own applied last
   (its own alone where there are no others). */
template <class A>
typename A::T root_last(const typename A::T *others, int n, typename A::T own, incmoe_redop_t op)
{
    if (n == 0)
        return own;
    typename A::T last[2] = {fold<A>(op, others, n), own};
    return fold<A>(op, last, 2);
}

/* Rule "ReduceScatter over a tree": root r's block is reduced at r's switch over its ports but
   r's own, in ascending key order, then r applies its own partial last. */
template <class A>
typename A::T rs_tree(const TreeOrder &t, int r, const typename A::T *in, incmoe_redop_t op)
{
    const int s = t.switch_of(r);
    typename A::T vals[kMaxRanks];
    int n = 0;
    for (const Port &p : t.ports(s))
        if (!(p.kind == RANK_PORT && p.peer == r))
            vals[n++] = port_partial<A>(t, s, p, in, op);
    return root_last<A>(vals, n, in[r], op);
}

/* Rule "AllReduce up": switch s reduces its ports but the parent, in ascending key order: a
   rank port's vector, a child's own such reduction. */
template <class A>
typename A::T ar_up(const TreeOrder &t, int s, const typename A::T *in, incmoe_redop_t op)
{
    typename A::T vals[kMaxRanks];
    int n = 0;
    for (const Port &p : t.ports(s)) {
        if (p.kind == RANK_PORT)
            vals[n++] = in[p.peer];
        else if (p.kind == CHILD_PORT)
            vals[n++] = ar_up<A>(t, p.peer, in, op);
    }
    return fold<A>(op, vals, n);
}

/* Rule "AllReduce over a tree": the root's reduction goes down unchanged to every rank. */
template <class A>
typename A::T ar_tree(const TreeOrder &t, const typename A::T *in, incmoe_redop_t op)
{
    return ar_up<A>(t, t.root(), in, op);
}

/* The one-switch orders: ReduceScatter reduces the other ranks ascending, then the root applies
   its own partial last; AllReduce reduces every rank ascending. */
template <class A> typename A::T rs_flat(int r, int n, const typename A::T *in, incmoe_redop_t op)
{
    typename A::T others[kMaxRanks];
    int k = 0;
    for (int q = 0; q < n; q++)
        if (q != r)
            others[k++] = in[q];
    return root_last<A>(others, k, in[r], op);
}

template <class A> typename A::T ar_flat(int n, const typename A::T *in, incmoe_redop_t op)
{
    return fold<A>(op, in, n);
}

/* Tree and one-switch results agree within the type's rounding: each differs from the exact
   result by at most about (n + levels) unit roundoffs of the sum of magnitudes.  Integers, max
   and min are exact whatever the order. */
template <class A>
bool close_to_flat(typename A::T tree, typename A::T flat, const typename A::T *in, int n,
                   incmoe_redop_t op)
{
    if (A::unit_roundoff == 0 || op == INCMOE_MAX || op == INCMOE_MIN)
        return memcmp(&tree, &flat, sizeof(tree)) == 0;
    double mag = 0;
    for (int k = 0; k < n; k++)
        mag += std::fabs((double)A::widen(in[k]));
    double diff = std::fabs((double)A::widen(tree) - (double)A::widen(flat));
    return diff <= (2.0 * n + 8) * A::unit_roundoff * mag;
}

/* Does a port's side hold a rank of the set (bit r: rank r)? */
bool meets(const Port &p, uint64_t set)
{
    for (size_t r = 0; r < p.covers.size(); r++)
        if (p.covers[r] && ((set >> r) & 1))
            return true;
    return false;
}

/* Rule "a combine's far side": switch sw's reduction, in ascending key order, over its ports but
   the one toward switch `toward` whose side holds a rank of the set: a rank port's partial
   in[rank], a switch port's own far side.  false if no port's side holds one. */
template <class A>
bool dc_far_side(const TreeOrder &t, int sw, int toward, uint64_t set, const typename A::T *in,
                 incmoe_redop_t op, typename A::T *out)
{
    typename A::T vals[kMaxRanks];
    int n = 0;
    for (const Port &p : t.ports(sw)) {
        if ((p.kind != RANK_PORT && p.peer == toward) || !meets(p, set))
            continue;
        if (p.kind == RANK_PORT)
            vals[n++] = in[p.peer];
        else if (dc_far_side<A>(t, p.peer, sw, set, in, op, &vals[n]))
            n++;
    }
    if (n == 0)
        return false;
    *out = fold<A>(op, vals, n);
    return true;
}

/* Owner s's combined row from the others' n values: folded, then s's own partial op them last if
   the set holds s; s's own partial, or zeros, where there are no others. */
template <class A>
typename A::T owner_last(int s, uint64_t set, const typename A::T *others, int n,
                         const typename A::T *in, incmoe_redop_t op)
{
    const bool own = (set >> s) & 1;
    if (n == 0)
        return own ? in[s] : typename A::T();
    typename A::T folded = fold<A>(op, others, n);
    if (!own)
        return folded;
    typename A::T last[2] = {in[s], folded}; /* the owner: its own partial op the others' */
    return fold<A>(op, last, 2);
}

/* Rule "a combined row over a tree": owner s's row whose set is `set`, from in[d], rank d's
   partial of it: s's switch reduces, in ascending key order, its ports but s's own whose side
   holds a rank of the set (a rank port its partial, a switch port its far side), and s applies
   its own partial last if the set holds s.  A row whose set holds no other rank: s's own
   partial, or zeros for an empty set. */
template <class A>
typename A::T dc_tree(const TreeOrder &t, int s, uint64_t set, const typename A::T *in,
                      incmoe_redop_t op)
{
    const int sw = t.switch_of(s);
    typename A::T vals[kMaxRanks];
    int n = 0;
    for (const Port &p : t.ports(sw)) {
        if ((p.kind == RANK_PORT && p.peer == s) || !meets(p, set))
            continue;
        if (p.kind == RANK_PORT)
            vals[n++] = in[p.peer];
        else if (dc_far_side<A>(t, p.peer, sw, set, in, op, &vals[n]))
            n++;
    }
    return owner_last<A>(s, set, vals, n, in, op);
}

/* The one-switch order: the others in the set in ascending rank order, the owner's last. */
template <class A>
typename A::T dc_flat(int s, int n, uint64_t set, const typename A::T *in, incmoe_redop_t op)
{
    typename A::T others[kMaxRanks];
    int k = 0;
    for (int d = 0; d < n; d++)
        if (d != s && ((set >> d) & 1))
            others[k++] = in[d];
    return owner_last<A>(s, set, others, k, in, op);
}

/* ------------------------------------------------------------------------ */
/* the shapes                                                                */

/* Root 0 over leaves 1 and 2; ranks 0, 1 on leaf 1 and 2, 3 on leaf 2. */
Topology two_leaves_of_two()
{
    return {{-1, 0, 0}, {1, 1, 2, 2}};
}
/* Root 0 over leaves 1, 2, 3 with 3, 1 and 2 ranks. */
Topology uneven_three_one_two()
{
    return {{-1, 0, 0, 0}, {1, 1, 1, 2, 3, 3}};
}
/* Leaf 1 holds ranks 0, 2, 5 and leaf 2 ranks 1, 3, 4: a parent port's key falls between a
   leaf's rank ports. */
Topology interleaved()
{
    return {{-1, 0, 0}, {1, 2, 1, 2, 2, 1}};
}
/* Root 0, mids 1 and 2, leaves 3, 4 under mid 1 and 5, 6 under mid 2; leaf 3 holds ranks 0 and
   4, leaf 4 rank 2, leaf 5 ranks 1 and 5, leaf 6 rank 3. */
Topology three_levels()
{
    return {{-1, 0, 0, 1, 1, 2, 2}, {3, 5, 4, 6, 3, 5}};
}

/* ------------------------------------------------------------------------ */
/* the reference checked against orders derived by hand                      */

/* Inputs of every rank for one element: the reference's argument. */
template <class A> std::vector<typename A::T> inputs(uint64_t seed, int n, int block, size_t i)
{
    std::vector<typename A::T> in(n);
    for (int q = 0; q < n; q++)
        in[q] = A::input(input_hash(seed, q, block, i));
    return in;
}

TEST(TreeOrderReference, OneSwitchIsTheFlatOrder)
{
    TreeOrder t(Topology{{-1}, {0, 0, 0, 0, 0}});
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(1, 5, 0, i);
        float x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3], x4 = in[4];
        EXPECT_EQ(rs_tree<F32>(t, 2, in.data(), INCMOE_SUM), (((x0 + x1) + x3) + x4) + x2);
        EXPECT_EQ(ar_tree<F32>(t, in.data(), INCMOE_SUM), (((x0 + x1) + x2) + x3) + x4);
        for (int r = 0; r < 5; r++)
            EXPECT_EQ(rs_tree<F32>(t, r, in.data(), INCMOE_SUM),
                      rs_flat<F32>(r, 5, in.data(), INCMOE_SUM));
    }
}

TEST(TreeOrderReference, TwoLeavesReduceEachLeafThenTheOther)
{
    TreeOrder t(two_leaves_of_two());
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(2, 4, 0, i);
        float x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3];
        /* Root 0 at leaf 1: rank port 1 (key 1), then the parent port (key 2) bringing leaf 2's
           reduction; rank 0's own last. */
        EXPECT_EQ(rs_tree<F32>(t, 0, in.data(), INCMOE_SUM), (x1 + (x2 + x3)) + x0);
        /* Root 2 at leaf 2: the parent port (key 0) first, then rank port 3. */
        EXPECT_EQ(rs_tree<F32>(t, 2, in.data(), INCMOE_SUM), ((x0 + x1) + x3) + x2);
        EXPECT_EQ(ar_tree<F32>(t, in.data(), INCMOE_SUM), (x0 + x1) + (x2 + x3));
        /* bfloat16: each switch rounds what it sends on. */
        auto b = inputs<BF16>(2, 4, 0, i);
        float b0 = BF16::widen(b[0]), b1 = BF16::widen(b[1]), b2 = BF16::widen(b[2]),
              b3 = BF16::widen(b[3]);
        auto rnd = [](float f) { return BF16::widen(BF16::narrow(f)); };
        EXPECT_EQ(rs_tree<BF16>(t, 0, b.data(), INCMOE_SUM),
                  BF16::narrow(rnd(b1 + rnd(b2 + b3)) + b0));
        EXPECT_EQ(ar_tree<BF16>(t, b.data(), INCMOE_SUM),
                  BF16::narrow(rnd(b0 + b1) + rnd(b2 + b3)));
    }
}

TEST(TreeOrderReference, InterleavedLeavesOrderTheParentPortByItsKey)
{
    TreeOrder t(interleaved());
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(3, 6, 0, i);
        float x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3], x4 = in[4], x5 = in[5];
        /* Root 0 at leaf 1 = {0, 2, 5}: the parent port (key 1) brings ((x1 + x3) + x4), then
           rank ports 2 and 5. */
        EXPECT_EQ(rs_tree<F32>(t, 0, in.data(), INCMOE_SUM), ((((x1 + x3) + x4) + x2) + x5) + x0);
        /* Root 3 at leaf 2 = {1, 3, 4}: the parent port (key 0) first, then ranks 1 and 4. */
        EXPECT_EQ(rs_tree<F32>(t, 3, in.data(), INCMOE_SUM), ((((x0 + x2) + x5) + x1) + x4) + x3);
        EXPECT_EQ(ar_tree<F32>(t, in.data(), INCMOE_SUM), ((x0 + x2) + x5) + ((x1 + x3) + x4));
    }
}

TEST(TreeOrderReference, ThreeLevelsRecurseThroughTheMids)
{
    TreeOrder t(three_levels());
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(4, 6, 0, i);
        float x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3], x4 = in[4], x5 = in[5];
        /* Root 2 alone on leaf 4: its parent port brings mid 1's reduction over leaf 3 (key 0)
           and mid 1's parent port (key 1), which brings mid 2's reduction of leaves 5 and 6. */
        EXPECT_EQ(rs_tree<F32>(t, 2, in.data(), INCMOE_SUM), ((x0 + x4) + ((x1 + x5) + x3)) + x2);
        /* Root 4 on leaf 3 with rank 0: rank port 0, then the parent port (key 1), where mid 1
           reduces its parent port (key 1) and leaf 4 (key 2). */
        EXPECT_EQ(rs_tree<F32>(t, 4, in.data(), INCMOE_SUM), (x0 + (((x1 + x5) + x3) + x2)) + x4);
        EXPECT_EQ(ar_tree<F32>(t, in.data(), INCMOE_SUM), ((x0 + x4) + x2) + ((x1 + x5) + x3));
    }
}

/* A job wholly under one leaf meets nothing above it: its results are the one-switch ones. */
TEST(TreeOrderReference, AJobUnderOneLeafHasTheOneSwitchOrder)
{
    TreeOrder t(Topology{{-1, 0, 0}, {2, 2, 2}});
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(5, 3, 0, i);
        for (int r = 0; r < 3; r++)
            EXPECT_EQ(rs_tree<F32>(t, r, in.data(), INCMOE_SUM),
                      rs_flat<F32>(r, 3, in.data(), INCMOE_SUM));
        EXPECT_EQ(ar_tree<F32>(t, in.data(), INCMOE_SUM), ar_flat<F32>(3, in.data(), INCMOE_SUM));
    }
}

/* The suite's data tells the tree order from the one-switch order on every shape it runs, so a
   switch that reduced in the flat order would fail the tests below, not pass them by luck.  (For
   some roots the two orders coincide, e.g. root 2 of two leaves of two: the parent port's
   partial comes first there, as ranks 0 and 1 would.) */
TEST(TreeOrderReference, TheTestDataTellsTheTreeOrderFromTheFlatOrder)
{
    for (const Topology &topo :
         {two_leaves_of_two(), uneven_three_one_two(), interleaved(), three_levels()}) {
        TreeOrder t(topo);
        const int n = t.nranks();
        int rs_differ = 0, ar_differ = 0;
        for (size_t i = 0; i < 200; i++) {
            for (int r = 0; r < n; r++) {
                auto in = inputs<F32>(6, n, r, i);
                rs_differ += rs_tree<F32>(t, r, in.data(), INCMOE_SUM) !=
                             rs_flat<F32>(r, n, in.data(), INCMOE_SUM);
            }
            auto in = inputs<F32>(7, n, 0, i);
            ar_differ +=
                ar_tree<F32>(t, in.data(), INCMOE_SUM) != ar_flat<F32>(n, in.data(), INCMOE_SUM);
        }
        EXPECT_GT(rs_differ, 0) << "reducescatter on a " << n << "-rank shape";
        EXPECT_GT(ar_differ, 0) << "allreduce on a " << n << "-rank shape";
    }
}

/* A combined row: the far side of each port reduces only the ranks of the row's set, and a port
   none of whose ranks are in it brings nothing. */
TEST(TreeOrderReference, ACombinedRowFoldsOnlyThePortsItsSetNames)
{
    TreeOrder two(two_leaves_of_two()), inter(interleaved()), three(three_levels());
    for (size_t i = 0; i < 1000; i++) {
        auto in = inputs<F32>(8, 6, 0, i);
        float x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3], x4 = in[4], x5 = in[5];
        /* Owner 0 at leaf 1 = {0, 1}: rank port 1, then the parent port (key 2) bringing leaf 2's
           ranks of the set. */
        EXPECT_EQ(dc_tree<F32>(two, 0, 0xe, in.data(), INCMOE_SUM), x1 + (x2 + x3));
        EXPECT_EQ(dc_tree<F32>(two, 0, 0x5, in.data(), INCMOE_SUM), x0 + x2);
        EXPECT_EQ(dc_tree<F32>(two, 3, 0x8, in.data(), INCMOE_SUM), x3);
        EXPECT_EQ(dc_tree<F32>(two, 3, 0x0, in.data(), INCMOE_SUM), 0.0f);
        /* Owner 0 at leaf 1 = {0, 2, 5}, set {1, 2, 4, 5}: the parent port (key 1) brings leaf
           2's ranks 1 and 4, then rank ports 2 and 5. */
        EXPECT_EQ(dc_tree<F32>(inter, 0, 0x36, in.data(), INCMOE_SUM), ((x1 + x4) + x2) + x5);
        /* Owner 2 alone on leaf 4, set {0, 1, 2, 3}: its parent port brings mid 1's leaf 3
           (rank 0) and mid 1's parent port (key 1), which brings mid 2's leaves 5 (rank 1) and
           6 (rank 3); owner 2's own last. */
        EXPECT_EQ(dc_tree<F32>(three, 2, 0xf, in.data(), INCMOE_SUM), x2 + (x0 + (x1 + x3)));
        /* Owner 5 on leaf 5 = {1, 5}, set {0, 3, 4}: its parent port (key 0) brings mid 2's
           parent port (mid 1's leaf 3: ranks 0 and 4) and then leaf 6 (rank 3). */
        EXPECT_EQ(dc_tree<F32>(three, 5, 0x19, in.data(), INCMOE_SUM), (x0 + x4) + x3);
        EXPECT_EQ(dc_flat<F32>(5, 6, 0x19, in.data(), INCMOE_SUM), (x0 + x3) + x4);
    }
}

/* ------------------------------------------------------------------------ */
/* a tree of switch processes, and the ranks of a job on it                  */

const int kJobTimeoutMs = 2000;    /* the liveness timeout of every switch and fault job */
const int kProgressMs = 5000;      /* a collective some rank never posts fails its job in 5 s */
const int kCreateTimeoutMs = 8000; /* the join of a healthy job on a busy 2-core machine */

struct Tree {
    std::vector<harness::SwitchProc> sw;
};

/* The options every switch of a tree gets: short timeouts and the chunk size. */
std::vector<std::string> tree_args(uint64_t chunk, std::vector<std::string> more = {})
{
    std::vector<std::string> a = {"--timeout-ms",          std::to_string(kJobTimeoutMs),
                                  "--progress-timeout-ms", std::to_string(kProgressMs),
                                  "--chunk-size",          std::to_string(chunk)};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

/* Starts the switches of topo, parents first, switch s with args and its own[s] (if given), and
   --parent for every switch but the root. */
bool tree_start(Tree *tree, const Topology &topo, const std::vector<std::string> &args,
                const std::vector<std::vector<std::string>> &own = {})
{
    tree->sw.assign(topo.parent.size(), harness::SwitchProc{});
    for (size_t s = 0; s < topo.parent.size(); s++) {
        std::vector<std::string> a = args;
        if (s < own.size())
            a.insert(a.end(), own[s].begin(), own[s].end());
        if (topo.parent[s] != -1) {
            a.push_back("--parent");
            a.push_back(tree->sw[topo.parent[s]].addr);
        }
        if (!harness::switch_start(&tree->sw[s], a))
            return false;
    }
    return true;
}

/* Whether a switch's process still runs (one that ended is reaped here). */
bool still_running(const harness::SwitchProc &sw)
{
    int status;
    return sw.pid > 0 && waitpid(sw.pid, &status, WNOHANG) == 0;
}

/* Stops the switches, children first; every one not in `killed` must exit cleanly. */
void tree_stop(Tree *tree, const std::vector<int> &killed = {})
{
    for (int s = (int)tree->sw.size() - 1; s >= 0; s--) {
        if (tree->sw[s].pid <= 0)
            continue;
        bool was_killed = std::find(killed.begin(), killed.end(), s) != killed.end();
        int status = harness::switch_stop(&tree->sw[s]);
        if (!was_killed) {
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
                << "switch " << s << " did not exit cleanly (status " << status << ")";
        }
    }
}

/* Memory the ranks of one run share with each other and with the test. */
struct Board {
    int arrived[kMaxRanks];    /* barrier rounds a rank is about to post */
    int in_barrier[kMaxRanks]; /* barrier rounds a rank has posted (and now waits on) */
    int posted;                /* ranks that posted the collective a fault interrupts */
    int progress;              /* ranks of the surviving job that reached the kill */
    int joined;                /* ranks that completed their join */
    int killed;                /* 1 once the victim was killed (killed_at is set) */
    double killed_at;          /* inc_now_s() just before the kill */
};

using harness::await_at_least;
using harness::load;
using harness::store;
using SharedBoard = harness::SharedBoard<Board>;

using harness::buffer;
using harness::comm_text;
using harness::destroy_then_free;
using harness::why;

/* One rank of a job on the tree, as a body sees it. */
struct Rank {
    incmoe_comm_t *comm;
    int me, n;
    const TreeOrder *order;
    uint64_t chunk; /* the switches' --chunk-size */
    Board *board;
};

/* Rank me of job `job` joins through its switch, topo.at[me]. */
incmoe_status_t create_on(const Tree &tree, const Topology &topo, unsigned long long job, int me,
                          int timeout_ms, incmoe_comm_t **comm)
{
    harness::CommOptions opt;
    opt.timeout_ms = timeout_ms;
    return harness::comm_create(tree.sw[topo.at[me]].addr, job, me, (int)topo.at.size(), comm, opt);
}

/* Rank me of job `job` joins with timeout_ms, runs body, and leaves; "" if it all passed (a job
   that fails on purpose leaves with its error: then only the body's verdict counts). */
std::string as_rank(const Tree &tree, const Topology &topo, unsigned long long job, int me,
                    int timeout_ms, const TreeOrder *order, uint64_t chunk, Board *board,
                    const std::function<std::string(Rank &)> &body, bool fails = false)
{
    incmoe_comm_t *comm;
    incmoe_status_t st = create_on(tree, topo, job, me, timeout_ms, &comm);
    if (st != INCMOE_OK)
        return std::string("comm_create: ") + incmoe_strerror(st);
    Rank r = {comm, me, (int)topo.at.size(), order, chunk, board};
    std::string err = body(r);
    st = destroy_then_free(comm);
    if (err.empty() && st != INCMOE_OK && !fails)
        err = std::string("comm_destroy: ") + incmoe_strerror(st);
    return err;
}

/* Runs body on every rank of one fresh job placed by topo.at; "" per rank that passed. */
std::vector<std::string> run_job(const Tree &tree, const Topology &topo, uint64_t chunk,
                                 const std::function<std::string(Rank &)> &body,
                                 Board *board = nullptr, int timeout_s = 60)
{
    unsigned long long job = harness::unique_job_id();
    TreeOrder order(topo);
    auto rank_main = [&](int me) {
        return as_rank(tree, topo, job, me, kCreateTimeoutMs, &order, chunk, board, body);
    };
    return harness::run_ranks((int)topo.at.size(), rank_main, timeout_s);
}

/* ------------------------------------------------------------------------ */
/* the collectives, checked against the references                           */

/* Does the collective take the form the caller meant (base/wire.h, "Small collectives")? */
std::string expect_form(incmoe_stream_t stream, const std::vector<uint64_t> &bytes, uint64_t chunk,
                        bool small, const std::string &what)
{
    if ((inc_wire_is_small(stream, bytes.data(), (int)bytes.size(), chunk) != 0) == small)
        return "";
    return what + " would not take the " + (small ? "small" : "chunked") + " form";
}

std::string hex(const void *p, size_t len)
{
    std::ostringstream o;
    o << "0x";
    for (size_t k = len; k-- > 0;) {
        char b[3];
        snprintf(b, sizeof(b), "%02x", ((const unsigned char *)p)[k]);
        o << b;
    }
    return o.str();
}

const unsigned char kCanary = 0xA5;

/*
 * An AllGather of blocks of unequal length, some empty (valid[b]: max_bytes less 5 b bytes, none
 * for b = 1 mod 3): every block arrives bitwise from its rank, and nothing past a block's valid
 * bytes is written.
 */
std::string check_allgather(Rank &r, size_t max_bytes, bool small, uint64_t seed)
{
    const int n = r.n;
    const size_t stride = max_bytes;
    std::vector<size_t> valid(n);
    std::vector<uint64_t> bytes(n);
    for (int b = 0; b < n; b++)
        bytes[b] = valid[b] = b % 3 == 1 ? 0 : max_bytes - 5 * (size_t)b;
    std::string e = expect_form(INCMOE_STREAM_ALLGATHER, bytes, r.chunk, small, "the allgather");
    if (!e.empty())
        return e;
    auto byte_of = [&](int rank, size_t i) { return (unsigned char)input_hash(seed, rank, 0, i); };
    auto &own = buffer<unsigned char>(stride);
    auto &gathered = buffer<unsigned char>(stride * n, kCanary);
    for (size_t i = 0; i < valid[r.me]; i++)
        own[i] = byte_of(r.me, i);
    incmoe_mr_t *mo, *mg;
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, own.data(), own.size(), &mo));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, gathered.data(), gathered.size(), &mg));
    incmoe_layout_t l = {stride, 0, stride, valid.data()};
    incmoe_req_t req;
    CHECK_OK_ON(r.comm, incmoe_allgather(r.comm, mo, 0, mg, 0, &l, &req));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &req));
    for (int b = 0; b < n; b++)
        for (size_t i = 0; i < stride; i++) {
            unsigned char got = gathered[b * stride + i];
            unsigned char want = i < valid[b] ? byte_of(b, i) : kCanary;
            if (got != want)
                return "allgather of " + std::to_string(max_bytes) + " bytes, block " +
                       std::to_string(b) + " byte " + std::to_string(i) + ": got " +
                       std::to_string(got) + " want " + std::to_string(want) +
                       (i < valid[b] ? "" : " (outside the block's valid bytes)");
        }
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mo));
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mg));
    return "";
}

/* Element i of this rank's ReduceScatter result, against both orders. */
template <class A>
std::string check_rs_element(const Rank &r, const typename A::T &got, uint64_t seed, size_t i,
                             incmoe_redop_t op)
{
    auto in = inputs<A>(seed, r.n, r.me, i);
    typename A::T want = rs_tree<A>(*r.order, r.me, in.data(), op);
    if (memcmp(&got, &want, sizeof(got)) != 0)
        return std::string("reducescatter ") + A::name + " " + incmoe_redop_name(op) + " element " +
               std::to_string(i) + ": got " + hex(&got, sizeof(got)) + " want " +
               hex(&want, sizeof(want)) + " (the tree order)";
    typename A::T flat = rs_flat<A>(r.me, r.n, in.data(), op);
    if (!close_to_flat<A>(got, flat, in.data(), r.n, op))
        return std::string("reducescatter ") + A::name + " element " + std::to_string(i) +
               " is not within rounding of the one-switch result";
    return "";
}

/* Element i of the AllReduce result, against both orders. */
template <class A>
std::string check_ar_element(const Rank &r, const typename A::T &got, uint64_t seed, size_t i,
                             incmoe_redop_t op)
{
    auto in = inputs<A>(seed, r.n, 0, i);
    typename A::T want = ar_tree<A>(*r.order, in.data(), op);
    if (memcmp(&got, &want, sizeof(got)) != 0)
        return std::string("allreduce ") + A::name + " " + incmoe_redop_name(op) + " element " +
               std::to_string(i) + ": got " + hex(&got, sizeof(got)) + " want " +
               hex(&want, sizeof(want)) + " (the tree order)";
    typename A::T flat = ar_flat<A>(r.n, in.data(), op);
    if (!close_to_flat<A>(got, flat, in.data(), r.n, op))
        return std::string("allreduce ") + A::name + " element " + std::to_string(i) +
               " is not within rounding of the one-switch result";
    return "";
}

/*
 * A ReduceScatter of `count` elements per block and an AllReduce of `count` elements, of type
 * A with op, in flight together; each must take the form asked (small or chunked).  The
 * results are checked element by element, and an element past each result must stay untouched.
 */
template <class A>
std::string check_reductions(Rank &r, size_t count, incmoe_redop_t op, bool rs_small, bool ar_small,
                             uint64_t seed)
{
    using T = typename A::T;
    const size_t es = sizeof(T);
    const uint64_t ar_seed = seed ^ 0xa11edu;
    std::string what = std::string(A::name) + " " + incmoe_redop_name(op) + " of " +
                       std::to_string(count) + " elements";
    std::string e = expect_form(INCMOE_STREAM_REDUCESCATTER, std::vector<uint64_t>(r.n, count * es),
                                r.chunk, rs_small, "the reducescatter " + what);
    if (e.empty())
        e = expect_form(INCMOE_STREAM_ALLREDUCE, std::vector<uint64_t>(r.n, count * es), r.chunk,
                        ar_small, "the allreduce " + what);
    if (!e.empty())
        return e;
    auto &send = buffer<T>(count * r.n);
    auto &recv = buffer<T>(count + 1);
    auto &vec = buffer<T>(count);
    auto &out = buffer<T>(count + 1);
    for (int b = 0; b < r.n; b++)
        for (size_t i = 0; i < count; i++)
            send[b * count + i] = A::input(input_hash(seed, r.me, b, i));
    for (size_t i = 0; i < count; i++)
        vec[i] = A::input(input_hash(ar_seed, r.me, 0, i));
    memset(recv.data(), kCanary, recv.size() * es);
    memset(out.data(), kCanary, out.size() * es);
    incmoe_mr_t *ms, *mr, *mv, *mo;
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, send.data(), send.size() * es, &ms));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, recv.data(), recv.size() * es, &mr));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, vec.data(), vec.size() * es, &mv));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, out.data(), out.size() * es, &mo));
    incmoe_layout_t l = {count * es, 0, count * es, nullptr};
    incmoe_req_t rs, ar;
    CHECK_OK_ON(r.comm, incmoe_reducescatter(r.comm, ms, 0, mr, 0, &l, A::dtype, op, &rs));
    CHECK_OK_ON(r.comm, incmoe_allreduce(r.comm, mv, 0, mo, 0, count, A::dtype, op, &ar));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &rs));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &ar));
    for (size_t i = 0; i < count; i++) {
        if (!(e = check_rs_element<A>(r, recv[i], seed, i, op)).empty() ||
            !(e = check_ar_element<A>(r, out[i], ar_seed, i, op)).empty())
            return e;
    }
    const unsigned char *past_rs = (const unsigned char *)&recv[count];
    const unsigned char *past_ar = (const unsigned char *)&out[count];
    for (size_t k = 0; k < es; k++)
        if (past_rs[k] != kCanary || past_ar[k] != kCanary)
            return what + ": a result was written past its end";
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, ms));
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mr));
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mv));
    CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mo));
    return "";
}

/* The three forms of one type and op: both small; ReduceScatter one element per block past its
   small limit while the AllReduce stays small; both chunked, over several chunks. */
template <class A> std::string check_reduction_forms(Rank &r, incmoe_redop_t op, uint64_t seed)
{
    const size_t es = sizeof(typename A::T);
    const size_t small = r.chunk / (r.n * es), big = 3 * r.chunk / es + 3;
    std::string e = check_reductions<A>(r, small, op, true, true, seed);
    if (e.empty())
        e = check_reductions<A>(r, small + 1, op, false, true, seed + 1);
    if (e.empty())
        e = check_reductions<A>(r, big, op, false, false, seed + 2);
    return e;
}

/*
 * Two barriers, each with the last rank posting late: no rank's barrier completes before every
 * rank posted it (each rank marks its round in shared memory before it posts).
 */
std::string check_barrier(Rank &r, int late_rank)
{
    for (int round = 1; round <= 2; round++) {
        if (r.me == late_rank) /* posts only once every other rank has posted this round */
            for (int q = 0; q < r.n; q++)
                if (q != late_rank && !await_at_least(&r.board->in_barrier[q], round))
                    return "rank " + std::to_string(q) + " never posted barrier " +
                           std::to_string(round);
        store(&r.board->arrived[r.me], round);
        incmoe_req_t req;
        CHECK_OK_ON(r.comm, incmoe_barrier(r.comm, &req));
        store(&r.board->in_barrier[r.me], round);
        CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &req));
        for (int q = 0; q < r.n; q++)
            if (load(&r.board->arrived[q]) < round)
                return "barrier " + std::to_string(round) + " completed before rank " +
                       std::to_string(q) + " posted it";
    }
    return "";
}

/* check_reduction_forms of type A for each op in turn, the seeds 10 apart from seed. */
template <class A>
std::string check_ops(Rank &r, std::initializer_list<incmoe_redop_t> ops, uint64_t seed)
{
    for (incmoe_redop_t op : ops) {
        std::string e = check_reduction_forms<A>(r, op, seed);
        if (!e.empty())
            return e;
        seed += 10;
    }
    return "";
}

/* Every collective in both forms: AllGather; ReduceScatter and AllReduce of float32 (sum,
   max), float64 sum, int32 (sum, max), bfloat16 and float16 sum; the barrier. */
std::string every_collective(Rank &r, int late_rank)
{
    std::string e = check_allgather(r, r.chunk / (2 * r.n), true, 11);
    if (e.empty())
        e = check_allgather(r, 3 * r.chunk + 13, false, 12);
    if (e.empty())
        e = check_ops<F32>(r, {INCMOE_SUM, INCMOE_MAX}, 20);
    if (e.empty())
        e = check_ops<F64>(r, {INCMOE_SUM}, 40);
    if (e.empty())
        e = check_ops<I32>(r, {INCMOE_SUM, INCMOE_MAX}, 50);
    if (e.empty())
        e = check_ops<BF16>(r, {INCMOE_SUM}, 70);
    if (e.empty())
        e = check_ops<F16>(r, {INCMOE_SUM}, 80);
    if (e.empty())
        e = check_barrier(r, late_rank);
    return e;
}

const uint64_t kSmallChunk = 4096; /* both forms are reached with a few KiB */

/* Starts a tree of topo's switches, runs every collective on a job placed by topo, and stops the
   tree (every switch must exit cleanly). */
void every_collective_on(const Topology &topo, int late_rank)
{
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)))
        << "could not start the tree (does incmoe-switchd take --parent?)";
    SharedBoard board;
    ASSERT_NE(board.get(), nullptr);
    auto res = run_job(
        tree, topo, kSmallChunk, [&](Rank &r) { return every_collective(r, late_rank); },
        board.get());
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* A lone switch (no --parent) is a tree of one: the same checks hold it to today's one-switch
   order, which the tree must leave unchanged. */
TEST(Tree, OneSwitchKeepsTheOneSwitchOrder)
{
    every_collective_on({{-1}, {0, 0, 0, 0}}, 2);
}

TEST(Tree, TwoLeavesOfTwoRanksGiveTheTreeOrder)
{
    every_collective_on(two_leaves_of_two(), 3);
}

/* Leaves of 3, 1 and 2 ranks; the late barrier rank is the one alone on its leaf. */
TEST(Tree, UnevenLeavesAndALeafOfOneRankGiveTheTreeOrder)
{
    every_collective_on(uneven_three_one_two(), 3);
}

TEST(Tree, RanksInterleavedAcrossLeavesGiveTheTreeOrder)
{
    every_collective_on(interleaved(), 4);
}

TEST(Tree, ThreeLevelsGiveTheTreeOrder)
{
    every_collective_on(three_levels(), 2);
}

/* Ranks on the root and on a mid switch beside its child leaf: rank ports and switch ports
   interleave by key on inner switches too.  Root 0 holds rank 3; mid 1 (under the root) holds
   rank 0 and leaf 2 = {1, 4}; leaf 3 (under the root) holds rank 2. */
TEST(Tree, RanksOnInnerSwitchesFollowTheKeyOrderToo)
{
    every_collective_on({{-1, 0, 1, 0}, {1, 2, 3, 0, 2}}, 0);
}

/* A job wholly under one leaf of a two-leaf tree gets the one-switch results bitwise (the
   reference is the flat order there, see AJobUnderOneLeafHasTheOneSwitchOrder). */
TEST(Tree, AJobWhollyUnderOneLeafGivesTheOneSwitchResults)
{
    every_collective_on({{-1, 0, 0}, {2, 2, 2}}, 1);
}

/* One rank's buffers for an AllGather and a ReduceScatter of `block` floats per rank and an
   AllReduce of `vector` floats, their inputs drawn from the three seeds. */
struct Rounds {
    size_t block, vector;
    uint64_t ag_seed, rs_seed, ar_seed;
    std::vector<float> *own, *gathered, *partial, *reduced, *vec;
    incmoe_mr_t *mo, *mg, *mp, *mr, *mv;
};

/* Fills b's buffers with their inputs and registers them; "" or why not. */
std::string rounds_prepare(Rank &r, Rounds &b)
{
    b.own = &buffer<float>(b.block);
    b.gathered = &buffer<float>(b.block * r.n);
    b.partial = &buffer<float>(b.block * r.n);
    b.reduced = &buffer<float>(b.block);
    b.vec = &buffer<float>(b.vector);
    for (size_t i = 0; i < b.block; i++)
        (*b.own)[i] = F32::input(input_hash(b.ag_seed, r.me, 0, i));
    for (int q = 0; q < r.n; q++)
        for (size_t i = 0; i < b.block; i++)
            (*b.partial)[q * b.block + i] = F32::input(input_hash(b.rs_seed, r.me, q, i));
    for (size_t i = 0; i < b.vector; i++)
        (*b.vec)[i] = F32::input(input_hash(b.ar_seed, r.me, 0, i));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, b.own->data(), b.block * 4, &b.mo));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, b.gathered->data(), b.block * r.n * 4, &b.mg));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, b.partial->data(), b.block * r.n * 4, &b.mp));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, b.reduced->data(), b.block * 4, &b.mr));
    CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, b.vec->data(), b.vector * 4, &b.mv));
    return "";
}

/* Every result in b against the references; "" or the first that is wrong. */
std::string rounds_check(Rank &r, const Rounds &b)
{
    for (int q = 0; q < r.n; q++)
        for (size_t i = 0; i < b.block; i++)
            if ((*b.gathered)[q * b.block + i] != F32::input(input_hash(b.ag_seed, q, 0, i)))
                return "allgather block " + std::to_string(q) + " element " + std::to_string(i) +
                       " wrong";
    for (size_t i = 0; i < b.block; i++) {
        std::string e = check_rs_element<F32>(r, (*b.reduced)[i], b.rs_seed, i, INCMOE_SUM);
        if (!e.empty())
            return e;
    }
    for (size_t i = 0; i < b.vector; i++) {
        std::string e = check_ar_element<F32>(r, (*b.vec)[i], b.ar_seed, i, INCMOE_SUM);
        if (!e.empty())
            return e;
    }
    return "";
}

/*
 * AllGather and ReduceScatter band by band and an AllReduce, all posted before any is waited
 * for, each band over several chunks: the streams interleave across the tree and every result
 * is still the tree order's.
 */
TEST(Tree, AllGatherAndReduceScatterInFlightTogether)
{
    const Topology topo = interleaved();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    auto res = run_job(tree, topo, kSmallChunk, [](Rank &r) -> std::string {
        const size_t rows = 40, row = 301, bands = 5, band_rows = rows / bands; /* floats */
        const size_t stride = rows * row * 4, count = rows * row;
        Rounds b = {count, count, 90, 91, 92};
        std::string e = rounds_prepare(r, b);
        if (!e.empty())
            return e;
        std::vector<incmoe_req_t> reqs;
        for (size_t band = 0; band < bands; band++) {
            size_t off = band * band_rows * row * 4;
            incmoe_layout_t l = {stride, off, band_rows * row * 4, nullptr};
            incmoe_req_t ag, rs;
            CHECK_OK_ON(r.comm, incmoe_allgather(r.comm, b.mo, off, b.mg, 0, &l, &ag));
            CHECK_OK_ON(r.comm, incmoe_reducescatter(r.comm, b.mp, 0, b.mr, off, &l, INCMOE_FLOAT32,
                                                     INCMOE_SUM, &rs));
            reqs.push_back(ag);
            reqs.push_back(rs);
        }
        incmoe_req_t ar;
        CHECK_OK_ON(r.comm, incmoe_allreduce(r.comm, b.mv, 0, b.mv, 0, count, INCMOE_FLOAT32,
                                             INCMOE_SUM, &ar));
        reqs.push_back(ar);
        for (auto &q : reqs)
            CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &q));
        return rounds_check(r, b);
    });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* 300 rounds of a small AllGather, ReduceScatter and AllReduce with a barrier every 50, all
   posted before any is waited for; each result is checked (float32 sums: the tree order). */
TEST(Tree, HundredsOfBackToBackCollectives)
{
    const Topology topo = uneven_three_one_two();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    auto res = run_job(tree, topo, kSmallChunk, [](Rank &r) -> std::string {
        const int iters = 300;
        const uint64_t rs_seed = 100, ar_seed = 101;
        auto &send = buffer<int32_t>(iters);
        auto &gat = buffer<int32_t>((size_t)iters * r.n, -1);
        auto &part = buffer<float>((size_t)iters * r.n);
        auto &red = buffer<float>(iters);
        auto &vec = buffer<float>(iters);
        for (int k = 0; k < iters; k++) {
            send[k] = r.me * 100000 + k;
            vec[k] = F32::input(input_hash(ar_seed, r.me, 0, k));
            for (int b = 0; b < r.n; b++)
                part[(size_t)k * r.n + b] = F32::input(input_hash(rs_seed, r.me, b, k));
        }
        incmoe_mr_t *ms, *mg, *mp, *mr, *mv;
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, send.data(), send.size() * 4, &ms));
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, gat.data(), gat.size() * 4, &mg));
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, part.data(), part.size() * 4, &mp));
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, red.data(), red.size() * 4, &mr));
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, vec.data(), vec.size() * 4, &mv));
        std::vector<incmoe_req_t> reqs;
        for (int k = 0; k < iters; k++) {
            incmoe_layout_t l = {4, 0, 4, nullptr};
            incmoe_req_t ag, rs, ar, b;
            CHECK_OK_ON(r.comm,
                        incmoe_allgather(r.comm, ms, k * 4, mg, (size_t)k * r.n * 4, &l, &ag));
            CHECK_OK_ON(r.comm, incmoe_reducescatter(r.comm, mp, (size_t)k * r.n * 4, mr, k * 4, &l,
                                                     INCMOE_FLOAT32, INCMOE_SUM, &rs));
            CHECK_OK_ON(r.comm, incmoe_allreduce(r.comm, mv, k * 4, mv, k * 4, 1, INCMOE_FLOAT32,
                                                 INCMOE_SUM, &ar));
            reqs.insert(reqs.end(), {ag, rs, ar});
            if (k % 50 == 49) {
                CHECK_OK_ON(r.comm, incmoe_barrier(r.comm, &b));
                reqs.push_back(b);
            }
        }
        for (auto &q : reqs)
            CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &q));
        if (incmoe_stream_completed(r.comm, INCMOE_STREAM_ALLGATHER) != (uint64_t)iters ||
            incmoe_stream_completed(r.comm, INCMOE_STREAM_REDUCESCATTER) != (uint64_t)iters ||
            incmoe_stream_completed(r.comm, INCMOE_STREAM_ALLREDUCE) != (uint64_t)iters ||
            incmoe_stream_completed(r.comm, INCMOE_STREAM_BARRIER) != iters / 50)
            return "the stream counters do not match the collectives posted";
        for (int k = 0; k < iters; k++) {
            for (int b = 0; b < r.n; b++)
                if (gat[(size_t)k * r.n + b] != b * 100000 + k)
                    return "allgather " + std::to_string(k) + " block " + std::to_string(b) +
                           " wrong";
            std::string e = check_rs_element<F32>(r, red[k], rs_seed, k, INCMOE_SUM);
            if (e.empty())
                e = check_ar_element<F32>(r, vec[k], ar_seed, k, INCMOE_SUM);
            if (!e.empty())
                return "round " + std::to_string(k) + ": " + e;
        }
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* An AllGather and a ReduceScatter of `block` floats per rank in flight together, then an
   AllReduce of `vector` floats, each checked against the references. */
std::string big_rounds(Rank &r, size_t block, size_t vector)
{
    Rounds b = {block, vector, 110, 111, 112};
    std::string e = rounds_prepare(r, b);
    if (!e.empty())
        return e;
    incmoe_layout_t l = {block * 4, 0, block * 4, nullptr};
    incmoe_req_t ag, rs, ar;
    CHECK_OK_ON(r.comm, incmoe_allgather(r.comm, b.mo, 0, b.mg, 0, &l, &ag));
    CHECK_OK_ON(r.comm, incmoe_reducescatter(r.comm, b.mp, 0, b.mr, 0, &l, INCMOE_FLOAT32,
                                             INCMOE_SUM, &rs));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &ag));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &rs));
    CHECK_OK_ON(r.comm, incmoe_allreduce(r.comm, b.mv, 0, b.mv, 0, vector, INCMOE_FLOAT32,
                                         INCMOE_SUM, &ar));
    CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &ar));
    return rounds_check(r, b);
}

/*
 * 4 MiB collectives through 8 KiB chunks with 2 credits per stream on every link: an AllGather
 * of 1 MiB blocks and a ReduceScatter of 1 MiB blocks in flight together, then a 4 MiB
 * AllReduce, each hundreds of chunks that only move as credits come back down the tree.
 */
TEST(Tree, FourMebibytesThroughManyChunksAndTwoCredits)
{
    const Topology topo = two_leaves_of_two();
    const uint64_t chunk = 8192;
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk, {"--credits", "2"})));
    auto res =
        run_job(tree, topo, chunk, [](Rank &r) { return big_rounds(r, (1u << 20) / 4, 1u << 20); });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/*
 * The parent's AllGather blocks and AllReduce results go down under each child's window
 * (--link-window; switch/tree.c): with a window of `window` chunks and the ranks' 64 credits,
 * hundreds of chunks per collective move down only as the children send CREDITs back up, and
 * every element is still exact.
 */
void window_rounds(const Topology &topo, const char *window)
{
    const uint64_t chunk = 4096;
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk, {"--link-window", window})));
    auto res = run_job(tree, topo, chunk,
                       [](Rank &r) { return big_rounds(r, (256u << 10) / 4, 1u << 18); });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

TEST(Tree, ManyChunksThroughAWindowOfOneOnTwoLevels)
{
    window_rounds(two_leaves_of_two(), "1");
}

TEST(Tree, ManyChunksThroughAWindowOfTwoOnThreeLevels)
{
    window_rounds(three_levels(), "2");
}

TEST(Tree, ManyChunksThroughAWindowOfOneOnThreeLevels)
{
    window_rounds(three_levels(), "1");
}

TEST(Tree, ManyChunksThroughAWindowOfTwoOnTwoLevels)
{
    window_rounds(two_leaves_of_two(), "2");
}

/* Epoch k of reduce_scatter_epochs: owner b's block holds valid(k, b) floats, none for every
   third owner (shifted by k), else 1 to 4 chunks of 4 KiB and a part. */
size_t rs_epoch_valid(int k, int b)
{
    return (b + k) % 3 == 0 ? 0 : (size_t)((b + 2 * k) % 4) * 1024 + 100 + 7 * b;
}

/*
 * ReduceScatter partials go down each link under a window per owner, in (epoch, chunk) order
 * (switch/tree.c): eight ReduceScatters of unequal blocks, some empty, all posted before any
 * is waited for, through a window of 1 on three levels.  Each owner's partials of later epochs
 * wait for its earlier ones (and pass its empty blocks); every element is exact (the tree
 * order) and nothing past a block's valid floats is written.
 */
TEST(Tree, ReduceScatterEpochsOfUnequalBlocksThroughAWindowOfOne)
{
    const Topology topo = three_levels();
    const uint64_t chunk = 4096;
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk, {"--link-window", "1"})));
    auto res = run_job(tree, topo, chunk, [](Rank &r) -> std::string {
        const int epochs = 8;
        const size_t stride = 4 * 1024 + 200; /* floats: the largest valid block fits */
        const float canary = -7.0f;
        std::vector<std::vector<float> *> partial(epochs), reduced(epochs);
        std::vector<incmoe_req_t> reqs(epochs);
        for (int k = 0; k < epochs; k++) {
            partial[k] = &buffer<float>(stride * r.n);
            reduced[k] = &buffer<float>(stride, canary);
            std::vector<size_t> valid(r.n);
            for (int b = 0; b < r.n; b++) {
                valid[b] = rs_epoch_valid(k, b) * 4;
                for (size_t i = 0; i < stride; i++)
                    (*partial[k])[b * stride + i] = F32::input(input_hash(300 + k, r.me, b, i));
            }
            incmoe_mr_t *mp, *mr;
            CHECK_OK_ON(r.comm,
                        incmoe_mem_register(r.comm, partial[k]->data(), stride * r.n * 4, &mp));
            CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, reduced[k]->data(), stride * 4, &mr));
            incmoe_layout_t l = {stride * 4, 0, stride * 4, valid.data()};
            CHECK_OK_ON(r.comm, incmoe_reducescatter(r.comm, mp, 0, mr, 0, &l, INCMOE_FLOAT32,
                                                     INCMOE_SUM, &reqs[k]));
        }
        for (auto &q : reqs)
            CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &q));
        for (int k = 0; k < epochs; k++) {
            const size_t valid = rs_epoch_valid(k, r.me);
            for (size_t i = 0; i < stride; i++) {
                std::string e =
                    i < valid ? check_rs_element<F32>(r, (*reduced[k])[i], 300 + k, i, INCMOE_SUM)
                    : (*reduced[k])[i] == canary ? ""
                                                 : "written past its valid floats";
                if (!e.empty())
                    return "epoch " + std::to_string(k) + " element " + std::to_string(i) + ": " +
                           e;
            }
        }
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* ------------------------------------------------------------------------ */
/* dispatch and combine over a tree                                          */

/* How a case draws its rows' sets: ranks on the source's own switch, ranks on other switches,
   any rank, none, all; mixed: one of those per row. */
enum DcSets { DC_LOCAL, DC_REMOTE, DC_RANDOM, DC_EMPTY, DC_ALL, DC_MIXED };

/* One dispatch and its combine, the same in every process (made from a seed): rows[s] rows of
   row_bytes for each rank s, and each row's set (bit d: rank d). */
struct DcCase {
    std::vector<size_t> rows;
    std::vector<std::vector<uint64_t>> sets; /* [s][i] */
    size_t row_bytes;
    uint64_t seed;
};

DcCase dc_case(const TreeOrder &t, const std::vector<size_t> &rows, size_t row_bytes, DcSets shape,
               uint64_t seed)
{
    const int n = t.nranks();
    DcCase c = {rows, {}, row_bytes, seed};
    uint64_t draw = seed;
    auto next = [&draw]() { return draw = mix(draw); };
    for (int s = 0; s < n; s++) {
        std::vector<uint64_t> sets(rows[s], 0);
        for (size_t i = 0; i < rows[s]; i++) {
            DcSets sh = shape == DC_MIXED ? (DcSets)(next() % 5) : shape;
            for (int d = 0; d < n; d++) {
                const bool local = t.switch_of(d) == t.switch_of(s);
                const bool on = sh == DC_ALL      ? true
                                : sh == DC_EMPTY  ? false
                                : sh == DC_LOCAL  ? local && next() % 2
                                : sh == DC_REMOTE ? !local && next() % 2
                                                  : next() % 3 == 0;
                if (on)
                    sets[i] |= 1ull << d;
            }
        }
        c.sets.push_back(sets);
    }
    return c;
}

/* (source rank, source row) of each row rank d receives, in order. */
std::vector<std::pair<uint32_t, uint32_t>> dc_received(const DcCase &c, int d)
{
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (size_t s = 0; s < c.rows.size(); s++)
        for (size_t i = 0; i < c.rows[s]; i++)
            if ((c.sets[s][i] >> d) & 1)
                out.push_back({(uint32_t)s, (uint32_t)i});
    return out;
}

unsigned char dc_row_byte(const DcCase &c, int s, size_t i, size_t j)
{
    return (unsigned char)input_hash(c.seed, s, (int)i, j);
}

/* Rank d's partial of element e of owner s's row i. */
template <class A> typename A::T dc_partial(const DcCase &c, int d, int s, size_t i, size_t e)
{
    return A::input(input_hash(c.seed ^ 0xc0b1eull, d, s, (i << 16) | e));
}

/* This rank's side of one case: its rows, what it received, its partials and combined rows. */
template <class A> struct DcRun {
    const DcCase *c;
    std::vector<std::pair<uint32_t, uint32_t>> want;
    std::vector<unsigned char> *send, *recv;
    std::vector<typename A::T> *part, *out;
    incmoe_mr_t *ms, *mr, *mp, *mo;
    incmoe_req_t dispatch, combine;
};

/* The dispatch's rows and sources against the case, and nothing written past them. */
template <class A> std::string dc_check_dispatch(Rank &r, DcRun<A> &run)
{
    const DcCase &c = *run.c;
    const size_t rb = c.row_bytes;
    size_t nrecv = 0;
    std::vector<uint32_t> src(2 * run.want.size() + 2, 7777);
    CHECK_OK_ON(r.comm, incmoe_dispatch_result(r.comm, &run.dispatch, &nrecv, src.data(),
                                               run.want.size() + 1));
    if (nrecv != run.want.size())
        return "dispatch: received " + std::to_string(nrecv) + " rows, want " +
               std::to_string(run.want.size());
    for (size_t k = 0; k < run.want.size(); k++) {
        const auto w = run.want[k];
        if (src[2 * k] != w.first || src[2 * k + 1] != w.second)
            return "dispatch: row " + std::to_string(k) + " from (" + std::to_string(src[2 * k]) +
                   ", " + std::to_string(src[2 * k + 1]) + "), want (" + std::to_string(w.first) +
                   ", " + std::to_string(w.second) + ")";
        for (size_t j = 0; j < rb; j++)
            if ((*run.recv)[k * rb + j] != dc_row_byte(c, (int)w.first, w.second, j))
                return "dispatch: row " + std::to_string(k) + " (rank " + std::to_string(w.first) +
                       " row " + std::to_string(w.second) + ") byte " + std::to_string(j) +
                       " differs";
    }
    for (size_t at = run.want.size() * rb; at < run.recv->size(); at++)
        if ((*run.recv)[at] != kCanary)
            return "dispatch: a byte past the received rows was written";
    return "";
}

/* Each combined row bitwise against the tree order and within rounding of the one-switch order;
   nothing written past the rows. */
template <class A>
std::string dc_check_combine(Rank &r, DcRun<A> &run, size_t row_count, incmoe_redop_t op)
{
    using T = typename A::T;
    const DcCase &c = *run.c;
    for (size_t i = 0; i < c.rows[r.me]; i++) {
        const uint64_t set = c.sets[r.me][i];
        for (size_t e = 0; e < row_count; e++) {
            T in[kMaxRanks];
            for (int d = 0; d < r.n; d++)
                in[d] = dc_partial<A>(c, d, r.me, i, e);
            const T got = (*run.out)[i * row_count + e];
            const T want = dc_tree<A>(*r.order, r.me, set, in, op);
            if (memcmp(&got, &want, sizeof(T)) != 0)
                return std::string("combine ") + A::name + " " + incmoe_redop_name(op) + " row " +
                       std::to_string(i) + " element " + std::to_string(e) + ": got " +
                       hex(&got, sizeof(got)) + " want " + hex(&want, sizeof(want)) +
                       " (the tree order)";
            T contributing[kMaxRanks];
            int k = 0;
            for (int d = 0; d < r.n; d++)
                if ((set >> d) & 1)
                    contributing[k++] = in[d];
            if (!close_to_flat<A>(got, dc_flat<A>(r.me, r.n, set, in, op), contributing, k, op))
                return std::string("combine ") + A::name + " row " + std::to_string(i) +
                       " is not within rounding of the one-switch result";
        }
    }
    const unsigned char *past = (const unsigned char *)&(*run.out)[c.rows[r.me] * row_count];
    for (size_t b = 0; b < row_count * sizeof(T); b++)
        if (past[b] != kCanary)
            return "combine: a byte past the owner's rows was written";
    return "";
}

/*
 * The cases' dispatches posted together and waited for, each checked; then their combines of
 * partials of type A with op, posted together and waited for, each checked.  Every case must fit
 * the capacity of what it gives each rank.
 */
template <class A>
std::string dc_rounds(Rank &r, const std::vector<DcCase> &cases, size_t row_count,
                      incmoe_redop_t op)
{
    using T = typename A::T;
    std::vector<DcRun<A>> runs(cases.size());
    for (size_t q = 0; q < cases.size(); q++) {
        const DcCase &c = cases[q];
        DcRun<A> &run = runs[q];
        const size_t rb = c.row_bytes;
        run.c = &c;
        run.want = dc_received(c, r.me);
        run.send = &buffer<unsigned char>(std::max<size_t>(1, c.rows[r.me] * rb));
        run.recv = &buffer<unsigned char>((run.want.size() + 1) * rb, kCanary);
        for (size_t i = 0; i < c.rows[r.me]; i++)
            for (size_t j = 0; j < rb; j++)
                (*run.send)[i * rb + j] = dc_row_byte(c, r.me, i, j);
        CHECK_OK_ON(r.comm,
                    incmoe_mem_register(r.comm, run.send->data(), run.send->size(), &run.ms));
        CHECK_OK_ON(r.comm,
                    incmoe_mem_register(r.comm, run.recv->data(), run.recv->size(), &run.mr));
        incmoe_dispatch_params_t dp = {};
        dp.send_mr = run.ms;
        dp.nrows = c.rows[r.me];
        dp.row_bytes = rb;
        dp.sets = c.sets[r.me].empty() ? nullptr : c.sets[r.me].data();
        dp.recv_mr = run.mr;
        dp.capacity = run.want.size();
        CHECK_OK_ON(r.comm, incmoe_dispatch(r.comm, &dp, &run.dispatch));
    }
    for (auto &run : runs)
        CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &run.dispatch));
    for (auto &run : runs) {
        std::string e = dc_check_dispatch<A>(r, run);
        if (!e.empty())
            return e;
    }
    for (auto &run : runs) {
        const DcCase &c = *run.c;
        run.part = &buffer<T>(std::max<size_t>(1, run.want.size() * row_count));
        run.out = &buffer<T>((c.rows[r.me] + 1) * row_count);
        memset(run.out->data(), kCanary, run.out->size() * sizeof(T));
        for (size_t k = 0; k < run.want.size(); k++)
            for (size_t e = 0; e < row_count; e++)
                (*run.part)[k * row_count + e] =
                    dc_partial<A>(c, r.me, (int)run.want[k].first, run.want[k].second, e);
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, run.part->data(),
                                                run.part->size() * sizeof(T), &run.mp));
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, run.out->data(),
                                                run.out->size() * sizeof(T), &run.mo));
        incmoe_combine_params_t cp = {};
        cp.dispatch = run.dispatch;
        cp.send_mr = run.mp;
        cp.recv_mr = run.mo;
        cp.row_count = row_count;
        cp.dtype = A::dtype;
        cp.op = op;
        CHECK_OK_ON(r.comm, incmoe_combine(r.comm, &cp, &run.combine));
    }
    for (auto &run : runs)
        CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &run.combine));
    for (auto &run : runs) {
        std::string e = dc_check_combine<A>(r, run, row_count, op);
        if (!e.empty())
            return e;
        for (incmoe_mr_t *m : {run.ms, run.mr, run.mp, run.mo})
            CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, m));
    }
    return "";
}

/* Rows per rank: t for every rank, or (uneven) none for every third and t + 5 r for the others. */
std::vector<size_t> dc_rows(int n, size_t t, bool uneven)
{
    std::vector<size_t> rows(n);
    for (int q = 0; q < n; q++)
        rows[q] = !uneven ? t : q % 3 == 1 ? 0 : t + 5 * (size_t)q;
    return rows;
}

const char *const kDcShapeNames[] = {"local", "remote", "random", "empty", "all", "mixed"};

/* Every shape of set, each in a small case (every rank's contribution in one SMALL) and a
   chunked one, float32 sums; then bfloat16 sums and float32 max over mixed sets, chunked. */
std::string dc_every_shape(Rank &r)
{
    const size_t row = 64, partial = 16; /* bytes of a row; elements of a partial row */
    uint64_t seed = 500;
    for (DcSets sh : {DC_LOCAL, DC_REMOTE, DC_RANDOM, DC_EMPTY, DC_ALL, DC_MIXED}) {
        for (bool small : {true, false}) {
            DcCase c = dc_case(*r.order, dc_rows(r.n, small ? 3 : 90, !small), row, sh, seed++);
            std::string e = dc_rounds<F32>(r, {c}, partial, INCMOE_SUM);
            if (!e.empty())
                return std::string(kDcShapeNames[sh]) + (small ? " small: " : " chunked: ") + e;
        }
    }
    std::string e = dc_rounds<BF16>(
        r, {dc_case(*r.order, dc_rows(r.n, 70, true), row, DC_MIXED, seed++)}, partial, INCMOE_SUM);
    if (e.empty())
        e = dc_rounds<F32>(r, {dc_case(*r.order, dc_rows(r.n, 70, false), row, DC_MIXED, seed++)},
                           partial, INCMOE_MAX);
    return e;
}

/* The combine's data tells the tree order from the one-switch order on every shape it runs, so
   a switch that reduced a row in rank order would fail the tests below, not pass by luck. */
TEST(TreeDc, TheTestDataTellsTheTreeOrderFromTheFlatOrder)
{
    for (const Topology &topo : {two_leaves_of_two(), uneven_three_one_two(), interleaved(),
                                 three_levels(), Topology{{-1, 0, 1, 0}, {1, 2, 3, 0, 2}}}) {
        TreeOrder t(topo);
        const int n = t.nranks();
        const DcCase c = dc_case(t, dc_rows(n, 90, false), 64, DC_RANDOM, 501);
        int differ = 0;
        for (int s = 0; s < n; s++) {
            for (size_t i = 0; i < c.rows[s]; i++) {
                for (size_t e = 0; e < 16; e++) {
                    float in[kMaxRanks];
                    for (int d = 0; d < n; d++)
                        in[d] = dc_partial<F32>(c, d, s, i, e);
                    differ += dc_tree<F32>(t, s, c.sets[s][i], in, INCMOE_SUM) !=
                              dc_flat<F32>(s, n, c.sets[s][i], in, INCMOE_SUM);
                }
            }
        }
        EXPECT_GT(differ, 0) << "combine on a " << n << "-rank shape";
    }
}

/* Starts a tree of topo's switches, runs every shape of dispatch and combine on a job placed by
   topo, and stops the tree. */
void dc_every_shape_on(const Topology &topo)
{
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    auto res = run_job(tree, topo, kSmallChunk, dc_every_shape);
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

TEST(TreeDc, TwoLeavesOfTwoRanksGiveTheTreeOrder)
{
    dc_every_shape_on(two_leaves_of_two());
}

TEST(TreeDc, UnevenLeavesAndALeafOfOneRankGiveTheTreeOrder)
{
    dc_every_shape_on(uneven_three_one_two());
}

TEST(TreeDc, RanksInterleavedAcrossLeavesGiveTheTreeOrder)
{
    dc_every_shape_on(interleaved());
}

TEST(TreeDc, ThreeLevelsGiveTheTreeOrder)
{
    dc_every_shape_on(three_levels());
}

/* Rank ports and switch ports interleave by key on inner switches (see the collectives' test of
   the same shape). */
TEST(TreeDc, RanksOnInnerSwitchesFollowTheKeyOrderToo)
{
    dc_every_shape_on({{-1, 0, 1, 0}, {1, 2, 3, 0, 2}});
}

/* A job wholly under one leaf: the one-switch results, bitwise (the tree order is the flat one
   there). */
TEST(TreeDc, AJobWhollyUnderOneLeafGivesTheOneSwitchResults)
{
    dc_every_shape_on({{-1, 0, 0}, {2, 2, 2}});
}

/*
 * A dispatch that gives rank 3 one row more than its capacity fails on every rank with
 * INCMOE_ERR_NO_MEMORY and one reason, every switch having made the verdict alone; nothing is
 * written, and the same communicators then dispatch and combine exactly.
 */
TEST(TreeDc, CapacityOverflowIsRefusedAlikeAndTheCommunicatorCarriesOn)
{
    const Topology topo = interleaved();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    auto res = run_job(tree, topo, kSmallChunk, [](Rank &r) -> std::string {
        for (bool small : {true, false}) {
            DcCase c = dc_case(*r.order, dc_rows(r.n, small ? 2 : 60, false), 64, DC_ALL, 600);
            const size_t want = dc_received(c, 3).size();
            auto &send = buffer<unsigned char>(std::max<size_t>(1, c.rows[r.me] * 64));
            auto &recv = buffer<unsigned char>(want * 64 + 64, kCanary);
            incmoe_mr_t *ms, *mr;
            CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, send.data(), send.size(), &ms));
            CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, recv.data(), recv.size(), &mr));
            incmoe_dispatch_params_t dp = {};
            dp.send_mr = ms;
            dp.nrows = c.rows[r.me];
            dp.row_bytes = 64;
            dp.sets = c.sets[r.me].data();
            dp.recv_mr = mr;
            dp.capacity = dc_received(c, r.me).size() - (r.me == 3 ? 1 : 0);
            incmoe_req_t req;
            CHECK_OK_ON(r.comm, incmoe_dispatch(r.comm, &dp, &req));
            incmoe_status_t st = incmoe_wait(r.comm, &req);
            char text[256] = "";
            incmoe_req_error(r.comm, &req, text, sizeof(text));
            const std::string expect = "dispatch epoch " + std::to_string(req.epoch) +
                                       ": rank 3 would receive " + std::to_string(want) +
                                       " rows, capacity " + std::to_string(want - 1);
            if (st != INCMOE_ERR_NO_MEMORY || expect != text)
                return std::string("the overflowing dispatch gave ") + incmoe_strerror(st) + " '" +
                       text + "', want '" + expect + "'";
            for (unsigned char x : recv)
                if (x != kCanary)
                    return "a refused dispatch wrote into the receive buffer";
            if (incmoe_comm_error(r.comm, nullptr, 0) != INCMOE_OK)
                return "the refusal failed the communicator: " + comm_text(r.comm);
            CHECK_OK_ON(r.comm, incmoe_dispatch_release(r.comm, &req));
            CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, ms));
            CHECK_OK_ON(r.comm, incmoe_mem_deregister(r.comm, mr));
            std::string e = dc_rounds<F32>(r, {c}, 16, INCMOE_SUM);
            if (!e.empty())
                return "after the refusal: " + e;
        }
        return "";
    });
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/*
 * Dispatches and combines of hundreds of rows through 1 KiB chunks with 2 credits on every link
 * of three levels, three of each in flight together: every chunk moves only as credits come
 * back, the combine's items wait on partials from every side, and every row is still exact.
 * With rendezvous (both the switches' and the ranks') chunks land out of the order they came
 * in, which the switches must take them in.  topo and more: another tree, other options.
 */
void dc_many_chunks(bool rndv, const Topology &topo = three_levels(),
                    std::vector<std::string> more = {"--credits", "2"})
{
    const uint64_t chunk = 1024;
    if (rndv)
        more.insert(more.end(), {"--rndv-thresh", "256"});
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk, more)));
    if (rndv)
        setenv("INCMOE_RNDV_THRESH", "256", 1); /* the ranks' processes inherit it */
    auto res = run_job(tree, topo, chunk, [](Rank &r) -> std::string {
        std::vector<DcCase> cases;
        uint64_t seed = 700;
        for (DcSets sh : {DC_MIXED, DC_RANDOM, DC_REMOTE})
            cases.push_back(dc_case(*r.order, dc_rows(r.n, 200, true), 64, sh, seed++));
        std::string e = dc_rounds<F32>(r, cases, 32, INCMOE_SUM);
        if (e.empty())
            e = dc_rounds<F32>(r, {dc_case(*r.order, dc_rows(r.n, 300, false), 96, DC_ALL, seed)},
                               24, INCMOE_SUM);
        return e;
    });
    if (rndv)
        unsetenv("INCMOE_RNDV_THRESH");
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

TEST(TreeDc, ManyChunksThroughTwoCreditsOnThreeLevels)
{
    dc_many_chunks(false);
}

TEST(TreeDc, RendezvousChunksLandingOutOfOrderStayExact)
{
    dc_many_chunks(true);
}

/* The parent's dispatch chunks go down under each child's window (switch/tree.c), and the
   combine's set chunks go both ways under a window per owner and link (switch/dc_window.c): one
   or two chunks at a time per link (and per owner), with 2 credits per rank and port, three
   combines in flight together, stay exact and never stall (the progress timeout would end a
   deadlock with an error). */
TEST(TreeDc, ManyChunksThroughAWindowOfOneOnThreeLevels)
{
    dc_many_chunks(false, three_levels(), {"--credits", "2", "--link-window", "1"});
}

TEST(TreeDc, ManyChunksThroughAWindowOfTwoOnTwoLevels)
{
    dc_many_chunks(false, two_leaves_of_two(), {"--credits", "2", "--link-window", "2"});
}

TEST(TreeDc, ManyChunksThroughAWindowOfOneOnTwoLevels)
{
    dc_many_chunks(false, two_leaves_of_two(), {"--credits", "2", "--link-window", "1"});
}

TEST(TreeDc, ManyChunksThroughAWindowOfTwoOnThreeLevels)
{
    dc_many_chunks(false, three_levels(), {"--credits", "2", "--link-window", "2"});
}

/* Rendezvous set chunks land out of the order they came in, so a switch may take a later
   combine's set chunk of an owner before an earlier one's: through a window of one it must
   still not let the later one take the owner's window first (switch/dc_window.c). */
TEST(TreeDc, RendezvousChunksThroughAWindowOfOneOnThreeLevels)
{
    dc_many_chunks(true, three_levels(), {"--credits", "2", "--link-window", "1"});
}

/*
 * Dispatch and combine rounds of `rows` rows per rank of `row_bytes` bytes through 64 KiB chunks
 * on two leaves whose links fill (UCX's TCP buffers at 8 KiB, so sends wait in UCX's pending
 * queues on every link): UCX 1.13 sent a message asked for from another's completion ahead of
 * the messages waiting in its endpoint's pending queue (switch/server.c, "sending"), and every
 * round must still be exact.
 */
std::string dc_through_full_links(const std::vector<size_t> &rows, uint64_t row_bytes,
                                  size_t row_count, int rounds)
{
    const Topology topo = two_leaves_of_two();
    const uint64_t chunk = 64 * 1024;
    setenv("UCX_TCP_SNDBUF", "8k", 1); /* the switches and the ranks inherit them */
    setenv("UCX_TCP_RCVBUF", "8k", 1);
    Tree tree;
    /* A slow machine takes seconds between one rank's dispatch and another's combine here. */
    if (!tree_start(&tree, topo, tree_args(chunk, {"--progress-timeout-ms", "60000"})))
        return "the tree did not start";
    auto res = run_job(tree, topo, chunk, [&](Rank &r) -> std::string {
        uint64_t seed = 900;
        for (int round = 0; round < rounds; round++) {
            std::vector<DcCase> cases;
            for (DcSets sh : {DC_REMOTE, DC_MIXED})
                cases.push_back(dc_case(*r.order, rows, row_bytes, sh, seed++));
            std::string e = dc_rounds<F32>(r, cases, row_count, INCMOE_SUM);
            if (!e.empty())
                return "round " + std::to_string(round) + ": " + e;
        }
        return "";
    });
    unsetenv("UCX_TCP_SNDBUF");
    unsetenv("UCX_TCP_RCVBUF");
    tree_stop(&tree);
    return harness::failures(res);
}

/* A leaf's chunks of a root toward the root: the root takes them only in chunk order (on the
   testbed's 2 x 4 tree: 'the switch port of rank 4 sent chunk 3 of root 7 ...; its next is
   chunk 5'). */
TEST(TreeDc, ChunksThroughLinksThatFillKeepTheirOrder)
{
    EXPECT_EQ(dc_through_full_links(dc_rows(4, 600, true), 1024, 256, 1), "");
}

/* Small dispatches back to back toward ranks whose links are full of the rounds before: each
   PLAN waits in UCX behind them, and a rank takes no row of a dispatch before its PLAN ('a
   result before an OK plan'). */
TEST(TreeDc, RowsThroughAFullLinkComeAfterTheirPlan)
{
    EXPECT_EQ(dc_through_full_links(dc_rows(4, 40, true), 4096, 64, 6), "");
}

/*
 * Rank 3 of a job on two leaves is killed in the middle of a dispatch of 4 KiB rows to every
 * rank through links that fill (8 KiB UCX TCP buffers, so UCX holds sends on every link when it
 * dies), in each of `rounds` jobs: ranks 0..2 fail with a reason, and every switch then serves a
 * new job and exits cleanly (tree_stop).
 */
void expect_serves(const Tree &tree, const std::vector<int> &parent, int leaf);

void dc_rank_killed_mid_dispatch(int rounds)
{
    const Topology topo = two_leaves_of_two();
    const uint64_t chunk = 64 * 1024;
    setenv("UCX_TCP_SNDBUF", "8k", 1); /* the switches and the ranks inherit them */
    setenv("UCX_TCP_RCVBUF", "8k", 1);
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk)));
    for (int round = 0; round < rounds; round++) {
        const unsigned long long job = harness::unique_job_id();
        auto rank_main = [&](int me) -> std::string {
            const size_t rows = 400, rb = 4096, n = topo.at.size();
            std::vector<unsigned char> send(rows * rb, (unsigned char)(me + 1));
            std::vector<unsigned char> recv(rows * rb * n, kCanary);
            std::vector<uint64_t> sets(rows, (1ull << n) - 1);
            incmoe_comm_t *comm;
            incmoe_status_t st = create_on(tree, topo, job, me, kJobTimeoutMs, &comm);
            if (st != INCMOE_OK)
                return std::string("comm_create: ") + incmoe_strerror(st);
            incmoe_mr_t *ms, *mr;
            incmoe_req_t req;
            CHECK_OK(incmoe_mem_register(comm, send.data(), send.size(), &ms));
            CHECK_OK(incmoe_mem_register(comm, recv.data(), recv.size(), &mr));
            incmoe_dispatch_params_t dp = {};
            dp.send_mr = ms;
            dp.nrows = rows;
            dp.row_bytes = rb;
            dp.sets = sets.data();
            dp.recv_mr = mr;
            dp.capacity = rows * n;
            CHECK_OK(incmoe_dispatch(comm, &dp, &req));
            if (me == 3) {
                /* The plan takes milliseconds on loopback, the rows seconds through these
                   buffers. */
                usleep(300 * 1000);
                kill(getpid(), SIGKILL);
            }
            st = incmoe_wait(comm, &req);
            const std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st == INCMOE_OK)
                return "the dispatch succeeded although rank 3 was killed in it";
            if (text.empty())
                return std::string("the dispatch failed (") + incmoe_strerror(st) +
                       ") with no reason";
            return "";
        };
        auto res = harness::run_ranks((int)topo.at.size(), rank_main, 60);
        res.pop_back(); /* rank 3's: killed */
        EXPECT_EQ(harness::failures(res), "") << "round " << round;
    }
    unsetenv("UCX_TCP_SNDBUF");
    unsetenv("UCX_TCP_RCVBUF");
    for (int s = 0; s < (int)tree.sw.size(); s++)
        expect_serves(tree, topo.parent, s);
    tree_stop(&tree);
}

/* UCX 1.13's TCP completed a zero-copy send twice when its endpoint failed, and started one on
   an endpoint whose socket was gone, aborting the switches and ranks of a tree job that failed
   on the testbed (base/ucx_util.c, config_tcp).  Before that fix this failed in about one round
   of three. */
TEST(TreeDc, ARankKilledMidDispatchFailsTheOthersAndNoSwitchAborts)
{
    harness::ExpectErrors errors_expected("a rank is killed mid-dispatch");
    dc_rank_killed_mid_dispatch(3);
}

/* ------------------------------------------------------------------------ */
/* faults                                                                    */

/* A fresh job of two ranks on one switch of the tree serves an AllGather and an AllReduce. */
void expect_serves(const Tree &tree, const std::vector<int> &parent, int leaf)
{
    const Topology topo = {parent, {leaf, leaf}};
    auto res = run_job(tree, topo, kSmallChunk, [](Rank &r) -> std::string {
        std::string e = check_allgather(r, 64, true, 130);
        return e.empty() ? check_reductions<F32>(r, 100, INCMOE_SUM, true, true, 131) : e;
    });
    EXPECT_EQ(harness::failures(res), "") << "switch " << leaf << " stopped serving new jobs";
}

/* Marks the kill in shared memory, then kills the switch. */
void kill_switch(Board *board, pid_t pid)
{
    board->killed_at = inc_now_s();
    store(&board->killed, 1);
    kill(pid, SIGKILL);
}

/*
 * Ranks 1 and 3 post a 4 MiB AllReduce, rank 0 posts it and kills switch `victim`, rank 2 posts
 * only after the kill, so the collective cannot have completed: every rank gets an error within
 * the job's timeout + 1 s of the kill.
 */
void kill_mid_collective(const Tree &tree, const Topology &topo, int victim)
{
    SharedBoard shared;
    ASSERT_NE(shared.get(), nullptr);
    Board *board = shared.get();
    const pid_t victim_pid = tree.sw[victim].pid;
    const double bound_s = kJobTimeoutMs / 1000.0 + 1;
    unsigned long long job = harness::unique_job_id();
    auto body = [&](Rank &r) -> std::string {
        const size_t count = 1u << 20;
        auto &vec = buffer<float>(count, 1.0f);
        incmoe_mr_t *mv;
        CHECK_OK_ON(r.comm, incmoe_mem_register(r.comm, vec.data(), count * 4, &mv));
        incmoe_req_t req;
        CHECK_OK_ON(r.comm, incmoe_barrier(r.comm, &req)); /* everyone joined */
        CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &req));
        if (r.me == 2 && !await_at_least(&board->killed, 1))
            return "the switch was never killed";
        incmoe_status_t st =
            incmoe_allreduce(r.comm, mv, 0, mv, 0, count, INCMOE_FLOAT32, INCMOE_SUM, &req);
        if (r.me == 1 || r.me == 3)
            __atomic_add_fetch(&board->posted, 1, __ATOMIC_ACQ_REL);
        if (r.me == 0) {
            if (!await_at_least(&board->posted, 2))
                fprintf(stderr, "ranks 1 and 3 did not post; killing anyway\n");
            kill_switch(board, victim_pid);
        }
        if (st == INCMOE_OK)
            st = incmoe_wait(r.comm, &req);
        double ended = inc_now_s();
        if (st == INCMOE_OK)
            return "the allreduce succeeded although switch " + std::to_string(victim) +
                   " was killed before rank 2 posted it";
        if (!await_at_least(&board->killed, 1))
            return "the allreduce failed, and the switch was never killed: " +
                   why(r.comm, st, "allreduce");
        double failed = ended - board->killed_at;
        if (failed < 0)
            return "the allreduce failed before the kill: " + why(r.comm, st, "allreduce");
        if (failed > bound_s)
            return "the error (" + why(r.comm, st, "allreduce") + ") came " +
                   std::to_string(failed) + " s after the kill";
        return "";
    };
    auto res = harness::run_ranks(
        4,
        [&](int me) {
            return as_rank(tree, topo, job, me, kJobTimeoutMs, nullptr, kSmallChunk, board, body,
                           true);
        },
        30);
    EXPECT_EQ(harness::failures(res), "");
}

/* On a root over two leaves of two ranks, switch `victim` is killed mid-collective
   (kill_mid_collective); the other two stay up, and the leaf that is left (if a leaf was
   killed) serves a new job. */
void kill_one_of_two_leaves_tree(int victim)
{
    const Topology topo = two_leaves_of_two();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    kill_mid_collective(tree, topo, victim);
    for (int sw = 0; sw < 3; sw++) {
        if (sw == victim)
            continue;
        EXPECT_TRUE(still_running(tree.sw[sw])) << "switch " << sw << " died with " << victim;
    }
    if (victim != 0)
        expect_serves(tree, topo.parent, 3 - victim);
    tree_stop(&tree, {victim});
}

TEST(TreeFaults, LeafKilledMidCollectiveFailsEveryRankAndTheOthersServeOn)
{
    harness::ExpectErrors errors_expected("a leaf is killed");
    kill_one_of_two_leaves_tree(1);
}

TEST(TreeFaults, RootKilledMidCollectiveFailsEveryRank)
{
    harness::ExpectErrors errors_expected("the root is killed");
    kill_one_of_two_leaves_tree(0);
}

/*
 * Job Y (both ranks on leaf 2) runs AllReduces while job X (one rank on each leaf) loses leaf 1:
 * X's ranks get errors; Y's collectives all complete with the right results, the one Y's rank 0
 * posts before the kill (its rank 1 posts it only after) and 20 more after the kill.
 */
TEST(TreeFaults, AJobUnderAnotherLeafCarriesOnWhileALeafDies)
{
    harness::ExpectErrors errors_expected("the dying leaf's job fails");
    const std::vector<int> parent = {-1, 0, 0};
    const Topology job_y = {parent, {2, 2}}, job_x = {parent, {1, 2}};
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, job_x, tree_args(kSmallChunk)));
    SharedBoard shared;
    ASSERT_NE(shared.get(), nullptr);
    Board *board = shared.get();
    const pid_t leaf1 = tree.sw[1].pid;
    const unsigned long long id_y = harness::unique_job_id(), id_x = harness::unique_job_id();
    const TreeOrder order_y(job_y);
    auto y_body = [&](Rank &r) -> std::string {
        std::string e;
        for (int k = 0; k < 5 && e.empty(); k++)
            e = check_reductions<F32>(r, 64, INCMOE_SUM, true, true, 140 + k);
        if (!e.empty())
            return "before the kill: " + e;
        __atomic_add_fetch(&board->progress, 1, __ATOMIC_ACQ_REL);
        if (r.me == 1 && !await_at_least(&board->killed, 1))
            return "leaf 1 was never killed";
        for (int k = 0; k < 21 && e.empty(); k++)
            e = check_reductions<F32>(r, 64, INCMOE_SUM, true, true, 150 + k);
        return e.empty() ? "" : "across and after the kill: " + e;
    };
    auto x_body = [&](Rank &r) -> std::string {
        incmoe_req_t req;
        CHECK_OK_ON(r.comm, incmoe_barrier(r.comm, &req));
        CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &req));
        if (r.me == 0) {
            if (!await_at_least(&board->progress, 2))
                return "job Y made no progress before the kill";
            kill_switch(board, leaf1);
        }
        incmoe_status_t st = incmoe_barrier(r.comm, &req);
        if (st == INCMOE_OK)
            st = incmoe_wait(r.comm, &req);
        return st == INCMOE_OK ? "job X's barrier completed after its leaf 1 was killed" : "";
    };
    /* Processes 0, 1: job Y's ranks 0, 1.  Processes 2, 3: job X's ranks 0 (leaf 1), 1. */
    auto res = harness::run_ranks(
        4,
        [&](int proc) {
            if (proc < 2)
                return as_rank(tree, job_y, id_y, proc, kCreateTimeoutMs, &order_y, kSmallChunk,
                               board, y_body);
            return as_rank(tree, job_x, id_x, proc - 2, kCreateTimeoutMs, nullptr, kSmallChunk,
                           board, x_body, true);
        },
        60);
    EXPECT_EQ(harness::failures(res), "");
    EXPECT_TRUE(still_running(tree.sw[0]));
    EXPECT_TRUE(still_running(tree.sw[2]));
    tree_stop(&tree, {1});
}

/* Runs body on every rank of one fresh job placed by topo, each asking the short job timeout. */
std::vector<std::string> run_short_job(const Tree &tree, const Topology &topo,
                                       const std::function<std::string(Rank &)> &body, bool fails)
{
    unsigned long long job = harness::unique_job_id();
    TreeOrder order(topo);
    return harness::run_ranks((int)topo.at.size(),
                              [&](int me) {
                                  return as_rank(tree, topo, job, me, kJobTimeoutMs, &order,
                                                 kSmallChunk, nullptr, body, fails);
                              },
                              30);
}

/* The links between switches fall quiet while the ranks compute: each carries HEARTBEATs, which
   name no rank, and the job lives on (leaf 2's port at the root has key 2). */
TEST(TreeFaults, QuietLinksBetweenSwitchesKeepTheirJob)
{
    const Topology topo = two_leaves_of_two();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    auto res = run_short_job(
        tree, topo,
        [](Rank &r) -> std::string {
            for (int round = 0; round < 2; round++) {
                incmoe_req_t req;
                CHECK_OK_ON(r.comm, incmoe_barrier(r.comm, &req));
                CHECK_OK_ON(r.comm, incmoe_wait(r.comm, &req));
                usleep(kJobTimeoutMs * 1000 / 3); /* past a heartbeat's quarter of the timeout */
            }
            return check_reductions<F32>(r, 64, INCMOE_SUM, true, true, 165);
        },
        false);
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* A failure one leaf sees reaches every rank with that leaf's reason: rank 3 leaves (its
   communicator destroyed: a LEAVE, then its connection closes), and only then do the others post a
   barrier it never can; ranks 0 and 1, on the other leaf, read why. */
TEST(TreeFaults, ALeafsFailureReachesEveryRankWithItsReason)
{
    harness::ExpectErrors errors_expected("a leaf fails its job");
    const Topology topo = two_leaves_of_two();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk)));
    SharedBoard shared;
    ASSERT_NE(shared.get(), nullptr);
    Board *board = shared.get();
    const unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        4,
        [&](int me) -> std::string {
            incmoe_comm_t *comm;
            incmoe_status_t st = create_on(tree, topo, job, me, kJobTimeoutMs, &comm);
            if (st != INCMOE_OK)
                return std::string("comm_create: ") + incmoe_strerror(st);
            incmoe_req_t req;
            st = incmoe_barrier(comm, &req);
            if (st == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            if (st != INCMOE_OK || me == 3) {
                std::string e = st != INCMOE_OK ? why(comm, st, "the first barrier") : "";
                incmoe_status_t left = incmoe_comm_destroy(comm);
                store(&board->killed, 1);
                if (e.empty() && left != INCMOE_OK)
                    e = std::string("rank 3's orderly leave gave ") + incmoe_strerror(left);
                return e;
            }
            if (!await_at_least(&board->killed, 1))
                st = INCMOE_ERR_TIMEOUT;
            else if ((st = incmoe_barrier(comm, &req)) == INCMOE_OK)
                st = incmoe_wait(comm, &req);
            std::string reason = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st == INCMOE_OK || reason.find("rank 3 left") == std::string::npos)
                return std::string("a barrier rank 3 never posts gave ") + incmoe_strerror(st) +
                       " '" + reason + "'";
            return "";
        },
        30);
    EXPECT_EQ(harness::failures(res), "");
    tree_stop(&tree);
}

/* The join timeout of a job the tree refuses: its ranks hear the refusal, not the timeout. */
const int kRefusedJoinMs = 4000;

/* How a job the tree refuses ends on a rank: its comm_create's status, or (if it joined) its
   first barrier's, with that failure's reason. */
struct Refusal {
    incmoe_status_t st;
    std::string reason; /* the communicator's, if it joined */
    bool joined;
};

Refusal join_refused(const Tree &tree, const Topology &topo, unsigned long long job, int me)
{
    incmoe_comm_t *comm;
    incmoe_status_t st = create_on(tree, topo, job, me, kRefusedJoinMs, &comm);
    if (st != INCMOE_OK)
        return {st, "", false};
    incmoe_req_t req;
    st = incmoe_barrier(comm, &req);
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &req);
    Refusal out = {st, comm_text(comm), true};
    incmoe_comm_destroy(comm);
    return out;
}

/* Every rank of a fresh job placed by topo has its join refused with `want` (and, with
   needs_reason, with a reason where it joined); what went otherwise, "" if nothing. */
std::string refused_on_every_rank(const Tree &tree, const Topology &topo, incmoe_status_t want,
                                  const std::string &what, bool needs_reason = false)
{
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks((int)topo.at.size(),
                                  [&](int me) -> std::string {
                                      Refusal f = join_refused(tree, topo, job, me);
                                      if (f.st != want)
                                          return what + " gave " + incmoe_strerror(f.st) + " (" +
                                                 f.reason + ")";
                                      if (needs_reason && f.joined && f.reason.empty())
                                          return "the refusal came without a reason";
                                      return "";
                                  },
                                  30);
    return harness::failures(res);
}

/* A root whose --max-memory cannot hold the job refuses it: every rank fails with
   INCMOE_ERR_NO_MEMORY (with a reason where the failure reaches a communicator), and the
   switches stay up. */
TEST(TreeFaults, ParentWithoutMemoryForTheJobRefusesItOnEveryRank)
{
    harness::ExpectErrors errors_expected("the parent refuses the job");
    const Topology topo = two_leaves_of_two();
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, topo, tree_args(kSmallChunk), {{"--max-memory", "4K"}}));
    EXPECT_EQ(
        refused_on_every_rank(tree, topo, INCMOE_ERR_NO_MEMORY, "a job the root cannot hold", true),
        "");
    for (auto &sw : tree.sw)
        EXPECT_TRUE(still_running(sw));
    tree_stop(&tree);
}

/*
 * What a leaf admits holds what its parent may send it: a window of chunks per stream
 * (--link-window), and for the ReduceScatter partials one per owner, not N ranks' worth of
 * credits.  At 4 ranks, 4 KiB chunks and 2 credits a leaf's bound (switch/membership.c,
 * job_memory_bound) is 148,224 bytes plus (2 + 4) x window x 4 KiB for the AllGather and
 * AllReduce chunks and the 4 owners' partials from its parent: 172,800 bytes with a window of
 * 1, 1,721,088 with 64 (and 247,296 when the parent's chunks counted as N ranks' worth).
 * Leaves with 256 KiB refuse the job with a window of 64 and run it, exact, with a window of 1,
 * where its chunks then move one at a time down each link; the switch fails a job whose memory
 * would pass its bound (job_alloc), so exact results mean the bound held.
 */
TEST(TreeFaults, ALeafAdmitsAJobByItsWindowFromTheParent)
{
    const Topology topo = two_leaves_of_two();
    const uint64_t chunk = 4096;
    for (const char *window : {"64", "1"}) {
        harness::ExpectErrors errors_expected("a leaf refuses the job its window does not fit");
        const std::vector<std::string> leaf = {"--max-memory",  "256K", "--credits", "2",
                                               "--link-window", window};
        Tree tree;
        ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk), {{}, leaf, leaf}));
        if (std::string(window) == "64") {
            EXPECT_EQ(
                refused_on_every_rank(tree, topo, INCMOE_ERR_NO_MEMORY, "a job a leaf cannot hold"),
                "")
                << "window " << window;
        } else {
            auto res = run_job(tree, topo, chunk,
                               [](Rank &r) { return big_rounds(r, (64u << 10) / 4, 1u << 16); });
            EXPECT_EQ(harness::failures(res), "") << "window " << window;
        }
        tree_stop(&tree);
    }
}

/* A key file with `key` as its first line; removed when the test ends. */
class KeyFile
{
  public:
    explicit KeyFile(const char *key)
    {
        char name[] = "/tmp/incmoe-tree-key-XXXXXX";
        int fd = mkstemp(name);
        if (fd >= 0) {
            std::string line = std::string(key) + "\n";
            ok_ = write(fd, line.data(), line.size()) == (ssize_t)line.size();
            close(fd);
            path_ = name;
        }
    }
    ~KeyFile()
    {
        if (!path_.empty())
            unlink(path_.c_str());
    }
    bool ok() const
    {
        return ok_;
    }
    const std::string &path() const
    {
        return path_;
    }

  private:
    std::string path_;
    bool ok_ = false;
};

/*
 * The root holds key A; leaf 2 proves key A on its link, leaf 1 key B.  A job on leaf 2 runs; a
 * job on leaf 1 fails on every rank with INCMOE_ERR_AUTH (or a reason naming the key), within
 * its join timeout.  The job on leaf 2 goes first: the root slows down an address that failed
 * its handshake repeatedly, and both leaves come from 127.0.0.1.
 */
TEST(TreeFaults, LeafWithTheWrongParentKeyFailsItsRanksWithAuth)
{
    harness::ExpectErrors errors_expected("a leaf holds the wrong parent key");
    KeyFile right("tree-key-right"), wrong("tree-key-wrong");
    ASSERT_TRUE(right.ok() && wrong.ok());
    const std::vector<int> parent = {-1, 0, 0};
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, {parent, {}}, tree_args(kSmallChunk),
                           {{"--auth-key-file", right.path()},
                            {"--parent-key-file", wrong.path()},
                            {"--parent-key-file", right.path()}}));
    expect_serves(tree, parent, 2);
    const Topology on_wrong = {parent, {1, 1}};
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        2,
        [&](int me) -> std::string {
            double t0 = inc_now_s();
            Refusal f = join_refused(tree, on_wrong, job, me);
            double took = inc_now_s() - t0;
            bool names_key = f.reason.find("key") != std::string::npos;
            if (f.st != INCMOE_ERR_AUTH && !(f.st != INCMOE_OK && names_key))
                return std::string("a leaf with the wrong parent key gave ") +
                       incmoe_strerror(f.st) + " (" + f.reason + ")";
            if (took > kRefusedJoinMs / 1000.0 + 2)
                return "the refusal took " + std::to_string(took) + " s";
            return "";
        },
        30);
    EXPECT_EQ(harness::failures(res), "");
    for (auto &sw : tree.sw)
        EXPECT_TRUE(still_running(sw));
    tree_stop(&tree);
}

/*
 * A job runs on the leaf; the root is killed and a new root started on the same port (or, if
 * the port cannot be taken again, a new root and a new leaf); a new job on the leaf runs.
 */
TEST(TreeFaults, LeafServesNewJobsAfterItsRootRestarts)
{
    const std::vector<int> parent = {-1, 0};
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, {parent, {}}, tree_args(kSmallChunk)));
    expect_serves(tree, parent, 1);
    const std::string root_addr = tree.sw[0].addr;
    ASSERT_EQ(kill(tree.sw[0].pid, SIGKILL), 0);
    harness::switch_stop(&tree.sw[0]); /* reaps it */
    std::vector<std::string> args = tree_args(kSmallChunk, {"--listen", root_addr});
    if (harness::switch_start(&tree.sw[0], args)) {
        EXPECT_TRUE(still_running(tree.sw[1])) << "the leaf died with its root";
    } else {
        fprintf(stderr, "port of %s not free again: a new root and leaf instead\n",
                root_addr.c_str());
        tree_stop(&tree);
        ASSERT_TRUE(tree_start(&tree, {parent, {}}, tree_args(kSmallChunk)));
    }
    expect_serves(tree, parent, 1);
    tree_stop(&tree);
}

/*
 * The root is stopped: its kernel still accepts the leaf's connection, nothing answers the
 * handshake.  A new job's two ranks join the leaf (the second, when it comes within the link's
 * deadline, while the first's link to the root is being made in the leaf's event loop): both
 * fail with INCMOE_ERR_TIMEOUT, the leaf failing the job at its link's deadline (min(timeout/4,
 * 5 s)) or the ranks at their own join timeout, and the leaf stays up.  Once the root resumes,
 * the leaf serves a new job.
 */
TEST(TreeFaults, AJobJoiningThroughAStoppedRootFailsAndTheLeafServesOnceItResumes)
{
    harness::ExpectErrors errors_expected("the join through a stopped root times out");
    const std::vector<int> parent = {-1, 0};
    Tree tree;
    ASSERT_TRUE(tree_start(&tree, {parent, {}}, tree_args(kSmallChunk)));
    expect_serves(tree, parent, 1);
    ASSERT_EQ(kill(tree.sw[0].pid, SIGSTOP), 0);
    const Topology on_leaf = {parent, {1, 1}};
    const std::string failures =
        refused_on_every_rank(tree, on_leaf, INCMOE_ERR_TIMEOUT, "joining through a stopped root");
    ASSERT_EQ(kill(tree.sw[0].pid, SIGCONT), 0);
    EXPECT_EQ(failures, "");
    EXPECT_TRUE(still_running(tree.sw[1])) << "the leaf died while its root was stopped";
    expect_serves(tree, parent, 1);
    tree_stop(&tree);
}

/* ------------------------------------------------------------------------ */
/* a switch port that breaks the protocol                                    */

/* A fake child switch beneath the root covering ranks 2 and 3 of a four-rank job: it joins with
   a TREE_JOIN and then says what its misbehave function has it say. */
struct FakeChild {
    RawClient raw;
    uint64_t job;
    uint32_t window = 64; /* announced in its TREE_JOIN: what the root may send it ahead */

    bool join(const std::string &root_addr, uint64_t job_id)
    {
        job = job_id;
        if (!raw.connect(root_addr))
            return false;
        inc_wire_tree_join tj = {};
        tj.nranks = 4;
        tj.count = 2;
        tj.timeout_ms = 10000;
        tj.window = window;
        memcpy(tj.token, raw.token_, sizeof(tj.token));
        std::string payload((const char *)&tj, sizeof(tj));
        for (uint32_t r : {2u, 3u}) {
            uint32_t rec[2] = {r, 0};
            payload.append((const char *)rec, sizeof(rec));
        }
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, WIRE_MSG_TREE_JOIN, job);
        h.rank = 2;
        h.length = payload.size();
        raw.send(h, payload.data(), payload.size());
        return raw.wait_for(WIRE_MSG_JOIN_ACK, nullptr, 5000);
    }
    /* A dispatch header of epoch 1 from this port, hdr.rank its key. */
    inc_wire_hdr header(inc_wire_msg_t msg, size_t length)
    {
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, msg, job);
        h.rank = 2;
        h.stream = INCMOE_STREAM_DISPATCH;
        h.epoch = 1;
        h.length = length;
        return h;
    }
    /* Rank r's dispatch POST, relayed: `rows` rows of row_bytes bytes, each for ranks 0 and 1. */
    void post(uint32_t r, uint64_t rows = 1, uint64_t row_bytes = 16, uint64_t capacity = 10)
    {
        inc_wire_dc_post p = {};
        p.rows = rows;
        p.row_bytes = row_bytes;
        p.capacity = capacity;
        p.nranks = 4;
        uint32_t count[4] = {(uint32_t)rows, (uint32_t)rows, 0, 0};
        std::string payload((const char *)&p, sizeof(p));
        payload.append((const char *)count, sizeof(count));
        inc_wire_hdr h = header(WIRE_MSG_POST, payload.size());
        h.rank = r;
        h.total = rows;
        h.sig = inc_wire_signature(INCMOE_STREAM_DISPATCH, INCMOE_UINT8, INCMOE_SUM,
                                   std::vector<uint64_t>(4, 0).data(), 4);
        raw.send(h, payload.data(), payload.size());
    }
    /* Rank 2's chunk 0: its set (ranks 0 and 1), then rows_out rows. */
    void chunk(size_t rows_out)
    {
        uint64_t set = 0x3;
        std::string payload((const char *)&set, sizeof(set));
        payload.append(16 * rows_out, 'r');
        inc_wire_hdr h = header(WIRE_MSG_DATA, payload.size());
        h.root = 2;
        h.total = 1;
        raw.send(h, payload.data(), payload.size());
    }
};

/* One row dispatched on comm to the ranks of `set` into recv, of room for `capacity` rows, and
   waited for: its status. */
incmoe_status_t dispatch_row(incmoe_comm_t *comm, std::vector<unsigned char> &row,
                             std::vector<unsigned char> &recv, uint64_t capacity, uint64_t set)
{
    incmoe_mr_t *ms, *mr;
    incmoe_req_t req;
    incmoe_status_t st = incmoe_mem_register(comm, row.data(), row.size(), &ms);
    if (st == INCMOE_OK)
        st = incmoe_mem_register(comm, recv.data(), recv.size(), &mr);
    if (st == INCMOE_OK) {
        incmoe_dispatch_params_t dp = {};
        dp.send_mr = ms;
        dp.nrows = 1;
        dp.row_bytes = row.size();
        dp.sets = &set;
        dp.recv_mr = mr;
        dp.capacity = capacity;
        st = incmoe_dispatch(comm, &dp, &req);
    }
    if (st == INCMOE_OK)
        st = incmoe_wait(comm, &req);
    return st;
}

/* Rank `proc` of a four-rank job on the switch at `root` dispatches its one row (dispatch_row).
   *comm is then the caller's to read and destroy; null where comm_create failed, with its
   status. */
incmoe_status_t dispatch_one_row(const std::string &root, unsigned long long job, int proc,
                                 std::vector<unsigned char> &row, std::vector<unsigned char> &recv,
                                 uint64_t capacity, uint64_t set, incmoe_comm_t **comm)
{
    incmoe_comm_params_t p = {};
    p.switch_addr = root.c_str();
    p.job_id = job;
    p.rank = proc;
    p.nranks = 4;
    incmoe_status_t st = incmoe_comm_create(&p, comm);
    if (st != INCMOE_OK) {
        *comm = nullptr;
        return st;
    }
    return dispatch_row(*comm, row, recv, capacity, set);
}

/* Ranks 0 and 1 on the root dispatch a row to every rank next to a fake child switch covering
   ranks 2 and 3, which misbehaves once it has the real ranks' POSTs: both real ranks fail with
   a reason that names what the switch port did, and the root serves the next job. */
void expect_switch_port_breaks_dispatch(const harness::SwitchProc &root, const std::string &what,
                                        const std::function<void(FakeChild &)> &misbehave,
                                        uint32_t window = 64)
{
    const unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        3,
        [&](int proc) -> std::string {
            if (proc == 2) {
                FakeChild child;
                child.window = window;
                if (!child.join(root.addr, job))
                    return "the fake child switch got no JOIN_ACK";
                if (!child.raw.wait_for(WIRE_MSG_POST, nullptr, 5000))
                    return "the root relayed no POST to the fake child switch";
                child.raw.progress(200); /* the other real rank's POST too */
                misbehave(child);
                if (!child.raw.wait_for(WIRE_MSG_ERROR, nullptr, 5000))
                    return "the fake child switch got no ERROR";
                return "";
            }
            std::vector<unsigned char> rows(16, 'x'), recv(16 * 10);
            incmoe_comm_t *comm;
            incmoe_status_t st = dispatch_one_row(root.addr, job, proc, rows, recv, 10, 0xf, &comm);
            if (!comm)
                return std::string("comm_create: ") + incmoe_strerror(st);
            std::string text = comm_text(comm);
            incmoe_comm_destroy(comm);
            if (st == INCMOE_OK || text.find(what) == std::string::npos)
                return std::string("got ") + incmoe_strerror(st) + " '" + text + "', want '" +
                       what + "'";
            return "";
        },
        30);
    EXPECT_EQ(harness::failures(res), "") << what;
    Tree one;
    one.sw = {root};
    expect_serves(one, {-1}, 0);
}

const uint64_t kFloodChunk = 64 * 1024, kFloodRowBytes = 4096, kFloodChunks = 40;

uint64_t flood_rows_per_chunk()
{
    return inc_wire_dc_rows_per_chunk(kFloodRowBytes, 4, kFloodChunk);
}

/* The fake child posts for rank 2 (kFloodChunks chunks of rows for ranks 0 and 1) and rank 3
   (no row), sends all but rank 2's last chunk at once, then fails the job. */
std::string fake_child_floods_then_fails(FakeChild &child)
{
    const uint64_t per = flood_rows_per_chunk(), rows = per * kFloodChunks;
    for (uint32_t r : {2u, 3u})
        child.post(r, r == 2 ? rows : 0, kFloodRowBytes, 0);
    if (!child.raw.wait_for(WIRE_MSG_POST, nullptr, 5000))
        return "the root relayed no POST to the fake child switch";
    child.raw.progress(200); /* the other real rank's POST too */
    for (uint64_t c = 0; c + 1 < kFloodChunks; c++) {
        std::string payload;
        for (uint64_t j = 0; j < per; j++)
            payload.append("\x03\0\0\0\0\0\0\0", 8); /* set: ranks 0, 1 */
        payload.append(per * kFloodRowBytes, 'r');
        inc_wire_hdr h = child.header(WIRE_MSG_DATA, payload.size());
        h.root = 2;
        h.chunk = (uint32_t)c;
        h.offset = c * per;
        h.total = rows;
        child.raw.send(h, payload.data(), payload.size());
    }
    const std::string why = "the fake child gives up";
    inc_wire_hdr h;
    inc_wire_hdr_init(&h, WIRE_MSG_ERROR, child.job);
    h.status = INCMOE_ERR_PEER_FAILED;
    h.rank = 2;
    h.length = why.size();
    child.raw.send(h, why.data(), why.size());
    child.raw.progress(1000);
    return "";
}

/* Real rank `proc` (0 or 1) of the flood's job dispatches one row to ranks 0 and 1, sees the
   dispatch fail with the fake child's reason, and checks that nothing of its receive buffer
   changed from then to the end of incmoe_comm_destroy. */
std::string rank_sees_no_rows_after_failing(const std::string &root, unsigned long long job,
                                            int proc)
{
    const uint64_t rows = flood_rows_per_chunk() * kFloodChunks + 2;
    std::vector<unsigned char> row(kFloodRowBytes, (unsigned char)('a' + proc));
    std::vector<unsigned char> recv(rows * kFloodRowBytes, kCanary);
    incmoe_comm_t *comm;
    incmoe_status_t st = dispatch_one_row(root, job, proc, row, recv, rows, 0x3, &comm);
    if (!comm)
        return std::string("comm_create: ") + incmoe_strerror(st);
    const std::vector<unsigned char> failed_with(recv);
    const std::string text = comm_text(comm);
    usleep(300 * 1000); /* what the root queued toward this rank keeps coming */
    incmoe_comm_destroy(comm);
    if (st == INCMOE_OK || text.find("the fake child gives up") == std::string::npos)
        return std::string("got ") + incmoe_strerror(st) + " '" + text +
               "', want the fake child's reason";
    size_t changed = 0;
    for (size_t b = 0; b < recv.size(); b++)
        changed += recv[b] != failed_with[b];
    if (changed > 0)
        return std::to_string(changed) +
               " bytes of the receive buffer were written after the dispatch failed";
    return "";
}

/*
 * Ranks 0 and 1 on the root dispatch with a fake child switch covering ranks 2 and 3, which
 * sends all but the last chunk of rank 2's rows of 4 KiB for ranks 0 and 1 at once, then an
 * ERROR: the root fails the job while its queues toward ranks 0 and 1 still hold many of those
 * rows (8 KiB UCX TCP buffers), and they keep coming after the ERROR.  Neither rank's receive
 * buffer changes from the moment its dispatch failed to the end of incmoe_comm_destroy: a
 * caller may free it then (incmoe-perf does; on the testbed such rows landed in freed memory,
 * a segfault in a UCX handler during incmoe_comm_destroy).
 */
TEST(TreeDc, RowsComingAfterADispatchFailedAreNeverWritten)
{
    harness::ExpectErrors errors_expected("a fake child switch fails the dispatch");
    setenv("UCX_TCP_SNDBUF", "8k", 1); /* the switch and the ranks inherit them */
    setenv("UCX_TCP_RCVBUF", "8k", 1);
    harness::SwitchProc root;
    ASSERT_TRUE(harness::switch_start(&root, tree_args(kFloodChunk)));
    const unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        3,
        [&](int proc) -> std::string {
            if (proc < 2)
                return rank_sees_no_rows_after_failing(root.addr, job, proc);
            FakeChild child;
            if (!child.join(root.addr, job))
                return "the fake child switch got no JOIN_ACK";
            return fake_child_floods_then_fails(child);
        },
        60);
    unsetenv("UCX_TCP_SNDBUF");
    unsetenv("UCX_TCP_RCVBUF");
    EXPECT_EQ(harness::failures(res), "");
    int status = harness::switch_stop(&root);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the root did not exit cleanly";
}

/* The fake child posts for ranks 2 and 3, then sends nothing until the root's ERROR. */
void posts_and_sends_nothing(FakeChild &c)
{
    c.post(2);
    c.post(3);
    c.raw.wait_for(WIRE_MSG_ERROR, nullptr, 3 * kProgressMs);
}

/* Each is a message a switch port may not send, or sends out of shape: the job fails at once
   with a reason naming the port and what it did, and the switch lives on. */
TEST(TreeDc, ASwitchPortThatBreaksTheProtocolFailsTheJobWithAReason)
{
    harness::ExpectErrors errors_expected("a port breaks the protocol: the job fails");
    harness::SwitchProc root;
    ASSERT_TRUE(harness::switch_start(&root, tree_args(kSmallChunk)));
    expect_switch_port_breaks_dispatch(root, "switch port of rank 2 sent a message claiming",
                                       [](FakeChild &c) { c.post(0); });
    expect_switch_port_breaks_dispatch(root, "before the switch sent an OK plan",
                                       [](FakeChild &c) { c.chunk(2); });
    expect_switch_port_breaks_dispatch(root, "the switch port of rank 2's chunk 0",
                                       [](FakeChild &c) {
                                           c.post(2);
                                           c.post(3);
                                           c.raw.progress(200);
                                           c.chunk(0); /* its row is for ranks 0, 1 */
                                       });
    /* Every rank posted, and the port never sends its ranks' chunks: the progress timeout ends
       the stall with a reason naming what is missing, where the ranks used to wait for ever. */
    expect_switch_port_breaks_dispatch(
        root,
        "every rank posted it, and none of its messages came to this switch within 5.0 s; "
        "chunk 0 of rank 2 from the switch port of rank 2 next",
        posts_and_sends_nothing);
    /* A child switch that never returns its window of 1: the root's second chunk toward it
       waits, and the progress timeout ends the stall naming the spent window. */
    expect_switch_port_breaks_dispatch(
        root,
        "every rank posted it, and none of its messages came to this switch within 5.0 s; the "
        "window of the switch port of rank 2 is spent",
        posts_and_sends_nothing, 1);
    expect_switch_port_breaks_dispatch(
        root, "the switch port of rank 2 sent SMALL", [](FakeChild &c) {
            std::string junk(64, '\0');
            inc_wire_hdr h = c.header(WIRE_MSG_SMALL, junk.size());
            h.sig = inc_wire_signature(INCMOE_STREAM_DISPATCH, INCMOE_UINT8, INCMOE_SUM,
                                       std::vector<uint64_t>(4, 0).data(), 4);
            c.raw.send(h, junk.data(), junk.size());
        });
    int status = harness::switch_stop(&root);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the root did not exit cleanly";
}

/* ------------------------------------------------------------------------ */
/* the combine's window between switches (switch/dc_window.c)                */

/* Elements of a partial row in the window tests: 4000-byte partial rows fill a 4 KiB chunk
   alone, so each of an owner's rows is a set chunk of its own. */
const uint64_t kWinFloats = 1000;

/* Ranks 0 and 1 as raw clients on the root and a fake child switch covering ranks 2 and 3,
   announcing a window of 1, in one job of 4: each speaks the wire by hand, so what crosses the
   link is the test's to send and to see. */
struct WindowJob {
    RawClient r[2];
    FakeChild child;
    uint64_t job = harness::unique_job_id();

    std::string join(const std::string &root)
    {
        child.window = 1;
        for (uint32_t k = 0; k < 2; k++) {
            if (!r[k].connect(root))
                return "a raw rank could not connect";
            r[k].join(job, k, 4);
        }
        if (!child.join(root, job))
            return "the fake child switch got no JOIN_ACK";
        for (auto &rk : r)
            if (!rk.wait_for(WIRE_MSG_JOIN_ACK, nullptr, 5000))
                return "a raw rank got no JOIN_ACK";
        return "";
    }
    /* Rank `rank`'s combine POST of epoch 1 on `c`: rows rows, sent[d] of them dispatched to d,
       recvd[s] rows received from s, partials of kWinFloats float32 summed. */
    void post(RawClient &c, uint32_t rank, uint64_t rows, std::vector<uint32_t> sent,
              std::vector<uint32_t> recvd)
    {
        inc_wire_dc_post p = {};
        p.rows = rows;
        p.row_bytes = 4 * kWinFloats;
        p.dispatch_epoch = 1;
        p.row_count = kWinFloats;
        p.nranks = 4;
        p.dtype = INCMOE_FLOAT32;
        p.redop = INCMOE_SUM;
        std::string payload((const char *)&p, sizeof(p));
        payload.append((const char *)sent.data(), 4 * sent.size());
        payload.append((const char *)recvd.data(), 4 * recvd.size());
        inc_wire_hdr h = msg(WIRE_MSG_POST, rank, payload.size());
        h.total = rows;
        c.send(h, payload.data(), payload.size());
    }
    /* A combine message of epoch 1 from `rank` (a raw rank, or the child's key 2). */
    inc_wire_hdr msg(inc_wire_msg_t type, uint32_t rank, size_t length)
    {
        inc_wire_hdr h;
        inc_wire_hdr_init(&h, type, job);
        h.rank = rank;
        h.stream = INCMOE_STREAM_COMBINE;
        h.epoch = 1;
        h.length = length;
        h.sig = inc_wire_signature(INCMOE_STREAM_COMBINE, INCMOE_UINT8, INCMOE_SUM,
                                   std::vector<uint64_t>(4, 0).data(), 4);
        return h;
    }
    /* A DATA of owner root's chunk c (its row c) from `rank` on `c`: a set chunk, or a partial
       row of `value`s (total: the rows its sender's count gives). */
    void data(RawClient &to, uint32_t rank, uint32_t root, uint32_t c, uint64_t total,
              const std::string &bytes)
    {
        inc_wire_hdr h = msg(WIRE_MSG_DATA, rank, bytes.size());
        h.root = root;
        h.chunk = c;
        h.offset = c;
        h.total = total;
        h.dtype = INCMOE_FLOAT32;
        h.redop = INCMOE_SUM;
        to.send(h, bytes.data(), bytes.size());
    }
    /* The child has both real ranks' POSTs, relayed: its own make the plan. */
    bool child_has_posts()
    {
        return wait_count(child.raw, 5000, [](const RawMsg &m) {
                   return m.hdr.msg == WIRE_MSG_POST && m.hdr.stream == INCMOE_STREAM_COMBINE;
               }) >= 2;
    }
    /* Every rank's combine POST: rank 0's and rank 2's (through the child) as given, ranks 1
       and 3 with no rows; rank 2's after the child had the others'.  "" or why not. */
    std::string post_all(uint64_t rows0, std::vector<uint32_t> sent0, std::vector<uint32_t> recvd0,
                         uint64_t rows2, std::vector<uint32_t> sent2, std::vector<uint32_t> recvd2)
    {
        const std::vector<uint32_t> none = {0, 0, 0, 0};
        post(r[0], 0, rows0, sent0, recvd0);
        post(r[1], 1, 0, none, none);
        if (!child_has_posts())
            return "the child switch never had ranks 0 and 1's POSTs";
        post(child.raw, 2, rows2, sent2, recvd2);
        post(child.raw, 3, 0, none, none);
        return "";
    }
    /* The k-th (from 0) of c's messages that pass `is`; null if there are not that many. */
    static const RawMsg *nth(const RawClient &c, const std::function<bool(const RawMsg &)> &is,
                             size_t k)
    {
        for (const RawMsg &m : c.received)
            if (is(m) && k-- == 0)
                return &m;
        return nullptr;
    }
    /* How many of c's messages pass `is` once at least `want` do or timeout_ms passed. */
    static size_t wait_count(RawClient &c, int timeout_ms,
                             const std::function<bool(const RawMsg &)> &is, size_t want = 2)
    {
        const double end = inc_now_s() + timeout_ms / 1000.0;
        for (;;) {
            size_t n = 0;
            for (const RawMsg &m : c.received)
                n += is(m);
            if (n >= want || inc_now_s() > end)
                return n;
            c.progress(10);
        }
    }
};

std::string set_of(uint64_t set)
{
    return std::string((const char *)&set, sizeof(set));
}

std::string partial_row(float value)
{
    std::vector<float> row(kWinFloats, value);
    return std::string((const char *)row.data(), 4 * row.size());
}

/* The reason of the first ERROR c got, or what it got instead. */
std::string error_text(RawClient &c)
{
    RawMsg m;
    if (!c.wait_for(WIRE_MSG_ERROR, &m, 5000))
        return "no ERROR";
    return m.payload;
}

/*
 * A child switch that announced a window of 1 sends the root two of rank 2's set chunks whose
 * items wait for rank 0's partials, which never come: the second is past rank 2's window on
 * that link, and the root fails the job at once with a reason naming it (not an unbounded
 * queue), every port hears it, and the root serves the next job.
 */
TEST(TreeDc, AChildSwitchPastItsCombineWindowFailsTheJobWithAReason)
{
    harness::ExpectErrors errors_expected("a child switch overruns its combine window");
    ASSERT_EQ(inc_wire_dc_rows_per_chunk(4 * kWinFloats, 4, kSmallChunk), 1u);
    harness::SwitchProc root;
    ASSERT_TRUE(harness::switch_start(&root, tree_args(kSmallChunk, {"--timeout-ms", "20000"})));
    {
        WindowJob w;
        ASSERT_EQ(w.join(root.addr), "");
        ASSERT_EQ(w.post_all(0, {0, 0, 0, 0}, {0, 0, 2, 0}, 2, {2, 0, 0, 0}, {0, 0, 0, 0}), "");
        for (uint32_t c = 0; c < 2; c++)
            w.data(w.child.raw, 2, 2, c, 2, set_of(0x1)); /* rank 2's rows, for rank 0 */
        const std::string want = "the child switch exceeded the window of 1 on combine set chunks "
                                 "of rank 2";
        for (RawClient *c : {&w.r[0], &w.r[1], &w.child.raw})
            EXPECT_NE(error_text(*c).find(want), std::string::npos) << error_text(*c);
    }
    Tree one;
    one.sw = {root};
    expect_serves(one, {-1}, 0);
}

/*
 * The root sends a child switch that announced a window of 1 rank 0's three set chunks (each
 * row's set names rank 2, beyond the child) one at a time: the second only after the child's
 * CREDIT naming rank 0, and so on; each reduced row goes to rank 0 exactly as the child's partial
 * gave it.  The check that nothing more comes before a CREDIT watches the link for 300 ms
 * after rank 0 has the first result, by which time the root had rank 0's other set chunks
 * (they were sent before the child's partial could be): a root without the window sends them
 * there at once.
 */
TEST(TreeDc, TheRootSendsAChildSwitchSetChunksOnlyWithinItsWindow)
{
    harness::ExpectErrors errors_expected("the raw clients leave without finishing the job");
    harness::SwitchProc root;
    ASSERT_TRUE(harness::switch_start(&root, tree_args(kSmallChunk, {"--timeout-ms", "20000"})));
    {
        WindowJob w;
        ASSERT_EQ(w.join(root.addr), "");
        ASSERT_EQ(w.post_all(3, {0, 0, 3, 0}, {0, 0, 0, 0}, 0, {0, 0, 0, 0}, {3, 0, 0, 0}), "");
        ASSERT_TRUE(w.r[0].wait_for(WIRE_MSG_PLAN, nullptr, 5000));
        for (uint32_t c = 0; c < 3; c++)
            w.data(w.r[0], 0, 0, c, 3, set_of(0x4));
        auto set_chunk = [](const RawMsg &m) {
            return m.hdr.msg == WIRE_MSG_FWD && m.hdr.stream == INCMOE_STREAM_COMBINE;
        };
        auto result = set_chunk;
        for (uint32_t c = 0; c < 3; c++) {
            ASSERT_EQ(WindowJob::wait_count(w.child.raw, 5000, set_chunk, c + 1), c + 1)
                << "set chunk " << c;
            const RawMsg got = *WindowJob::nth(w.child.raw, set_chunk, c);
            EXPECT_EQ(got.hdr.root, 0u);
            EXPECT_EQ(got.hdr.chunk, c);
            EXPECT_EQ(got.payload, set_of(0x4));
            w.data(w.child.raw, 2, 0, c, 3, partial_row(1.5f + c));
            ASSERT_EQ(WindowJob::wait_count(w.r[0], 5000, result, c + 1), c + 1) << "result " << c;
            const RawMsg res = *WindowJob::nth(w.r[0], result, c);
            EXPECT_EQ(res.hdr.chunk, c);
            EXPECT_EQ(res.payload, partial_row(1.5f + c)) << "chunk " << c;
            w.child.raw.progress(300);
            EXPECT_EQ(WindowJob::wait_count(w.child.raw, 0, set_chunk, 0), c + 1)
                << "the root sent set chunk " << c + 1 << " past the window";
            inc_wire_hdr credit = w.msg(WIRE_MSG_CREDIT, 2, 1);
            credit.root = 0;
            w.child.raw.send(credit);
        }
        ASSERT_EQ(WindowJob::wait_count(
                      w.r[0], 5000,
                      [](const RawMsg &m) {
                          return m.hdr.msg == WIRE_MSG_CREDIT &&
                                 m.hdr.stream == INCMOE_STREAM_COMBINE;
                      },
                      3),
                  3u)
            << "rank 0's set chunks did not all finish";
    }
    Tree one;
    one.sw = {root};
    expect_serves(one, {-1}, 0);
}

/* Rank r dispatches one row to every rank: "" if the switch refused it for memory with its
   reason, else what happened. */
std::string dispatch_refused_for_memory(Rank &r)
{
    std::vector<unsigned char> row(16, 'x'), recv(16 * (size_t)r.n);
    incmoe_status_t st = dispatch_row(r.comm, row, recv, (uint64_t)r.n, (1ull << r.n) - 1);
    const std::string text = comm_text(r.comm);
    if (st != INCMOE_ERR_NO_MEMORY || text.find("dispatch and combine need") == std::string::npos)
        return std::string("got ") + incmoe_strerror(st) + " '" + text +
               "', want the root's refusal for memory";
    return "";
}

/*
 * What the root admits for dispatch and combine holds what its children may send it: per owner
 * beyond a link, that link's window of set chunks, and per item that took one, a partial of
 * each child (switch/membership.c, job_dc_memory_bound), no longer credits x N chunks per
 * switch port.  At 4 ranks on two leaves, 4 KiB chunks and 2 credits the root's bounds are
 * 148,224 bytes (the job's) and 86,016 + 65,536 x window (dispatch and combine's): 299,776
 * bytes in all with the leaves' window of 1, 4,428,544 with 64 (and 365,312 at any window when
 * the combine's chunks between switches counted the credits).  A root with 512 KiB refuses the
 * first dispatch of a job whose leaves announced 64, and runs one whose leaves announced 1,
 * exact, through many chunks and three combines at once; the switch fails a job whose memory
 * would pass its bound (job_alloc), so exact results mean the bound held.
 */
TEST(TreeDc, TheRootAdmitsDispatchAndCombineByItsLeavesWindows)
{
    const Topology topo = two_leaves_of_two();
    const uint64_t chunk = 4096;
    for (const char *window : {"64", "1"}) {
        harness::ExpectErrors errors_expected("the root refuses what its leaves' windows need");
        const std::vector<std::string> leaf = {"--credits", "2", "--link-window", window};
        Tree tree;
        ASSERT_TRUE(tree_start(&tree, topo, tree_args(chunk, {"--credits", "2"}),
                               {{"--max-memory", "512K"}, leaf, leaf}));
        const bool refused = std::string(window) == "64";
        const unsigned long long job = harness::unique_job_id();
        TreeOrder order(topo);
        auto res = harness::run_ranks(
            (int)topo.at.size(),
            [&](int me) {
                return as_rank(
                    tree, topo, job, me, kCreateTimeoutMs, &order, chunk, nullptr,
                    [&](Rank &r) -> std::string {
                        if (refused)
                            return dispatch_refused_for_memory(r);
                        std::vector<DcCase> cases;
                        uint64_t seed = 950;
                        for (DcSets sh : {DC_MIXED, DC_RANDOM, DC_REMOTE})
                            cases.push_back(
                                dc_case(*r.order, dc_rows(r.n, 200, true), 64, sh, seed++));
                        return dc_rounds<F32>(r, cases, 32, INCMOE_SUM);
                    },
                    refused);
            },
            60);
        if (refused) {
            /* A rank whose JOIN_ACK the load delayed may see the job fail while it creates: its
               create gives the job's status; the others checked the reason. */
            const std::string late =
                std::string("comm_create: ") + incmoe_strerror(INCMOE_ERR_NO_MEMORY);
            int saw_reason = 0;
            for (std::string &e : res) {
                saw_reason += e.empty();
                e = e == late ? "" : e;
            }
            EXPECT_GT(saw_reason, 0) << "no rank's dispatch was refused with the reason";
        }
        EXPECT_EQ(harness::failures(res), "") << "window " << window;
        for (auto &sw : tree.sw)
            EXPECT_TRUE(still_running(sw));
        tree_stop(&tree);
    }
}

} // namespace
