#!/usr/bin/env python3
"""What the Python layer costs, on this machine.

    python3 bindings/python/benchmarks/bench.py moe [-t 64,256,1024] [-n 5] [-w 2]
    python3 bindings/python/benchmarks/bench.py allreduce [-n 200]

moe: incmoe.MoE forward time on 4 ranks (E=16 k=4 H=512 I=256 float32, the
C benchmark's default shape) against incmoe-moe-bench on the same shape in
the same run; both report the median over the timed forwards of the slowest
rank.  Since whole layer times on a shared machine vary more than the
binding costs, it also reports the time each Python forward spends outside
the C call (argument checks and conversions, the output copy, and with
gathered counts the extra AllGather): the whole call minus the C call's own
wall time (incmoe_moe_last_timing), in the same forward.

allreduce: torch.distributed all_reduce latency on 4 ranks, the "incmoe"
backend against gloo, float32 from 4 B to 1 MiB: the mean of back-to-back
calls of the slowest rank.

Both start their own incmoe-switchd (or use INCMOE_SWITCH).
"""

import argparse
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import incmoe  # noqa: E402

N, E, K, H, I = 4, 16, 4, 512, 256


def _ranks(fn, args):
    """fn(rank, queue, *args) on N forked ranks; returns {rank: what it put}."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=fn, args=(r, q) + args) for r in range(N)]
    for p in procs:
        p.start()
    out = {}
    for _ in range(N):
        r, v = q.get(timeout=600)
        out[r] = v
    for p in procs:
        p.join(60)
    return out


def moe_rank(rank, q, switch, job, tokens, iters, warmup):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    el = E // N
    res = {}
    with incmoe.Communicator(switch, job, rank, N) as comm:
        layer = incmoe.MoE(comm, E, K, H, I, torch.randn(el, 2 * I, H, generator=g),
                           torch.randn(el, H, I, generator=g), max_tokens=max(tokens))
        for T in tokens:
            x = torch.randn(T, H, generator=g)
            ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
            w = torch.rand(T, K, generator=g)
            out = torch.empty(T, H)
            for mode in ("baseline", "pipelined"):
                for given in (True, False):
                    times = []
                    for i in range(warmup + iters):
                        comm.barrier()
                        t0 = time.perf_counter()
                        layer(x, ids, w, counts=[T] * N if given else None, out=out, mode=mode)
                        ms = (time.perf_counter() - t0) * 1e3
                        if i >= warmup:  # (whole call, the C call's own total)
                            times.append((ms, layer.last_timing()["total_ms"]))
                    res[(T, mode, given)] = times
        layer.close()
    q.put((rank, res))


def c_bench(tokens, iters, warmup):
    exe = os.path.join(os.path.dirname(os.path.dirname(incmoe.find_switchd())), "tools",
                       "incmoe-moe-bench")
    if not os.access(exe, os.X_OK):
        exe = "incmoe-moe-bench"
    cmd = [exe, "-N", str(N), "-t", ",".join(map(str, tokens)), "-E", str(E), "-k", str(K),
           "-H", str(H), "-I", str(I), "--algo", "inc", "-n", str(iters), "-w", str(warmup),
           "--no-verify"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[0].isdigit() and f[1] == "inc":
            rows[int(f[0])] = (float(f[2]), float(f[3]))
    return " ".join(cmd), rows


def moe(args, switch):
    tokens = [int(t) for t in args.t.split(",")]
    job = int.from_bytes(os.urandom(8), "little") >> 1
    per_rank = _ranks(moe_rank, (switch, job, tokens, args.n, args.w))
    cmd, c_rows = c_bench(tokens, args.n, args.w)
    print("incmoe.MoE vs %s" % cmd)
    print("N=%d E=%d k=%d H=%d I=%d float32, inc; median over %d forwards of the slowest rank (ms)"
          % (N, E, K, H, I, args.n))
    print("outside C: the Python call's time minus the C call's own (incmoe_moe_last_timing), "
          "same forward, slowest rank")
    print("| tok/rank | mode | C bench | Python, counts given | outside C | Python, counts gathered "
          "| outside C |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for T in tokens:
        for mi, mode in enumerate(("baseline", "pipelined")):
            row = []
            for given in (True, False):
                per_iter = list(zip(*(per_rank[r][(T, mode, given)] for r in range(N))))
                row.append(statistics.median(max(p for p, _ in it) for it in per_iter))
                row.append(statistics.median(max(p - c for p, c in it) for it in per_iter))
            c = c_rows.get(T, (float("nan"),) * 2)[mi]
            print("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f |" % ((T, mode, c) + tuple(row)))


def ar_rank(rank, q, switch, port, sizes, iters):
    torch.set_num_threads(1)
    os.environ.update(INCMOE_SWITCH=switch, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("incmoe", rank=rank, world_size=N)
    gloo = dist.new_group(backend="gloo")
    res = {}
    for n in sizes:
        t = torch.ones(n)
        for name, grp in (("incmoe", None), ("gloo", gloo)):
            for _ in range(10):
                dist.all_reduce(t, group=grp)
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=grp)
            res[(n, name)] = (time.perf_counter() - t0) / iters * 1e6
    dist.destroy_process_group()
    q.put((rank, res))


def allreduce(args, switch):
    sizes = [1, 256, 16384, 262144]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    per_rank = _ranks(ar_rank, (switch, port, sizes, args.n))
    print("torch.distributed all_reduce, N=%d, float32, mean of %d back-to-back calls, "
          "slowest rank (us)" % (N, args.n))
    print("| bytes | incmoe | gloo | incmoe/gloo |")
    print("|---:|---:|---:|---:|")
    for n in sizes:
        a = max(per_rank[r][(n, "incmoe")] for r in range(N))
        b = max(per_rank[r][(n, "gloo")] for r in range(N))
        print("| %d | %.1f | %.1f | %.2f |" % (4 * n, a, b, a / b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("moe")
    m.add_argument("-t", default="64,256,1024", help="tokens per rank, comma-separated")
    m.add_argument("-n", type=int, default=5, help="timed forwards")
    m.add_argument("-w", type=int, default=2, help="warm-up forwards")
    a = sub.add_parser("allreduce")
    a.add_argument("-n", type=int, default=200, help="timed calls per size")
    args = ap.parse_args()
    sw = None
    switch = os.environ.get("INCMOE_SWITCH")
    if not switch:
        sw = incmoe.Switch()
        switch = sw.address
    try:
        (moe if args.what == "moe" else allreduce)(args, switch)
    finally:
        if sw is not None:
            sw.stop()


if __name__ == "__main__":
    main()
