/*
 * dc_ref.h - what the dispatch-and-combine suites (test_dispatch: the bulk
 * form, test_ll: the low-latency form) share: a case's rows, sets and exact
 * reference values, a rank's registered buffers, the combined rows' check and
 * the algorithms they run on.  The references are written here, not taken
 * from the library they check; each suite keeps what differs between the
 * forms (where rows land, how partials are laid out).
 */
#ifndef INCMOE_TEST_DC_REF_H
#define INCMOE_TEST_DC_REF_H

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "exact_int.h"
#include "harness.h"

extern "C" {
#include "incmoe/incmoe.h"
}

namespace dc_ref
{

const unsigned char kCanary = 0xA5;

/* What every case holds, the same in every process (made from a seed): n ranks, rows[s] rows
   of rank s with their destination sets, and the combine's partial rows. */
struct Sets {
    int n = 1;
    std::vector<size_t> rows;                /* T of each rank */
    std::vector<std::vector<uint64_t>> sets; /* [s][i * W + w] */
    size_t row_count = 8;                    /* elements of a partial row */
    incmoe_dtype_t dtype = INCMOE_FLOAT32;
    incmoe_redop_t op = INCMOE_SUM;
    unsigned seed = 1;

    size_t words() const
    {
        return INCMOE_SET_WORDS(n);
    }
    bool in_set(int s, size_t i, int d) const
    {
        return (sets[s][i * words() + (size_t)d / 64] >> (d % 64)) & 1;
    }
};

/* Row contents: byte j of row i of rank s. */
inline unsigned char row_byte(const Sets &c, int s, size_t i, size_t j)
{
    return (unsigned char)(s * 131 + i * 7 + j * 13 + c.seed);
}

/* A partial's element as an exact small integer drawn from the hash h: +-1 for a product (so
   products stay exact), else in [0, spread) for an unsigned type and [-spread / 2, spread / 2]
   for the others, so sums of a few stay exact in every type. */
inline long long small_exact(unsigned h, const Sets &c, unsigned spread)
{
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    bool is_unsigned =
        c.dtype == INCMOE_UINT8 || c.dtype == INCMOE_UINT32 || c.dtype == INCMOE_UINT64;
    if (c.op == INCMOE_PROD)
        return (h & 1) ? 1 : -1;
    return is_unsigned ? (long long)(h % spread) : (long long)(h % spread) - spread / 2;
}

/* A combined row of c.row_count elements: c.op over vals_of(e), in order, as exact integers, for
   each element e; zeros where vals_of(e) is empty. */
inline std::vector<unsigned char>
exact_row(const Sets &c, const std::function<std::vector<long long>(size_t e)> &vals_of)
{
    const size_t esize = incmoe_dtype_size(c.dtype);
    std::vector<unsigned char> out(c.row_count * esize, 0);
    for (size_t e = 0; e < c.row_count; e++) {
        const std::vector<long long> vals = vals_of(e);
        if (vals.empty())
            continue;
        long long acc = vals[0];
        for (size_t k = 1; k < vals.size(); k++)
            acc = c.op == INCMOE_SUM    ? acc + vals[k]
                  : c.op == INCMOE_PROD ? acc * vals[k]
                  : c.op == INCMOE_MAX  ? std::max(acc, vals[k])
                                        : std::min(acc, vals[k]);
        exact_int::put(c.dtype, acc, &out[e * esize]);
    }
    return out;
}

/* The shapes a row's set is drawn in. */
enum SetShape { RANDOM, EMPTY, ALL_RANKS, OWN_ONLY, OTHERS_ONLY, MIXED };

/* Draws c.sets for c.rows: each row's set in shape (MIXED: each row one of the first `mixed`
   shapes, from rng), a RANDOM set's ranks each by random_on(). */
inline void draw_sets(Sets &c, SetShape shape, std::mt19937_64 &rng, int mixed,
                      const std::function<bool()> &random_on)
{
    for (int s = 0; s < c.n; s++) {
        std::vector<uint64_t> sets(c.rows[s] * c.words(), 0);
        for (size_t i = 0; i < c.rows[s]; i++) {
            SetShape sh = shape == MIXED ? (SetShape)(rng() % mixed) : shape;
            for (int d = 0; d < c.n; d++) {
                bool on = sh == RANDOM        ? random_on()
                          : sh == ALL_RANKS   ? true
                          : sh == OWN_ONLY    ? d == s
                          : sh == OTHERS_ONLY ? d != s
                                              : false;
                if (on)
                    sets[i * c.words() + (size_t)d / 64] |= (uint64_t)1 << (d % 64);
            }
        }
        c.sets.push_back(sets);
    }
}

/* A combine of dispatch's rows, row_count elements each, from send into recv (fp32 sum unless
   given). */
inline incmoe_combine_params_t combine_params(const incmoe_req_t &dispatch, incmoe_mr_t *send,
                                              incmoe_mr_t *recv, size_t row_count,
                                              incmoe_dtype_t dtype = INCMOE_FLOAT32,
                                              incmoe_redop_t op = INCMOE_SUM)
{
    incmoe_combine_params_t p = {};
    p.dispatch = dispatch;
    p.send_mr = send;
    p.recv_mr = recv;
    p.row_count = row_count;
    p.dtype = dtype;
    p.op = op;
    return p;
}

/* A request's reason for its failure, "" when it has none. */
inline std::string req_why(incmoe_comm_t *comm, const incmoe_req_t *req)
{
    char text[300] = "";
    incmoe_req_error(comm, req, text, sizeof(text));
    return text;
}

/* One rank's registered buffers for a case, canaries in every receive range. */
struct Buffers {
    std::vector<unsigned char> send, recv, part, out;
    incmoe_mr_t *m_send = nullptr, *m_recv = nullptr, *m_part = nullptr, *m_out = nullptr;
    incmoe_comm_t *comm = nullptr;
    size_t capacity = 0; /* rows of recv the low-latency form fills */

    /* The communicator went (destroy deregisters what is left): nothing to deregister. */
    void forget()
    {
        m_send = m_recv = m_part = m_out = nullptr;
    }
    ~Buffers()
    {
        for (incmoe_mr_t *m : {m_send, m_recv, m_part, m_out})
            if (m != nullptr && comm != nullptr)
                incmoe_mem_deregister(comm, m);
    }
};

/* Combines dispatch with the partials in b.part into b.out (rank me's rows, then guard_rows
   of canaries), and checks each row against want_row(i), the canaries, and that the combine
   released its dispatch: "" or what differs. */
inline std::string
combine_and_check(incmoe_comm_t *comm, const Sets &c, int me, Buffers &b,
                  const incmoe_req_t *dispatch, size_t guard_rows,
                  const std::function<std::vector<unsigned char>(size_t i)> &want_row)
{
    const size_t pb = c.row_count * incmoe_dtype_size(c.dtype);
    b.out.assign((c.rows[me] + guard_rows) * pb, kCanary);
    CHECK_OK(incmoe_mem_register(comm, b.part.data(), b.part.size(), &b.m_part));
    CHECK_OK(incmoe_mem_register(comm, b.out.data(), b.out.size(), &b.m_out));
    incmoe_combine_params_t p = {};
    p.dispatch = *dispatch;
    p.send_mr = b.m_part;
    p.recv_mr = b.m_out;
    p.row_count = c.row_count;
    p.dtype = c.dtype;
    p.op = c.op;
    incmoe_req_t req;
    CHECK_OK(incmoe_combine(comm, &p, &req));
    incmoe_status_t st = incmoe_wait(comm, &req);
    if (st != INCMOE_OK)
        return harness::why(comm, st, "combine") + " / " + req_why(comm, &req);
    std::ostringstream err;
    for (size_t i = 0; i < c.rows[me]; i++) {
        auto want = want_row(i);
        if (memcmp(&b.out[i * pb], want.data(), pb) != 0) {
            err << "combined row " << i << " (" << incmoe_dtype_name(c.dtype) << " "
                << incmoe_redop_name(c.op) << ") differs at byte ";
            for (size_t j = 0; j < pb; j++)
                if (b.out[i * pb + j] != want[j]) {
                    err << j << ": got " << (int)b.out[i * pb + j] << " want " << (int)want[j];
                    break;
                }
            return err.str();
        }
    }
    for (size_t at = c.rows[me] * pb; at < b.out.size(); at++)
        if (b.out[at] != kCanary)
            return "combine wrote past the owner's rows";
    if (incmoe_dispatch_release(comm, dispatch) != INCMOE_ERR_INVALID_ARG)
        return "a combined dispatch was still kept";
    return "";
}

/* Dispatch, check, combine, check, on a case of the suite's type C: post_dispatch,
   check_dispatch and run_combine are the suite's own for C (found where the suite defines
   them, by argument-dependent lookup).  "" or what went wrong. */
template <class C> std::string dispatch_then_combine(incmoe_comm_t *comm, const C &c, int me)
{
    Buffers b;
    incmoe_req_t req;
    incmoe_status_t st = post_dispatch(comm, c, me, b, &req);
    if (st != INCMOE_OK)
        return harness::why(comm, st, "dispatch") + " / " + req_why(comm, &req);
    std::string e = check_dispatch(comm, c, me, b, &req);
    return e.empty() ? run_combine(comm, c, me, b, &req) : e;
}

/* fn(dtype, op) for each pair incmoe_reduce_supported allows, in order, until one fails:
   "" or its failure. */
inline std::string
each_reduction(const std::function<std::string(incmoe_dtype_t, incmoe_redop_t)> &fn)
{
    for (int dt = INCMOE_INT8; dt <= INCMOE_BFLOAT16; dt++)
        for (int op = INCMOE_SUM; op <= INCMOE_MIN; op++) {
            if (!incmoe_reduce_supported((incmoe_dtype_t)dt, (incmoe_redop_t)op))
                continue;
            std::string e = fn((incmoe_dtype_t)dt, (incmoe_redop_t)op);
            if (!e.empty())
                return e;
        }
    return "";
}

/* An algorithm the suites run on, with rendezvous (a low threshold) or eager transfers. */
struct Variant {
    incmoe_algo_t algo;
    bool rndv;
};

/* Every algorithm, eager and rendezvous. */
inline std::vector<Variant> all_variants()
{
    return {{INCMOE_ALGO_INC, false}, {INCMOE_ALGO_INC, true},  {INCMOE_ALGO_RING, false},
            {INCMOE_ALGO_RING, true}, {INCMOE_ALGO_A2A, false}, {INCMOE_ALGO_A2A, true}};
}

} // namespace dc_ref

#endif
