/*
 * dnnl_bench.cc - oneDNN's matmul (Debian 12's libdnnl-dev 2.6.3) on the expert compute's
 * GEMMs, for BENCHMARKS.md "CPU expert compute": is it a better GEMM library for the CPU
 * backend than the layer's own kernels?  Not part of the build or the library.
 *
 * Per shape (incmoe-ffn-bench's), every expert's two GEMMs as the layer runs them over the
 * expert's average rows m = T k / E: [m x H] x [H x 2I] (gate and up) and [m x I] x [I x H]
 * (down), E experts of their own weights, weights in oneDNN's preferred layout (reordered
 * once, as a load would); fp32, and bf16 sources and weights with fp32 results.  Only the
 * GEMMs are timed (no SwiGLU, no gathering of rows), so this favours oneDNN.  Also checked:
 * whether a row's bits depend on the other rows of its GEMM (row 0 of an m-row GEMM against
 * the same row in a GEMM of 1 and of 7 rows), which the layer's bitwise tests need.
 *
 * Build and run (from the top of the tree; OpenMP threads, as Debian builds oneDNN):
 *   g++ -O2 -fopenmp bench/data/issue27/ffn/dnnl_bench.cc -ldnnl -o /tmp/dnnl_bench
 *   /tmp/dnnl_bench h512 float32 1 3     (shape, dtype, threads, runs)
 */
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;

struct Shape {
    const char *name;
    int E, k, H, I, T;
};

static const Shape shapes[] = {
    {"h512", 16, 4, 512, 2048, 2048},
    {"h2048", 16, 4, 2048, 1024, 1024},
    {"olmoe", 64, 8, 512, 256, 2048},
};

/* One GEMM [m x K] x [K x N] (weights in oneDNN's layout), ready to run. */
struct Gemm {
    matmul prim;
    memory src, wei, dst;
};

static memory filled(engine &eng, const memory::desc &md, std::mt19937 &g)
{
    memory m(md, eng);
    size_t n = md.get_size() / (md.data_type() == dt::f32 ? 4 : 2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    if (md.data_type() == dt::f32) {
        float *p = (float *)m.get_data_handle();
        for (size_t i = 0; i < n; i++)
            p[i] = u(g);
    } else {
        uint16_t *p = (uint16_t *)m.get_data_handle();
        for (size_t i = 0; i < n; i++) {
            float f = u(g);
            uint32_t b;
            memcpy(&b, &f, 4);
            p[i] = (uint16_t)(b >> 16);
        }
    }
    return m;
}

static Gemm make_gemm(engine &eng, stream &s, int m, int K, int N, dt t, std::mt19937 &g)
{
    memory::desc src_md({m, K}, t, tag::ab), wei_any({K, N}, t, tag::any),
        wei_plain({K, N}, t, tag::ab), dst_md({m, N}, dt::f32, tag::ab);
    matmul::primitive_desc pd(matmul::desc(src_md, wei_any, dst_md), eng);
    Gemm r{matmul(pd), filled(eng, src_md, g), memory(pd.weights_desc(), eng), memory(dst_md, eng)};
    memory plain = filled(eng, wei_plain, g);
    reorder(plain, r.wei).execute(s, plain, r.wei);
    s.wait();
    return r;
}

static void exec(stream &s, Gemm &x)
{
    x.prim.execute(s, {{DNNL_ARG_SRC, x.src}, {DNNL_ARG_WEIGHTS, x.wei}, {DNNL_ARG_DST, x.dst}});
}

/* Row 0 of an m-row GEMM against the same row in GEMMs of 1 and 7 rows: bitwise alike? */
static bool row_independent(engine &eng, stream &s, int m, int K, int N, dt t)
{
    std::vector<std::vector<float>> out;
    for (int rows : {m, 1, 7}) {
        std::mt19937 g(5); /* the same weights and first row every time */
        memory::desc wei_md({K, N}, t, tag::ab), dst_md({rows, N}, dt::f32, tag::ab);
        memory wei = filled(eng, wei_md, g);
        memory src = filled(eng, memory::desc({m, K}, t, tag::ab), g);
        memory::desc src_md({rows, K}, t, tag::ab);
        memory src_rows(src_md, eng, src.get_data_handle());
        memory dst(dst_md, eng);
        matmul(matmul::primitive_desc(matmul::desc(src_md, wei_md, dst_md), eng))
            .execute(s, {{DNNL_ARG_SRC, src_rows}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
        s.wait();
        const float *d = (const float *)dst.get_data_handle();
        out.emplace_back(d, d + N);
    }
    return out[0] == out[1] && out[0] == out[2];
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: dnnl_bench h512|h2048|olmoe float32|bfloat16 THREADS RUNS\n");
        return 2;
    }
    const Shape *sh = nullptr;
    for (const Shape &x : shapes)
        if (!strcmp(x.name, argv[1]))
            sh = &x;
    std::string dts = argv[2];
    int threads = atoi(argv[3]), runs = atoi(argv[4]);
    if (sh == nullptr || (dts != "float32" && dts != "bfloat16") || threads < 1 || runs < 1) {
        fprintf(stderr, "dnnl_bench: expected a shape of h512, h2048, olmoe, a dtype of "
                        "float32, bfloat16, threads >= 1, runs >= 1\n");
        return 2;
    }
    omp_set_num_threads(threads);
    dt t = dts == "float32" ? dt::f32 : dt::bf16;
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    std::mt19937 g(1);
    const int m = sh->T * sh->k / sh->E;
    std::vector<Gemm> up, down;
    for (int e = 0; e < sh->E; e++) {
        up.push_back(make_gemm(eng, s, m, sh->H, 2 * sh->I, t, g));
        down.push_back(make_gemm(eng, s, m, sh->I, sh->H, t, g));
    }
    const double gflop = 6.0 * sh->H * sh->I * (double)m * sh->E / 1e9;
    std::vector<double> ms;
    for (int r = -1; r < runs; r++) { /* one warm-up */
        auto t0 = std::chrono::steady_clock::now();
        for (int e = 0; e < sh->E; e++) {
            exec(s, up[e]);
            exec(s, down[e]);
        }
        s.wait();
        double v = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
        if (r >= 0)
            ms.push_back(v);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double med = sorted[sorted.size() / 2];
    printf("%-6s %-8s %d | dnnl %.2f (%.2f-%.2f) ms %.2f (%.2f-%.2f) GF/s | rows %d per expert | "
           "row bits independent of m: %s\n",
           sh->name, dts.c_str(), threads, med, sorted.front(), sorted.back(), gflop / med * 1e3,
           gflop / sorted.back() * 1e3, gflop / sorted.front() * 1e3, m,
           row_independent(eng, s, m, sh->H, 2 * sh->I, t) ? "yes" : "NO");
    return 0;
}
