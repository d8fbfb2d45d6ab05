"""One rank of the auto-path check (issue 27, item 2): does the layer's automatic
choice run as fast as the fastest path it has?

Run on the testbed (tools/testbed run -- python3 auto_path.py {switch} {rank} {nranks}).
E=16 k=4 H=512 I=256 fp32 (incmoe-moe-bench's default shape), T tokens per rank routed
uniformly.  One layer with algo, mode and routing all "auto" is created first and kept
(it holds the ring and a2a communicators every forced layer shares): its first forward
measures the 12 paths, then REPS forwards run its choice.  Then each of the 12 paths,
forced, runs one warm-up forward and REPS timed ones.  Rank 0 prints one line per path:
the median ms of a forward on this rank with min-max, and the ratio auto / fastest
forced path.  Every forward is preceded by a small AllReduce so the ranks start together.
"""

import statistics
import sys
import time

import torch

import incmoe

E, K, H, I = 16, 4, 512, 256
T = int(sys.argv[4]) if len(sys.argv) > 4 else 256
REPS = 5


def main():
    switch, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    comm = incmoe.Communicator(switch, 0x6175746F, rank, n, algo="inc", timeout_ms=60000)
    g = torch.Generator().manual_seed(1)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    w13, w2 = W13[rank * el : (rank + 1) * el], W2[rank * el : (rank + 1) * el]
    gx = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(T, H, generator=gx)
    ids = torch.stack([torch.randperm(E, generator=gx)[:K] for _ in range(T)])
    w = torch.rand(T, K, generator=gx)
    counts = [T] * n
    sync = torch.zeros(1)

    def run(layer, reps):
        ts = []
        for _ in range(reps):
            comm.all_reduce(sync)
            t0 = time.perf_counter()
            layer(x, ids, w, counts=counts)
            ts.append((time.perf_counter() - t0) * 1e3)
        return ts

    rows = []
    auto = incmoe.MoE(comm, E, K, H, I, w13, w2, mode="auto", algo="auto", routing="auto",
                      max_tokens=T)
    first = run(auto, 1)[0]
    chosen = auto.path
    rows.append(("auto (%s/%s/%s)" % chosen, run(auto, REPS)))
    for algo in ("inc", "ring", "a2a"):
        for mode in ("baseline", "pipelined"):
            for routing in ("full", "masked"):
                layer = incmoe.MoE(comm, E, K, H, I, w13, w2, mode=mode, algo=algo,
                                   routing=routing, max_tokens=T)
                run(layer, 1)
                rows.append(("%s/%s/%s" % (algo, mode, routing), run(layer, REPS)))
                layer.close()
    auto.close()
    comm.close()
    if rank == 0:
        print("N=%d T=%d E=%d k=%d H=%d I=%d fp32; auto's measuring forward %.1f ms" %
              (n, T, E, K, H, I, first))
        best = min(statistics.median(t) for _, t in rows[1:])
        for name, t in rows:
            print("%-32s %8.1f ms (%.1f-%.1f)" % (name, statistics.median(t), min(t), max(t)))
        print("auto / fastest forced: %.3f" % (statistics.median(rows[0][1]) / best))


main()
