/*
 * test_moe_cuda.cc - the MoE layer's CUDA backend run for real: forwards
 * against the fp64 reference of moe_ref.h for fp32, fp16 and bf16, in both
 * modes, N = 1 and N = 2, unequal and zero token counts, inputs in device
 * memory on the caller's stream (and, N = 1, on the legacy default stream);
 * and the error paths: a killed switch or a peer that stops calling forward
 * make the forward return an error status within the layer's timeout.
 *
 * Where no CUDA device is usable (cudaGetDeviceCount fails, e.g. "CUDA
 * driver version is insufficient for CUDA runtime version", or finds none)
 * every test is skipped with that reason.
 *
 * CUDA is never initialised in the gtest process: a child forked after its
 * parent initialised CUDA cannot use it.  The device probe and every test
 * body run in a process the harness forks (and kills after its timeout, so a
 * hang is a failure, never a stuck suite); the N ranks of a job are threads
 * of that process sharing the one GPU, as incmoe-moe-bench --ranks-in-process
 * runs them: each rank on its own non-blocking stream (on one stream the
 * ranks' persistent kernels would queue behind each other and wait forever
 * for each other's collectives) with few enough role blocks that both
 * kernels are resident together.
 *
 * Tolerances (incmoe-moe-bench's): max |out - ref| <= tol * max |ref| over a
 * rank's outputs with tol = 1e-4 (fp32), 5e-3 (fp16), 3e-2 (bf16), looser
 * than moe_ref's per-token bound because the tensor-core path rounds the
 * SwiGLU rows to the datatype between its two GEMMs (the CPU keeps them in
 * fp32); pipelined against baseline, per-token cosine similarity >= 0.99999.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "algo_param.h"
#include "harness.h"
#include "moe_ref.h"

namespace
{

/* ---------------------------------------------------------------- device */

/* "" when a CUDA device is usable, else why not.  Run in a forked child. */
std::string device_probe()
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" +
               cudaGetErrorName(e) + ")";
    if (n == 0)
        return "no CUDA device: cudaGetDeviceCount found none";
    return "";
}

/* The probe's answer, asked once per process (in a child, see above). */
const std::string &no_device_reason()
{
    static std::string reason;
    static bool asked = false;
    if (!asked) {
        asked = true;
        auto res = harness::run_ranks(
            1, [](int) { return device_probe(); }, 60);
        reason = res[0];
    }
    return reason;
}

std::string cuda_err(const char *what, cudaError_t e)
{
    return std::string(what) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
}

/* One rank's inputs in device memory and its stream. */
struct DeviceInputs {
    void *x = nullptr;
    int32_t *ids = nullptr;
    float *w = nullptr;
    cudaStream_t stream = nullptr;

    ~DeviceInputs()
    {
        cudaFree(x), cudaFree(ids), cudaFree(w);
        if (stream != nullptr)
            cudaStreamDestroy(stream);
    }

    /* Copies rank r's tokens of p to the device; own_stream: a non-blocking
       stream for the forwards (else the legacy default stream). */
    std::string load(const moeref::Problem &p, int r, bool own_stream)
    {
        size_t xs = p.x[r].size(), ks = p.ids[r].size() * sizeof(int32_t);
        cudaError_t e;
        if ((e = cudaMalloc(&x, xs ? xs : 1)) != cudaSuccess ||
            (e = cudaMalloc((void **)&ids, ks ? ks : 1)) != cudaSuccess ||
            (e = cudaMalloc((void **)&w, ks ? ks : 1)) != cudaSuccess)
            return cuda_err("cudaMalloc of the inputs", e);
        if ((e = cudaMemcpy(x, p.x[r].data(), xs, cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(ids, p.ids[r].data(), ks, cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(w, p.w[r].data(), ks, cudaMemcpyHostToDevice)) != cudaSuccess)
            return cuda_err("copying the inputs to the device", e);
        if (own_stream &&
            (e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
            return cuda_err("cudaStreamCreateWithFlags", e);
        return "";
    }
};

/* ------------------------------------------------------------ rank threads */

/* A barrier for the rank threads of one process that gives up after a while
   (a rank that failed may never arrive; the others must not hang on it). */
class Barrier
{
  public:
    explicit Barrier(int n) : n_(n) {}
    bool wait(int timeout_ms = 60000)
    {
        std::unique_lock<std::mutex> lk(mu_);
        unsigned gen = gen_;
        if (++arrived_ == n_) {
            arrived_ = 0;
            gen_++;
            cv_.notify_all();
            return true;
        }
        return cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return gen_ != gen; });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_, arrived_ = 0;
    unsigned gen_ = 0;
};

/* Runs body(rank) on N threads of one forked process (the harness's timeout
   bounds it); returns "" or every failing rank's message. */
std::string run_threads(int N, const std::function<std::string(int)> &body)
{
    std::vector<std::string> err(N);
    std::vector<std::thread> th;
    for (int r = 0; r < N; r++)
        th.emplace_back([&, r] { err[r] = body(r); });
    for (auto &t : th)
        t.join();
    std::string all;
    for (int r = 0; r < N; r++)
        if (!err[r].empty())
            all += "rank " + std::to_string(r) + ": " + err[r] + "\n";
    return all;
}

/* -------------------------------------------------------------- checking */

double tol_of(incmoe_dtype_t dt)
{
    return dt == INCMOE_BFLOAT16 ? 3e-2 : dt == INCMOE_FLOAT16 ? 5e-3 : 1e-4;
}

/* "" when max |out - ref| <= tol * max |ref| and every output is finite. */
std::string check_ref(const std::vector<uint8_t> &out, const std::vector<double> &ref,
                      incmoe_dtype_t dt, const char *what)
{
    double maxref = 0, maxerr = 0;
    size_t worst = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double o = moeref::to_double(out.data(), i, dt);
        if (!std::isfinite(o))
            return std::string(what) + ": non-finite output at element " + std::to_string(i);
        maxref = std::max(maxref, fabs(ref[i]));
        if (fabs(o - ref[i]) > maxerr)
            maxerr = fabs(o - ref[i]), worst = i;
    }
    if (maxerr <= tol_of(dt) * maxref)
        return "";
    char msg[256];
    snprintf(msg, sizeof(msg),
             "%s: max |out - ref| = %.3e at element %zu, over %.0e * max |ref| (%.3e)", what,
             maxerr, worst, tol_of(dt), maxref);
    return msg;
}

/* ------------------------------------------------------------------ cases */

struct Case {
    moeref::Shape shape;
    std::vector<int> counts;
    std::vector<incmoe_moe_config_t> configs; /* pipelined configurations, after the baseline */
};

incmoe_moe_config_t cfg(int nb, int g = 1, int c = 1, int r = 1, int tail = 0)
{
    incmoe_moe_config_t x = {nb, g, c, r, tail};
    return x;
}

moeref::Shape shape(int N, int E, int k, incmoe_dtype_t dt, int H, int I)
{
    moeref::Shape s;
    s.N = N, s.E = E, s.k = k, s.H = H, s.I = I, s.dtype = dt;
    return s;
}

/* One forward with device inputs; the output copied to host memory. */
std::string forward(incmoe_moe_t *L, incmoe_moe_mode_t mode, const DeviceInputs &in,
                    const moeref::Problem &p, int rank, std::vector<uint8_t> *out,
                    incmoe_moe_routing_t routing = INCMOE_MOE_ROUTING_FULL)
{
    incmoe_moe_forward_params_t f = {};
    f.field_mask = INCMOE_MOE_FWD_MODE | INCMOE_MOE_FWD_X | INCMOE_MOE_FWD_TOPK_IDS |
                   INCMOE_MOE_FWD_TOPK_WEIGHTS | INCMOE_MOE_FWD_COUNTS | INCMOE_MOE_FWD_ROUTING |
                   (in.stream != nullptr ? INCMOE_MOE_FWD_STREAM : 0u);
    f.mode = mode;
    f.routing = routing;
    f.x = in.x;
    f.topk_ids = in.ids;
    f.topk_weights = in.w;
    f.counts = p.counts.data();
    f.stream = in.stream;
    void *view = nullptr;
    incmoe_status_t st = incmoe_moe_forward_ex(L, &f, &view);
    if (st != INCMOE_OK)
        return std::string("forward (") + incmoe_moe_mode_name(mode) + " " +
               incmoe_moe_routing_name(routing) + "): " + incmoe_strerror(st);
    size_t bytes = (size_t)p.counts[rank] * p.s.H * incmoe_dtype_size(p.s.dtype);
    out->assign(bytes, 0);
    cudaError_t e = cudaMemcpy(out->data(), view, bytes, cudaMemcpyDefault);
    return e == cudaSuccess ? "" : cuda_err("copying the outputs back", e);
}

incmoe_moe_params_t cuda_layer_params(const moeref::Shape &s, incmoe_comm_t *comm,
                                      const std::vector<uint8_t> &g, const std::vector<uint8_t> &u,
                                      const std::vector<uint8_t> &d)
{
    incmoe_moe_params_t prm = moeref::layer_params(s, comm, g, u, d);
    prm.backend = INCMOE_MOE_BACKEND_CUDA;
    return prm;
}

/* Rank `rank`'s part of one case: a baseline forward, then each pipelined
   configuration twice (the second checks the counters carry over), then with
   masked routing where the algorithm has dispatch and combine.  The
   barrier keeps the ranks' host-side CUDA calls (allocations, frees: they
   may wait for the whole device) out of each other's forwards. */
std::string run_case(incmoe_comm_t *comm, int rank, const Case &c, uint64_t seed, bool own_stream,
                     Barrier *bar)
{
    moeref::Problem p = moeref::make_problem(c.shape, c.counts, seed);
    std::vector<uint8_t> g, u, d;
    moeref::local_weights(p, rank, &g, &u, &d);
    std::vector<double> ref = moeref::reference(p, rank);
    int T = c.counts[rank];
    std::string tag = std::string(incmoe_dtype_name(c.shape.dtype)) +
                      " H=" + std::to_string(c.shape.H) + " I=" + std::to_string(c.shape.I) +
                      " N=" + std::to_string(c.shape.N) + " seed=" + std::to_string(seed);
    DeviceInputs in;
    std::string err = in.load(p, rank, own_stream);
    std::vector<uint8_t> base;
    for (size_t i = 0; i <= c.configs.size(); i++) {
        incmoe_moe_params_t prm = cuda_layer_params(c.shape, comm, g, u, d);
        if (i > 0)
            prm.config = c.configs[i - 1];
        incmoe_moe_t *L = nullptr;
        /* Every rank creates (collective) even after a local failure, so the
           others see a clean error rather than a timeout. */
        incmoe_status_t st = incmoe_moe_create(&prm, &L);
        if (err.empty() && st != INCMOE_OK)
            err = std::string("create: ") + incmoe_strerror(st);
        char cs[128] = "baseline";
        std::vector<uint8_t> out;
        if (st == INCMOE_OK && i == 0) {
            if (err.empty())
                err = forward(L, INCMOE_MOE_BASELINE, in, p, rank, &out);
            if (err.empty())
                err = check_ref(out, ref, c.shape.dtype, "baseline");
            base = out;
        } else if (st == INCMOE_OK) {
            incmoe_moe_config_t used;
            incmoe_moe_config_for(L, p.counts.data(), &used);
            incmoe_moe_config_str(&used, cs, sizeof(cs));
            for (int rep = 0; rep < 2 && err.empty(); rep++) {
                err = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out);
                if (err.empty())
                    err = check_ref(out, ref, c.shape.dtype, "pipelined");
                if (err.empty())
                    err = moeref::check_cosine(out.data(), base.data(), T, c.shape.H, c.shape.dtype,
                                               0.99999, "pipelined vs baseline");
            }
            std::vector<uint8_t> masked;
            if (err.empty())
                err = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &masked,
                              INCMOE_MOE_ROUTING_MASKED);
            if (err.empty())
                err = check_ref(masked, ref, c.shape.dtype, "pipelined masked");
            if (err.empty())
                err = moeref::check_cosine(masked.data(), out.data(), T, c.shape.H, c.shape.dtype,
                                           0.99999, "masked vs full");
        }
        if (bar != nullptr && !bar->wait() && err.empty())
            err = "the other ranks never finished their forwards";
        if (L != nullptr)
            moeref::destroy_layer(L, &err);
        if (!err.empty())
            return tag + " [" + cs + "]: " + err;
    }
    return "";
}

const incmoe_dtype_t kDtypes[] = {INCMOE_FLOAT32, INCMOE_FLOAT16, INCMOE_BFLOAT16};

/* Runs the cases with N rank threads in one forked process. */
void run_cases(int N, incmoe_algo_t algo, const std::vector<Case> &cases, bool own_stream = true)
{
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        1,
        [&](int) -> std::string {
            Barrier bar(N);
            return run_threads(N, [&](int rank) -> std::string {
                std::string err;
                incmoe_comm_t *comm = moeref::comm_create(sw.addr, job, rank, N, algo, &err);
                if (comm == nullptr)
                    return err;
                for (size_t i = 0; i < cases.size() && err.empty(); i++)
                    err = run_case(comm, rank, cases[i], 2000 + i, own_stream,
                                   N > 1 ? &bar : nullptr);
                incmoe_comm_destroy(comm);
                return err;
            });
        },
        100);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

class MoeCuda : public ::testing::Test
{
  protected:
    void SetUp() override
    {
        const std::string &why = no_device_reason();
        if (!why.empty())
            GTEST_SKIP() << why;
    }
};

class MoeCudaAlgo : public ::testing::TestWithParam<incmoe_algo_t>
{
  protected:
    void SetUp() override
    {
        const std::string &why = no_device_reason();
        if (!why.empty())
            GTEST_SKIP() << why;
    }
};

} // namespace

/* One rank, every dtype, the tensor-core shape (H, I multiples of 16) and the
   SIMT one, band counts from 1 to past the tokens, a tail-assisted split and
   the automatic configuration. */
TEST_F(MoeCuda, OneRankEveryDtype)
{
    std::vector<Case> cases;
    incmoe_moe_config_t automatic = {0, 0, 0, 0, -1};
    for (auto dt : kDtypes) {
        cases.push_back(Case{shape(1, 4, 2, dt, 32, 16),
                             {9},
                             {cfg(1), cfg(3, 1, 2, 1), cfg(12), cfg(4, 2, 2, 2, 2), automatic}});
        cases.push_back(Case{shape(1, 4, 2, dt, 16, 8), {7}, {cfg(2), cfg(5, 1, 3, 1, 1)}});
    }
    run_cases(1, INCMOE_ALGO_INC, cases);
}

/* No stream given: the forward orders itself behind the legacy default stream. */
TEST_F(MoeCuda, OneRankLegacyDefaultStream)
{
    std::vector<Case> cases;
    for (auto dt : kDtypes)
        cases.push_back(Case{shape(1, 4, 2, dt, 32, 16), {5}, {cfg(2)}});
    run_cases(1, INCMOE_ALGO_INC, cases, false);
}

/* One rank without tokens. */
TEST_F(MoeCuda, OneRankNoTokens)
{
    run_cases(1, INCMOE_ALGO_INC,
              {Case{shape(1, 4, 2, INCMOE_FLOAT32, 32, 16), {0}, {cfg(1), cfg(3)}}});
}

/* Two ranks sharing the GPU: unequal counts, a rank without tokens, none at
   all, every dtype in both FFN paths, worker splits with tail assistance and
   the automatic configuration. */
TEST_P(MoeCudaAlgo, TwoRanksUnequalAndEmpty)
{
    std::vector<Case> cases;
    incmoe_moe_config_t automatic = {0, 0, 0, 0, -1};
    for (auto dt : kDtypes) {
        cases.push_back(Case{shape(2, 4, 2, dt, 32, 16), {6, 0}, {cfg(1), cfg(3, 1, 2, 1)}});
        cases.push_back(Case{shape(2, 4, 2, dt, 16, 8), {5, 3}, {cfg(2, 2, 2, 2, 1), cfg(4)}});
    }
    cases.push_back(Case{shape(2, 8, 3, INCMOE_FLOAT32, 32, 16),
                         {11, 4},
                         {cfg(4, 1, 2, 3, 2), cfg(6, 2, 1, 1, 6), automatic}});
    cases.push_back(Case{shape(2, 4, 2, INCMOE_BFLOAT16, 32, 16), {0, 0}, {cfg(1), cfg(3)}});
    run_cases(2, GetParam(), cases);
}

INSTANTIATE_TEST_SUITE_P(Algos, MoeCudaAlgo, ::testing::Values(INCMOE_ALGO_INC, INCMOE_ALGO_RING),
                         algo_param_name);

namespace
{

const int kErrTimeoutMs = 2000; /* the layer's bound on any wait in these forwards */

/* Two rank threads with one pipelined layer each over the INC algorithm;
   body(rank, L, in, p) decides what happens.  The layer's timeout is short, so
   an error comes back within seconds; the harness's timeout catches a hang. */
void run_error_case(
    const std::function<std::string(int, incmoe_moe_t *, const DeviceInputs &,
                                    const moeref::Problem &, Barrier *, pid_t switch_pid)> &body)
{
    const int N = 2;
    harness::ExpectErrors errors_expected("every case here makes the forwards fail");
    harness::SwitchProc sw;
    ASSERT_TRUE(harness::switch_start(&sw));
    unsigned long long job = harness::unique_job_id();
    auto res = harness::run_ranks(
        1,
        [&](int) -> std::string {
            setenv("INCMOE_TIMEOUT_MS", "1000", 1);
            Barrier bar(N);
            return run_threads(N, [&](int rank) -> std::string {
                std::string err;
                incmoe_comm_t *comm =
                    moeref::comm_create(sw.addr, job, rank, N, INCMOE_ALGO_INC, &err);
                if (comm == nullptr)
                    return err;
                moeref::Problem p =
                    moeref::make_problem(shape(N, 4, 2, INCMOE_FLOAT16, 64, 32), {48, 40}, 7);
                std::vector<uint8_t> g, u, d;
                moeref::local_weights(p, rank, &g, &u, &d);
                DeviceInputs in;
                err = in.load(p, rank, true);
                incmoe_moe_params_t prm = cuda_layer_params(p.s, comm, g, u, d);
                prm.config = cfg(8, 1, 2, 1, 1);
                prm.timeout_ms = kErrTimeoutMs;
                incmoe_moe_t *L = nullptr;
                incmoe_status_t st = incmoe_moe_create(&prm, &L);
                if (err.empty() && st != INCMOE_OK)
                    err = std::string("create: ") + incmoe_strerror(st);
                if (err.empty())
                    err = body(rank, L, in, p, &bar, sw.pid);
                if (L != nullptr)
                    incmoe_moe_destroy(L); /* its status repeats the forward's error */
                incmoe_comm_destroy(comm);
                return err;
            });
        },
        60);
    harness::switch_stop(&sw);
    EXPECT_EQ(harness::failures(res), "");
}

/* Forwards until one fails; "" when one failed within max_forwards and the
   next one was refused as well (the layer is unusable after a failure inside
   the kernel, and a dead switch fails the header exchange). */
std::string forward_until_error(incmoe_moe_t *L, const DeviceInputs &in, const moeref::Problem &p,
                                int rank, int max_forwards, std::atomic<int> *succeeded = nullptr)
{
    std::vector<uint8_t> out;
    for (int i = 0; i < max_forwards; i++) {
        std::string e = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out);
        if (e.empty()) {
            if (succeeded != nullptr)
                (*succeeded)++;
            continue;
        }
        if (e.find("forward (") != 0)
            return e; /* a CUDA error copying the outputs, not the forward's status */
        if (forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out).empty())
            return "a forward after the failed one (" + e + ") succeeded";
        return "";
    }
    return "no forward failed in " + std::to_string(max_forwards);
}

} // namespace

/* The switch dies while the ranks run forwards back to back: some forward on
   every rank returns an error (a collective the switch never answers fails,
   or its wait in the kernel times out) and the next is refused too. */
TEST_F(MoeCuda, KilledSwitchFailsTheForward)
{
    run_error_case([](int rank, incmoe_moe_t *L, const DeviceInputs &in, const moeref::Problem &p,
                      Barrier *bar, pid_t switch_pid) -> std::string {
        std::vector<uint8_t> out;
        /* One good forward each first: the failure below is the switch's death. */
        std::string err = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out);
        if (!bar->wait() && err.empty())
            err = "the other rank never finished its first forward";
        if (!err.empty())
            return "first forward: " + err;
        /* Rank 0 kills the switch once its loop below has run two forwards (or ended):
           the switch dies while the ranks run forwards back to back. */
        std::atomic<int> succeeded{0};
        std::atomic<bool> ended{false};
        std::thread killer;
        if (rank == 0)
            killer = std::thread([switch_pid, &succeeded, &ended] {
                while (succeeded.load() < 2 && !ended.load())
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                kill(switch_pid, SIGKILL);
            });
        /* Once the switch is gone each forward ends within a few layer timeouts;
           until then they succeed quickly, so this loop ends well within the
           harness's bound. */
        err = forward_until_error(L, in, p, rank, 1000000, &succeeded);
        ended = true;
        if (killer.joinable())
            killer.join();
        return err;
    });
}

/* Rank 1 stops after one forward and keeps its communicator: rank 0's second
   forward waits for it no longer than the layer's timeout and fails. */
TEST_F(MoeCuda, MissingPeerTimesOut)
{
    run_error_case([](int rank, incmoe_moe_t *L, const DeviceInputs &in, const moeref::Problem &p,
                      Barrier *bar, pid_t) -> std::string {
        std::vector<uint8_t> out;
        std::string err = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out);
        if (err.empty())
            err = check_ref(out, moeref::reference(p, rank), p.s.dtype, "first forward");
        if (rank == 0 && err.empty()) {
            std::string e = forward(L, INCMOE_MOE_PIPELINED, in, p, rank, &out);
            if (e.empty())
                err = "the second forward succeeded without rank 1";
            else if (e.find("forward (") != 0)
                err = e;
        }
        /* Rank 1 holds its layer and communicator until rank 0 is done. */
        bar->wait(4 * kErrTimeoutMs + 10000);
        return err;
    });
}
