#!/usr/bin/env python3
"""A small MoE layer on 4 ranks with incmoe.MoE, checked against the same
layer computed in one process with plain PyTorch.

    python3 bindings/python/examples/moe_layer.py [--mode pipelined|baseline] [--algo inc|ring]

Every rank holds E/4 experts (vLLM's FusedMoE layout: w13 [E/4, 2I, H] with
the gate rows first, w2 [E/4, H, I]) and its own tokens, a different number
on each rank (one rank has none).  The parent process builds the whole layer,
hands each rank its experts and tokens, and compares what the ranks return
with its single-process evaluation of
    y_t = sum_k topk_weights[t,k] * W2[e] (silu(W1[e] x_t) * W3[e] x_t).
Starts its own switch unless INCMOE_SWITCH=host:port names one.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import incmoe  # noqa: E402
from ranks import run_ranks  # noqa: E402

N, E, TOP_K, H, I = 4, 16, 4, 256, 128
TOKENS = [37, 0, 12, 64]  # per rank


def single_process_moe(x, ids, weights, w13, w2):
    """The whole layer in one process: each expert on the tokens routed to it."""
    y = torch.zeros_like(x)
    for e in range(w13.shape[0]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gate, up = (x[tok] @ w13[e].T).chunk(2, dim=-1)
        y.index_add_(0, tok, weights[tok, slot, None] * ((F.silu(gate) * up) @ w2[e].T))
    return y


def rank_main(rank, switch, job, mode, algo, w13, w2, x, ids, weights, results):
    torch.set_num_threads(1)
    el = E // N
    with incmoe.Communicator(switch, job, rank, N, algo=algo) as comm:
        layer = incmoe.MoE(comm, E, TOP_K, H, I, w13[rank * el:(rank + 1) * el],
                           w2[rank * el:(rank + 1) * el], mode=mode, max_tokens=max(TOKENS))
        y = layer(x, ids, weights)  # token counts gathered by the layer
        if rank == 0:
            print("pipeline configuration for counts %s: %s" % (TOKENS, layer.config), flush=True)
        layer.close()
    # As numpy: a tensor would travel as shared memory the exiting rank takes along.
    results.put((rank, y.numpy()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="pipelined", choices=["pipelined", "baseline"])
    ap.add_argument("--algo", default="inc", choices=["inc", "ring"])
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    w2 = torch.randn(E, H, I, generator=g) / I**0.5
    total = sum(TOKENS)
    x = torch.randn(total, H, generator=g)
    logits = torch.randn(total, E, generator=g)
    weights, ids = torch.softmax(logits, dim=-1).topk(TOP_K, dim=-1)  # the caller's routing
    ref = single_process_moe(x, ids, weights, w13, w2)

    starts = [sum(TOKENS[:r]) for r in range(N)]
    rank_args = []
    for r in range(N):
        sl = slice(starts[r], starts[r] + TOKENS[r])
        rank_args.append((args.mode, args.algo, w13, w2, x[sl], ids[sl], weights[sl]))
    got = run_ranks(N, rank_main, rank_args, timeout_s=120)
    ok = len(got) == N
    for r in sorted(got):
        sl = slice(starts[r], starts[r] + TOKENS[r])
        err = (got[r] - ref[sl]).abs().max().item() if TOKENS[r] else 0.0
        scale = ref[sl].abs().max().item() if TOKENS[r] else 1.0
        good = err <= 1e-5 * scale
        ok &= good
        print("rank %d: %2d tokens, max |incmoe - pytorch| = %.3g (max |y| = %.3g) %s"
              % (r, TOKENS[r], err, scale, "ok" if good else "MISMATCH"))
    print("moe example (%s, %s): %s" % (args.mode, args.algo, "ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
