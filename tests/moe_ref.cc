/* moe_ref.cc - see moe_ref.h.  The reference shares no code with the layer. */
#include "moe_ref.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"

extern "C" {
#include "base/dtype.h"
}

namespace moeref
{

static void store(std::vector<uint8_t> &buf, size_t i, double v, incmoe_dtype_t dtype)
{
    switch (dtype) {
    case INCMOE_FLOAT16: {
        uint16_t h = inc_dtype_float_to_half((float)v);
        memcpy(&buf[i * 2], &h, 2);
        break;
    }
    case INCMOE_BFLOAT16: {
        uint16_t h = inc_dtype_float_to_bf16((float)v);
        memcpy(&buf[i * 2], &h, 2);
        break;
    }
    default: {
        float f = (float)v;
        memcpy(&buf[i * 4], &f, 4);
        break;
    }
    }
}

double to_double(const void *base, size_t i, incmoe_dtype_t dtype)
{
    const uint8_t *b = static_cast<const uint8_t *>(base);
    uint16_t h;
    float f;
    switch (dtype) {
    case INCMOE_FLOAT16:
        memcpy(&h, b + i * 2, 2);
        return inc_dtype_half_to_float(h);
    case INCMOE_BFLOAT16:
        memcpy(&h, b + i * 2, 2);
        return inc_dtype_bf16_to_float(h);
    default:
        memcpy(&f, b + i * 4, 4);
        return f;
    }
}

Problem make_problem(const Shape &s, const std::vector<int> &counts, uint64_t seed,
                     int all_remote_every)
{
    Problem p;
    p.s = s;
    p.counts = counts;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0), gw(0.05, 1.0);
    size_t es = incmoe_dtype_size(s.dtype);
    auto fill = [&](std::vector<uint8_t> &v, size_t n, double scale) {
        v.assign(n * es, 0);
        for (size_t i = 0; i < n; i++)
            store(v, i, u(rng) * scale, s.dtype);
    };
    fill(p.wg, (size_t)s.E * s.I * s.H, 2.0 / sqrt(s.H));
    fill(p.wu, (size_t)s.E * s.I * s.H, 2.0 / sqrt(s.H));
    fill(p.wd, (size_t)s.E * s.H * s.I, 2.0 / sqrt(s.I));
    int per = s.E / s.N;
    p.x.resize(s.N);
    p.ids.resize(s.N);
    p.w.resize(s.N);
    for (int r = 0; r < s.N; r++) {
        int T = counts[r];
        fill(p.x[r], (size_t)T * s.H, 1.0);
        p.ids[r].resize((size_t)T * s.k);
        p.w[r].resize((size_t)T * s.k);
        for (int t = 0; t < T; t++) {
            std::vector<int> pool;
            bool remote =
                all_remote_every > 0 && t % all_remote_every == 0 && s.N > 1 && s.E - per >= s.k;
            for (int e = 0; e < s.E; e++)
                if (!remote || e / per != r)
                    pool.push_back(e);
            std::shuffle(pool.begin(), pool.end(), rng);
            for (int a = 0; a < s.k; a++) {
                p.ids[r][(size_t)t * s.k + a] = pool[a];
                p.w[r][(size_t)t * s.k + a] = (float)gw(rng);
            }
        }
    }
    return p;
}

void local_weights(const Problem &p, int rank, std::vector<uint8_t> *g, std::vector<uint8_t> *u,
                   std::vector<uint8_t> *d)
{
    const Shape &s = p.s;
    size_t es = incmoe_dtype_size(s.dtype);
    int per = s.E / s.N;
    size_t m = (size_t)s.I * s.H * es;
    g->assign(p.wg.begin() + rank * per * m, p.wg.begin() + (rank + 1) * per * m);
    u->assign(p.wu.begin() + rank * per * m, p.wu.begin() + (rank + 1) * per * m);
    d->assign(p.wd.begin() + rank * per * m, p.wd.begin() + (rank + 1) * per * m);
}

std::vector<double> reference(const Problem &p, int rank, std::vector<double> *mag)
{
    const Shape &s = p.s;
    int T = p.counts[rank];
    std::vector<double> y((size_t)T * s.H, 0.0), a(s.I), aabs(s.I);
    if (mag != nullptr)
        mag->assign((size_t)T * s.H, 0.0);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < s.k; c++) {
            int e = p.ids[rank][(size_t)t * s.k + c];
            double g = p.w[rank][(size_t)t * s.k + c];
            for (int i = 0; i < s.I; i++) {
                double gate = 0, up = 0, gabs = 0, uabs = 0;
                for (int h = 0; h < s.H; h++) {
                    double xv = to_double(p.x[rank].data(), (size_t)t * s.H + h, s.dtype);
                    size_t wi = ((size_t)e * s.I + i) * s.H + h;
                    double wg = to_double(p.wg.data(), wi, s.dtype);
                    double wu = to_double(p.wu.data(), wi, s.dtype);
                    gate += wg * xv;
                    up += wu * xv;
                    gabs += fabs(wg * xv);
                    uabs += fabs(wu * xv);
                }
                double silu = gate / (1.0 + exp(-gate));
                a[i] = silu * up;
                /* First-order size of a_i's rounding error (|SiLU'| <= 1.1). */
                aabs[i] = fabs(silu) * uabs + 1.1 * gabs * fabs(up);
            }
            for (int h = 0; h < s.H; h++) {
                double acc = 0, accabs = 0;
                for (int i = 0; i < s.I; i++) {
                    double wd = to_double(p.wd.data(), ((size_t)e * s.H + h) * s.I + i, s.dtype);
                    acc += wd * a[i];
                    accabs += fabs(wd) * aabs[i];
                }
                y[(size_t)t * s.H + h] += g * acc;
                if (mag != nullptr)
                    (*mag)[(size_t)t * s.H + h] += fabs(g) * accabs;
            }
        }
    }
    return y;
}

double rel_bound(incmoe_dtype_t dtype)
{
    /* fp32: accumulation-order noise; 16-bit: a few roundings of the partials
       and of the result, each at most one unit roundoff (2^-11 fp16, 2^-8 bf16). */
    switch (dtype) {
    case INCMOE_FLOAT16:
        return 4e-3;
    case INCMOE_BFLOAT16:
        return 2.5e-2;
    default:
        return 2e-5;
    }
}

std::string check_against_ref(const void *out, const std::vector<double> &ref,
                              const std::vector<double> &mag, int T, int H, incmoe_dtype_t dtype,
                              const char *what)
{
    double bound = rel_bound(dtype);
    for (int t = 0; t < T; t++) {
        double en = 0, rn = 0;
        for (int h = 0; h < H; h++) {
            double o = to_double(out, (size_t)t * H + h, dtype), r = ref[(size_t)t * H + h];
            if (!std::isfinite(o))
                return std::string(what) + ": non-finite output at token " + std::to_string(t);
            en += (o - r) * (o - r);
            rn += mag[(size_t)t * H + h] * mag[(size_t)t * H + h];
        }
        double rel = sqrt(en) / std::max(sqrt(rn), 1e-12);
        if (rel > bound) {
            std::ostringstream m;
            m << what << ": token " << t << " relative error " << rel << " > " << bound;
            return m.str();
        }
    }
    return "";
}

std::string check_cosine(const void *a, const void *b, int T, int H, incmoe_dtype_t dtype,
                         double min_cos, const char *what)
{
    for (int t = 0; t < T; t++) {
        double ab = 0, aa = 0, bb = 0;
        for (int h = 0; h < H; h++) {
            double x = to_double(a, (size_t)t * H + h, dtype);
            double y = to_double(b, (size_t)t * H + h, dtype);
            ab += x * y;
            aa += x * x;
            bb += y * y;
        }
        double cos = (aa == 0 && bb == 0) ? 1.0 : ab / std::max(sqrt(aa * bb), 1e-300);
        if (!(cos >= min_cos)) {
            std::ostringstream m;
            m << what << ": token " << t << " cosine " << cos << " < " << min_cos;
            return m.str();
        }
    }
    return "";
}

incmoe_comm_t *comm_create(const std::string &addr, unsigned long long job, int rank, int n,
                           incmoe_algo_t algo, std::string *err)
{
    harness::CommOptions opt;
    opt.algo = algo;
    incmoe_comm_t *comm = nullptr;
    incmoe_status_t st = harness::comm_create(addr, job, rank, n, &comm, opt);
    if (st != INCMOE_OK) {
        *err = std::string("comm_create (") +
               (algo == INCMOE_ALGO_INC    ? "inc"
                : algo == INCMOE_ALGO_RING ? "ring"
                                           : "a2a") +
               "): " + incmoe_strerror(st);
        return nullptr;
    }
    return comm;
}

incmoe_moe_forward_params_t forward_params(const Problem &p, int rank, incmoe_moe_mode_t mode,
                                           incmoe_moe_routing_t routing)
{
    incmoe_moe_forward_params_t f;
    memset(&f, 0, sizeof(f));
    f.field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_ROUTING | INCMOE_MOE_FWD_X |
                   INCMOE_MOE_FWD_TOPK_IDS | INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS;
    f.mode = mode;
    f.routing = routing;
    f.x = p.x[(size_t)rank].data();
    f.topk_ids = p.ids[(size_t)rank].data();
    f.topk_weights = p.w[(size_t)rank].data();
    f.counts = p.counts.data();
    return f;
}

void copy_output(const Problem &p, int rank, const void *view, std::vector<uint8_t> *out)
{
    size_t bytes = (size_t)p.counts[(size_t)rank] * p.s.H * incmoe_dtype_size(p.s.dtype);
    out->assign(static_cast<const uint8_t *>(view), static_cast<const uint8_t *>(view) + bytes);
}

incmoe_moe_params_t layer_params(const Shape &s, incmoe_comm_t *comm, const std::vector<uint8_t> &g,
                                 const std::vector<uint8_t> &u, const std::vector<uint8_t> &d,
                                 int max_tokens)
{
    incmoe_moe_params_t prm;
    incmoe_moe_params_init(&prm);
    prm.num_experts = s.E;
    prm.top_k = s.k;
    prm.hidden = s.H;
    prm.intermediate = s.I;
    prm.dtype = s.dtype;
    prm.comm = comm;
    prm.max_tokens = max_tokens;
    prm.w_gate = g.data();
    prm.w_up = u.data();
    prm.w_down = d.data();
    prm.timeout_ms = 20000;
    return prm;
}

void destroy_layer(incmoe_moe_t *L, std::string *err)
{
    incmoe_status_t st = incmoe_moe_destroy(L);
    if (err->empty() && st != INCMOE_OK)
        *err = std::string("destroy: ") + incmoe_strerror(st);
}

void run_on_ranks(int N, incmoe_algo_t algo,
                  const std::function<std::string(incmoe_comm_t *comm, int rank)> &body,
                  int timeout_s)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        N,
        [&](int rank) -> std::string {
            setenv("OPENBLAS_NUM_THREADS", "1", 1);
            std::string err;
            incmoe_comm_t *comm = comm_create(sw.addr, job, rank, N, algo, &err);
            if (comm == nullptr)
                return err;
            err = body(comm, rank);
            incmoe_comm_destroy(comm);
            return err;
        },
        timeout_s);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

} // namespace moeref
