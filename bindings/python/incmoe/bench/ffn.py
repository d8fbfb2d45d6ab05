"""The expert compute alone, incmoe against torch: one rank, no network.

Per shape: incmoe.MoE in baseline mode (its AllGather and ReduceScatter over
one rank move nothing, so its forward is its experts) against torch's experts
as vLLM's AgRs path and transformers run them (per expert: its routed rows,
one linear for gate and up, SiLU times up, one linear for down, weighted
index_add; incmoe.bench.agrs), on the same weights, routing and thread count,
with one large torch.mm of the same FLOPs (fp32) beside them as the machine's
limit.  Threads: torch.set_num_threads(t) for torch, the layer's compute team
of t workers (config compute_workers) for incmoe.

FLOPs of a forward: 6 H I per routed (token, local expert) pair.

  python -m incmoe.bench.ffn --threads 1,2 --dtype float32 -n 5
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import incmoe

# name: (E, k, H, I, tokens).  olmoe: the prefill bench's OLMoE shape at bench
# size (E=64 k=8 H=512 I=256); 2,048 rows, what one of N=4 ranks with 512
# tokens each runs its 16 experts over (here all 64 on one rank: the same rows
# per expert, four times the experts).
SHAPES = {
    "h512": (16, 4, 512, 2048, 2048),
    "h2048": (16, 4, 2048, 1024, 1024),
    "olmoe": (64, 8, 512, 256, 2048),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_experts(x, ids, w, w13, w2):
    """incmoe.bench.agrs's local experts (every expert local)."""
    y = torch.zeros_like(x)
    I = w2.shape[2]
    for j in range(w13.shape[0]):
        tok, slot = (ids == j).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = F.linear(x[tok], w13[j])
        h = F.linear(F.silu(gu[:, :I]) * gu[:, I:], w2[j])
        y.index_add_(0, tok, h * w[tok, slot, None].to(h.dtype))
    return y


def inputs(E, k, H, I, T, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H**0.5).to(dtype)
    w2 = (torch.randn(E, H, I, generator=g) / I**0.5).to(dtype)
    x = torch.randn(T, H, generator=g).to(dtype)
    ids = torch.rand(T, E, generator=g).argsort(dim=1)[:, :k].contiguous()
    w = torch.rand(T, k, generator=g)
    return x, ids, w, w13, w2


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def med(v):
    return "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))


def run_shape(comm, name, dtype, threads, iters, warmup):
    E, k, H, I, T = SHAPES[name]
    x, ids, w, w13, w2 = inputs(E, k, H, I, T, dtype)
    flops = 6.0 * H * I * T * k
    torch.set_num_threads(threads)
    layer = incmoe.MoE(comm, E, k, H, I, w13, w2, mode="baseline", max_tokens=T,
                       config={"compute_workers": threads})
    ids32 = ids.to(torch.int32)
    out = torch.empty(T, H, dtype=dtype)
    with torch.no_grad():
        t_inc = timed(lambda: layer(x, ids32, w, counts=[T], out=out), iters, warmup)
        t_torch = timed(lambda: torch_experts(x, ids, w, w13, w2), iters, warmup)
        a = torch.randn(T * k, H)
        b = torch.randn(H, 3 * I)
        t_mm = timed(lambda: torch.mm(a, b), iters, warmup)
    ref = torch_experts(x, ids, w, w13, w2).double()
    err = (out.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    layer.close()
    # Ratios per run, side by side (run i of each), then their median.
    ratio = [a / b for a, b in zip(t_inc, t_torch)]
    gf = lambda ts: [flops / t / 1e9 for t in ts]  # noqa: E731
    frac = [a / b for a, b in zip(gf(t_inc), gf(t_mm))]
    print("%-6s %-8s %d | incmoe %s ms %s GF/s | torch %s ms %s GF/s | mm %s GF/s | "
          "incmoe/torch %s | incmoe/mm %s | rel.err %.1e"
          % (name, str(dtype).replace("torch.", ""), threads,
             med([t * 1e3 for t in t_inc]), med(gf(t_inc)), med([t * 1e3 for t in t_torch]),
             med(gf(t_torch)), med(gf(t_mm)), med(ratio), med(frac), err), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m incmoe.bench.ffn",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="of %s" % ", ".join(SHAPES))
    ap.add_argument("--dtype", default="float32", help="comma-separated, of %s" % ", ".join(DTYPES))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("-n", "--iters", type=int, default=5)
    ap.add_argument("-w", "--warmup", type=int, default=1)
    args = ap.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            ap.error("shape %r: expected one of %s" % (s, ", ".join(SHAPES)))
    dtypes = []
    for d in args.dtype.split(","):
        if d not in DTYPES:
            ap.error("dtype %r: expected one of %s" % (d, ", ".join(DTYPES)))
        dtypes.append(DTYPES[d])
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        ap.error("--threads %r: expected comma-separated integers" % args.threads)
    if any(t < 1 or t > 16 for t in threads):
        ap.error("--threads: each 1..16")
    if args.iters < 1 or args.warmup < 0:
        ap.error("-n must be at least 1 and -w at least 0")
    print("# shape dtype threads | median (min-max) of %d runs after %d warm-up; "
          "ratios run by run; mm: one torch.mm of the same FLOPs (fp32)" % (args.iters, args.warmup))
    with incmoe.Switch() as sw:
        comm = incmoe.Communicator(sw.address, 1, 0, 1)
        for name in shapes:
            for dt in dtypes:
                for t in threads:
                    run_shape(comm, name, dt, t, args.iters, args.warmup)
        comm.close()


if __name__ == "__main__":
    main()
