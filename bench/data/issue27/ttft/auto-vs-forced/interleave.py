"""Does the path auto chooses run as fast as the same path forced?  (issue 27 item 2)

One rank; run on the testbed:
    tools/testbed --id 65 up -N 4 --rate 100mbit
    INCMOE_LOG_LEVEL=info INCMOE_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/bindings/python \
      OPENBLAS_NUM_THREADS=1 tools/testbed --id 65 run -- \
      python3 bench/data/issue27/ttft/auto-vs-forced/interleave.py {switch} {rank} {nranks}
    tools/testbed --id 65 down

E=16 k=4 H=512 I=256 fp32, T=256 tokens a rank routed uniformly, torch one thread.  A
layer with algo, mode and routing "auto" measures on its first forward; then a layer
forced to the path it chose runs one warm-up, and REPS forwards of each alternate (auto,
forced, auto, ...) so a slow spell of the shared machine falls on both alike.  Rank 0
prints the measuring forward's time and runs, both layers' band plans (config_for) and
the forwards' medians with min-max, and each pair's ratio.
"""
import statistics, sys, time, os
import torch
import incmoe

E, K, H, I = 16, 4, 512, 256
T = int(sys.argv[4]) if len(sys.argv) > 4 else 256
REPS = 7

def main():
    switch, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    comm = incmoe.Communicator(switch, 0x6175746F, rank, n, algo="inc", timeout_ms=60000)
    g = torch.Generator().manual_seed(1)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    w13, w2 = W13[rank * el:(rank + 1) * el], W2[rank * el:(rank + 1) * el]
    gx = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(T, H, generator=gx)
    ids = torch.stack([torch.randperm(E, generator=gx)[:K] for _ in range(T)])
    w = torch.rand(T, K, generator=gx)
    counts = [T] * n
    sync = torch.zeros(1)
    def run(layer):
        comm.all_reduce(sync)
        t0 = time.perf_counter()
        layer(x, ids, w, counts=counts)
        return (time.perf_counter() - t0) * 1e3
    auto = incmoe.MoE(comm, E, K, H, I, w13, w2, mode="auto", algo="auto", routing="auto", max_tokens=T)
    first = run(auto)
    a, m, r = auto.path
    t = auto.last_timing()
    forced = incmoe.MoE(comm, E, K, H, I, w13, w2, mode=m, algo=a, routing=r, max_tokens=T)
    run(forced)
    ta, tf = [], []
    for _ in range(REPS):
        ta.append(run(auto)); tf.append(run(forced))
    if rank == 0:
        print("first %.1f ms measured %d runs %d; chosen %s/%s/%s" % (first, t["measured"], t.get("measure_runs", -1), a, m, r))
        print("auto config", auto.config_for(counts))
        print("forced config", forced.config_for(counts))
        print("auto   %.1f (%.1f-%.1f)" % (statistics.median(ta), min(ta), max(ta)))
        print("forced %.1f (%.1f-%.1f)" % (statistics.median(tf), min(tf), max(tf)))
        print("ratios", " ".join("%.2f" % (x / y) for x, y in zip(ta, tf)))
    forced.close(); auto.close(); comm.close()
main()
