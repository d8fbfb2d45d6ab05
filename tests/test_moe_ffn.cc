/*
 * test_moe_ffn.cc - the CPU backend's expert compute (moe/cpu/ffn.c and what it uses),
 * compiled in (the library hides it), driven over one band of one rank as the compute
 * workers run it:
 * - every row's output is bitwise the output of the same row run alone (every expert's
 *   GEMM then has one row), whatever the chunk and the number of workers in the team
 *   (the columns each GEMM is split into): the layer's bitwise tests rest on it;
 * - the outputs match an fp64 reference of the SwiGLU experts (fp32, fp16 and bf16 weights,
 *   bf16 on the vdpbf16ps kernel where the CPU has AVX512-BF16; experts local and remote);
 * - every kernel level below this CPU's (cpu_isa_test_cap: AVX-512, AVX2, portable C, as a CPU
 *   without AVX-512 or AVX2 runs them) keeps both, and for fp32 and fp16 weights gives the
 *   very bits of every other level;
 * - the vectorised SwiGLU against SiLU in double, each element alike wherever it sits.
 */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "plan.h"

#include "base/dtype.h"
#include "cpu/cpu.h"
#include "cpu/gemm.h"
#include "cpu/swiglu.h"
}

/* The library's hook (moe/cpu/isa.c): the highest kernel level to run. */
static cpu_isa_t isa_cap = CPU_ISA_AVX512_BF16;
extern "C" cpu_isa_t cpu_isa_test_cap(void)
{
    return isa_cap;
}

namespace
{

/* One band of T rows on one rank, E experts of which `local` are this rank's. */
struct Problem {
    int H, I, E, k;
    incmoe_dtype_t dt;
    size_t es;
    std::vector<int> local;        /* ascending global ids */
    std::vector<float> wg, wu, wd; /* [n_local][I][H], [n_local][I][H], [n_local][H][I] */
    std::vector<uint16_t> wg16, wu16, wd16;
    std::vector<float> x;     /* [T][H], values representable in dt */
    std::vector<int32_t> ids; /* [T][k] */
    std::vector<float> w;     /* [T][k] */
    size_t T() const
    {
        return x.size() / (size_t)H;
    }
};

float rnd(std::mt19937 &g, float scale)
{
    return std::uniform_real_distribution<float>(-scale, scale)(g);
}

/* Rounds v to dt (its value as that type), and its bits in dt for a 2-byte array. */
float round_to(float v, incmoe_dtype_t dt, uint16_t *bits)
{
    if (dt == INCMOE_BFLOAT16) {
        *bits = inc_dtype_float_to_bf16(v);
        return inc_dtype_bf16_to_float(*bits);
    }
    if (dt == INCMOE_FLOAT16) {
        *bits = inc_dtype_float_to_half(v);
        return inc_dtype_half_to_float(*bits);
    }
    return v;
}

void fill(std::mt19937 &g, std::vector<float> &f, std::vector<uint16_t> &h, size_t n, float sc,
          incmoe_dtype_t dt)
{
    f.resize(n);
    h.resize(n);
    for (size_t i = 0; i < n; i++)
        f[i] = round_to(rnd(g, sc), dt, &h[i]);
}

Problem make_problem(int H, int I, int E, int k, size_t T, incmoe_dtype_t dt, unsigned seed)
{
    Problem p{H,  I,  E,  k,  dt, dt == INCMOE_FLOAT32 ? 4u : 2u, {}, {}, {}, {}, {},
              {}, {}, {}, {}, {}};
    std::mt19937 g(seed);
    for (int e = 0; e < E; e++)
        if (e % 3 != 1) /* a third of the experts are remote */
            p.local.push_back(e);
    size_t nl = p.local.size();
    fill(g, p.wg, p.wg16, nl * I * H, 1.0f / std::sqrt((float)H), dt);
    fill(g, p.wu, p.wu16, nl * I * H, 1.0f / std::sqrt((float)H), dt);
    fill(g, p.wd, p.wd16, nl * H * I, 1.0f / std::sqrt((float)I), dt);
    std::vector<uint16_t> xb;
    fill(g, p.x, xb, T * H, 2.0f, dt);
    for (size_t t = 0; t < T; t++) {
        std::vector<int32_t> perm(E);
        for (int e = 0; e < E; e++)
            perm[e] = e;
        std::shuffle(perm.begin(), perm.end(), g);
        for (int j = 0; j < k; j++) {
            p.ids.push_back(perm[j]);
            p.w.push_back(std::uniform_real_distribution<float>(0.0f, 1.0f)(g));
        }
    }
    return p;
}

/* p's weights loaded into a CPU backend's state, a team for team_rows rows (its chunk `chunk`
   rows where smaller; 0: as many as the team holds), and each of its C workers' ffn_band over
   band_rows rows of x on a thread of its own, each of which must succeed; then freed. */
void run_team(moe_ctx_t &x, const Problem &p, int C, size_t team_rows, size_t band_rows,
              size_t chunk)
{
    cpu_state_t cs;
    memset(&cs, 0, sizeof(cs));
    cs.H = p.H, cs.I = p.I, cs.n_local = (int)p.local.size(), cs.local_ids = p.local.data();
    incmoe_moe_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.dtype = p.dt;
    bool f32 = p.dt == INCMOE_FLOAT32;
    mp.w_gate = f32 ? (const void *)p.wg.data() : p.wg16.data();
    mp.w_up = f32 ? (const void *)p.wu.data() : p.wu16.data();
    mp.w_down = f32 ? (const void *)p.wd.data() : p.wd16.data();
    EXPECT_EQ(ffn_weights_load(&cs, &mp, p.es), INCMOE_OK);
    EXPECT_EQ(ffn_team_create(&cs, p.E, 1, NULL, 0, p.k, team_rows), INCMOE_OK);
    if (chunk > 0 && chunk < cs.team.chunk)
        cs.team.chunk = chunk;
    EXPECT_EQ(ffn_scratch_reserve(&cs, C), INCMOE_OK);
    ffn_team_reset(&cs);
    std::vector<incmoe_status_t> st(C, INCMOE_OK);
    std::vector<std::thread> team;
    for (int c = 0; c < C; c++)
        team.emplace_back([&, c] { st[c] = ffn_band(&x, &cs, c, 0, band_get(band_rows, 1, 0)); });
    for (auto &t : team)
        t.join();
    for (int c = 0; c < C; c++)
        EXPECT_EQ(st[c], INCMOE_OK) << "worker " << c;
    ffn_team_destroy(&cs);
    free(cs.w_gu);
    free(cs.w_down);
}

/* Rows [r0, r0 + n) of p through ffn_band on C workers in chunks of `chunk` rows (0: as
   many as the team holds); the outputs as stored (dt), [n][H]. */
std::vector<uint8_t> run(const Problem &p, size_t r0, size_t n, int C, size_t chunk)
{
    const size_t H = (size_t)p.H, hb = H * p.es, grow = hb + 8 * (size_t)p.k;
    std::vector<uint8_t> xg(n * grow), z(n * hb, 0xEE);
    for (size_t t = 0; t < n; t++) {
        uint8_t *row = &xg[t * grow];
        inc_dtype_from_float(row, &p.x[(r0 + t) * H], H, p.dt);
        memcpy(row + hb, &p.ids[(r0 + t) * p.k], 4 * (size_t)p.k);
        memcpy(row + hb + 4 * (size_t)p.k, &p.w[(r0 + t) * p.k], 4 * (size_t)p.k);
    }
    moe_counters_t cnt;
    memset(&cnt, 0, sizeof(cnt));
    size_t counts[1] = {n};
    moe_ctx_t x;
    memset(&x, 0, sizeof(x));
    x.N = 1, x.rank = 0, x.H = p.H, x.k = p.k, x.dtype = p.dt, x.esize = p.es;
    x.grow = grow, x.zrow = hb, x.C = C, x.tmax = n, x.nb = 1, x.counts = counts;
    x.xg = xg.data(), x.z = z.data(), x.E = p.E, x.cnt = &cnt, x.timeout_ms = 20000;

    run_team(x, p, C, n, n, chunk);
    return z;
}

/* y_t = sum over local j of w * Wd (silu(Wg x) * Wu x), in double. */
std::vector<double> reference(const Problem &p)
{
    const size_t H = (size_t)p.H, I = (size_t)p.I, T = p.T();
    std::vector<double> y(T * H, 0.0), act(I);
    for (size_t t = 0; t < T; t++)
        for (int j = 0; j < p.k; j++) {
            auto it = std::find(p.local.begin(), p.local.end(), p.ids[t * p.k + j]);
            if (it == p.local.end())
                continue;
            size_t le = (size_t)(it - p.local.begin());
            for (size_t i = 0; i < I; i++) {
                double g = 0, u = 0;
                for (size_t h = 0; h < H; h++) {
                    g += (double)p.wg[(le * I + i) * H + h] * p.x[t * H + h];
                    u += (double)p.wu[(le * I + i) * H + h] * p.x[t * H + h];
                }
                act[i] = g / (1.0 + std::exp(-g)) * u;
            }
            for (size_t h = 0; h < H; h++) {
                double o = 0;
                for (size_t i = 0; i < I; i++)
                    o += (double)p.wd[(le * H + h) * I + i] * act[i];
                y[t * H + h] += (double)p.w[t * p.k + j] * o;
            }
        }
    return y;
}

/* The decode step's layout (ctx.h: region_rows): p's rows received from N sources, per[s] of
   them from source s, in region s (rows s * region .. of xg); through ffn_band on C workers.
   Returns z, N * region rows of partials: a received row's at its region row, 0xEE bytes
   wherever nothing was received. */
std::vector<uint8_t> run_regions(const Problem &p, const std::vector<size_t> &per, size_t region,
                                 int C)
{
    const size_t H = (size_t)p.H, hb = H * p.es, grow = hb + 8 * (size_t)p.k;
    const int N = (int)per.size();
    std::vector<uint8_t> xg(N * region * grow, 0), z(N * region * hb, 0xEE);
    std::vector<uint32_t> src, first(N);
    size_t t = 0;
    for (int s = 0; s < N; s++) {
        first[s] = (uint32_t)t;
        for (size_t i = 0; i < per[s]; i++, t++) {
            uint8_t *row = &xg[(s * region + i) * grow];
            inc_dtype_from_float(row, &p.x[t * H], H, p.dt);
            memcpy(row + hb, &p.ids[t * p.k], 4 * (size_t)p.k);
            memcpy(row + hb + 4 * (size_t)p.k, &p.w[t * p.k], 4 * (size_t)p.k);
            src.push_back((uint32_t)s);
            src.push_back((uint32_t)(2 * i + 1)); /* its row at the source: any, unread */
        }
    }
    incmoe_fifo_dispatch_t dcb;
    memset(&dcb, 0, sizeof(dcb));
    dcb.nrecv = t;
    moe_counters_t cnt;
    memset(&cnt, 0, sizeof(cnt));
    std::vector<size_t> counts(N, region); /* what a bulk list would read: not the decode's */
    moe_ctx_t x;
    memset(&x, 0, sizeof(x));
    x.N = N, x.rank = 0, x.H = p.H, x.k = p.k, x.dtype = p.dt, x.esize = p.es;
    x.grow = grow, x.zrow = hb, x.C = C, x.tmax = region, x.nb = 1, x.counts = counts.data();
    x.masked = 1, x.region_rows = region, x.region_first = first.data(), x.src = src.data();
    x.dcb = &dcb;
    x.xg = xg.data(), x.z = z.data(), x.E = p.E, x.cnt = &cnt, x.timeout_ms = 20000;

    run_team(x, p, C, N * region, region, 0);
    return z;
}

/* Every row alone, concatenated: what each row must be bitwise in every other run. */
std::vector<uint8_t> rows_alone(const Problem &p)
{
    std::vector<uint8_t> all;
    for (size_t t = 0; t < p.T(); t++) {
        std::vector<uint8_t> one = run(p, t, 1, 1, 0);
        all.insert(all.end(), one.begin(), one.end());
    }
    return all;
}

/* The first row whose bytes differ, or -1. */
long first_diff(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b, size_t row_bytes)
{
    for (size_t i = 0; i < a.size(); i++)
        if (a[i] != b[i])
            return (long)(i / row_bytes);
    return -1;
}

/* Runs the kernels of level `cap` at most while it lives (weights packed and used under it). */
struct IsaCap {
    cpu_isa_t old;
    explicit IsaCap(cpu_isa_t cap) : old(isa_cap)
    {
        isa_cap = cap;
    }
    ~IsaCap()
    {
        isa_cap = old;
    }
};

const char *isa_name(cpu_isa_t l)
{
    static const char *names[] = {"portable C", "AVX2", "AVX-512", "AVX512-BF16"};
    return names[l];
}

double rel_error(const Problem &p, const std::vector<uint8_t> &z)
{
    std::vector<double> ref = reference(p);
    std::vector<float> y(ref.size());
    inc_dtype_to_float(y.data(), z.data(), y.size(), p.dt);
    double mag = 0, err = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        mag = std::max(mag, std::fabs(ref[i]));
        err = std::max(err, std::fabs(y[i] - ref[i]));
    }
    EXPECT_GT(mag, 0.1);
    return err / mag;
}

/* fp32 within 1e-5 of the largest; bf16 and fp16 within their roundings: the stored output
   (2^-8 for bf16) and, with the bf16 kernel, the activations before the down projection. */
double tolerance(incmoe_dtype_t dt)
{
    return dt == INCMOE_FLOAT32 ? 1e-5 : 8e-3;
}

class MoeFfn : public ::testing::TestWithParam<incmoe_dtype_t>
{
};

} // namespace

/* Rows shared by 8 experts (each expert's GEMM from one row to about sixty, row tiles
   whole and partial), H and I not multiples of a panel, columns split 1 to 5 ways; then
   a wider H and I (an odd count of panels, several tiles of 12 rows per expert), checked
   against fp64 too. */
TEST_P(MoeFfn, ARowsResultIsItsOwnWhateverTheGemmAndThreads)
{
    struct {
        int H, I, E, k;
        size_t T;
    } shapes[] = {{200, 136, 8, 3, 160}, {520, 300, 4, 2, 30}};
    for (auto sh : shapes) {
        Problem p = make_problem(sh.H, sh.I, sh.E, sh.k, sh.T, GetParam(), 7);
        const size_t row_bytes = (size_t)p.H * p.es;
        std::vector<uint8_t> alone = rows_alone(p);
        struct {
            int C;
            size_t chunk;
        } runs[] = {{1, 0}, {2, 0}, {3, 7}, {4, 64}, {5, 33}};
        for (auto r : runs) {
            std::vector<uint8_t> z = run(p, 0, p.T(), r.C, r.chunk);
            EXPECT_EQ(first_diff(z, alone, row_bytes), -1)
                << "H " << p.H << ", workers " << r.C << ", chunk " << r.chunk
                << ": this row differs from the same row run alone";
        }
        EXPECT_LE(rel_error(p, alone), tolerance(p.dt)) << "H " << p.H;
    }
}

/* The outputs against fp64 (tolerance above). */
TEST_P(MoeFfn, MatchesAnFp64Reference)
{
    Problem p = make_problem(96, 80, 6, 2, 50, GetParam(), 11);
    std::vector<uint8_t> z = run(p, 0, p.T(), 2, 16);
    EXPECT_LE(rel_error(p, z), tolerance(p.dt));
}

/* Every level this CPU can run, from portable C up: each row its own result across workers
   and chunks, the fp64 reference met, and fp32 and fp16 weights (widened exactly, one FMA
   chain per element on every level) the same bits as portable C.  bf16 leaves its own
   kernel at AVX512-BF16 (rounded activations): below it, the same bits as portable C too. */
TEST_P(MoeFfn, EveryKernelLevelKeepsTheResults)
{
    Problem p = make_problem(72, 56, 5, 2, 40, GetParam(), 13);
    const size_t row_bytes = (size_t)p.H * p.es;
    std::vector<uint8_t> portable;
    for (int l = CPU_ISA_PORTABLE; l <= (int)cpu_isa(); l++) {
        IsaCap cap((cpu_isa_t)l);
        std::vector<uint8_t> alone = rows_alone(p), z = run(p, 0, p.T(), 3, 7);
        EXPECT_EQ(first_diff(z, alone, row_bytes), -1)
            << isa_name((cpu_isa_t)l) << ": this row differs from the same row run alone";
        EXPECT_LE(rel_error(p, z), tolerance(p.dt)) << isa_name((cpu_isa_t)l);
        if (l == CPU_ISA_PORTABLE) {
            portable = z;
        } else if (p.dt != INCMOE_BFLOAT16 || l < CPU_ISA_AVX512_BF16) {
            EXPECT_EQ(first_diff(z, portable, row_bytes), -1)
                << isa_name((cpu_isa_t)l) << " gives this row other bits than portable C";
        }
    }
}

/* The decode step's rows, each in its source's region (some regions empty, one full): every
   received row's partial lands at its own region row, bitwise the row run alone, on one
   worker and on three; no other row of the partials is written. */
TEST_P(MoeFfn, DecodeRegionsKeepEachRowInPlace)
{
    const size_t region = 5;
    const std::vector<size_t> per = {2, 0, 5, 1, 0};
    size_t T = 0;
    for (size_t n : per)
        T += n;
    Problem p = make_problem(40, 24, 6, 2, T, GetParam(), 17);
    const size_t row_bytes = (size_t)p.H * p.es;
    std::vector<uint8_t> alone = rows_alone(p);
    for (int C : {1, 3}) {
        std::vector<uint8_t> z = run_regions(p, per, region, C);
        size_t t = 0;
        for (size_t s = 0; s < per.size(); s++)
            for (size_t i = 0; i < region; i++) {
                const uint8_t *got = &z[(s * region + i) * row_bytes];
                if (i < per[s]) {
                    EXPECT_EQ(memcmp(got, &alone[t * row_bytes], row_bytes), 0)
                        << "workers " << C << ": region " << s << " row " << i
                        << " differs from the same row run alone";
                    t++;
                } else {
                    EXPECT_EQ(std::count(got, got + row_bytes, 0xEE), (long)row_bytes)
                        << "workers " << C << ": region " << s << " row " << i
                        << " was written, though nothing was received there";
                }
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeFfn,
                         ::testing::Values(INCMOE_FLOAT32, INCMOE_FLOAT16, INCMOE_BFLOAT16),
                         [](const ::testing::TestParamInfo<incmoe_dtype_t> &i) {
                             return std::string(i.param == INCMOE_FLOAT32   ? "fp32"
                                                : i.param == INCMOE_FLOAT16 ? "fp16"
                                                                            : "bf16");
                         });

/* SiLU(g) * u within 4 ulp of double over [-100, 100] (within 1e-36 where it is smaller: exp's
   clamp); an element alone gives the same bits as inside an array; and every level this CPU
   runs (4 lanes, 16 with AVX-512) gives the bits of the portable one. */
TEST(MoeFfnSwiglu, MatchesDoubleAndIgnoresPosition)
{
    const size_t n = 4003;
    std::vector<float> g(n), u(n), a(n), portable(n);
    for (size_t i = 0; i < n; i++) {
        g[i] = -100.0f + 200.0f * (float)i / (float)(n - 1);
        u[i] = 1.0f + 0.001f * (float)(i % 7);
    }
    {
        IsaCap cap(CPU_ISA_PORTABLE);
        cpu_swiglu(portable.data(), g.data(), u.data(), n);
    }
    cpu_swiglu(a.data(), g.data(), u.data(), n);
    for (size_t i = 0; i < n; i++) {
        double want = (double)g[i] / (1.0 + std::exp(-(double)g[i])) * u[i];
        /* 4 ulp of the result; 1e-36 where it is below that (g < -80: exp's clamp) */
        double tol =
            std::max(4 * std::ldexp(1.0, std::ilogb(std::fabs(want) + 1e-300) - 23), 1e-36);
        ASSERT_LE(std::fabs(a[i] - want), tol) << "g " << g[i];
        float one;
        cpu_swiglu(&one, &g[i], &u[i], 1);
        ASSERT_EQ(memcmp(&one, &a[i], 4), 0) << "g " << g[i] << " alone differs";
        ASSERT_EQ(memcmp(&portable[i], &a[i], 4), 0)
            << "g " << g[i] << ": " << isa_name(cpu_isa()) << " differs from portable C";
    }
}
