"""incmoe.MoE(..., placement=...): a layer whose experts live on several
ranks (the C header's "Replicas"), against the same float64 PyTorch reference
as test_moe.py, on 3 ranks with E = 7 (not divisible: a placement needs no
contiguity), every rank holding the experts the placement gives it (replicas
included), in the pipelined, baseline and decode modes with masked routing
and in full routing; and bad placements refused: on the Python side (not E
lists, a rank out of range) with ValueError, in the library (ranks not
ascending) with IncmoeError on every rank.  Tolerance as test_moe.py's fp32:
max |incmoe - reference| <= 1e-5 max |reference|."""

import pytest
import torch

import incmoe
from conftest import new_job, run_ranks
from test_moe import reference_moe

E, K, H, I = 7, 3, 24, 16
# Expert 0 everywhere, 1 and 2 on two ranks, the rest on one.
PLACEMENT = [[0, 1, 2], [0, 2], [1, 2], [0], [1], [2], [2]]


def _inputs(seed, T):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    return x, ids, torch.rand(T, K, generator=g)


def replicas_body(rank, n, addr, job):
    g = torch.Generator().manual_seed(11)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    mine = [e for e in range(E) if rank in PLACEMENT[e]]
    comm = incmoe.Communicator(addr, job, rank, n)
    with pytest.raises(ValueError, match="num_experts = 7 lists"):
        incmoe.MoE(comm, E, K, H, I, W13[mine], W2[mine], placement=PLACEMENT[:-1])
    with pytest.raises(ValueError, match=r"placement\[3\]"):
        incmoe.MoE(comm, E, K, H, I, W13[mine], W2[mine], placement=PLACEMENT[:3] + [[3]] + PLACEMENT[4:])
    with pytest.raises(incmoe.IncmoeError, match="invalid"):
        bad = [list(reversed(p)) for p in PLACEMENT] if rank == 1 else PLACEMENT
        incmoe.MoE(comm, E, K, H, I, W13[mine], W2[mine], placement=bad)
    layer = incmoe.MoE(comm, E, K, H, I, W13[mine], W2[mine], max_tokens=40, placement=PLACEMENT)
    for counts in ([5, 0, 3], [30, 17, 24], [0, 0, 0]):
        T = counts[rank]
        x, ids, w = _inputs(100 * T + rank, T) if T else (torch.empty(0, H), torch.empty(0, K, dtype=torch.int64), torch.empty(0, K))
        ref = reference_moe(x, ids, w, W13, W2)
        scale = max(ref.abs().max().item(), 1e-30) if T else 1.0
        for mode, routing in (("pipelined", "masked"), ("baseline", "masked"),
                              ("decode", "masked"), ("pipelined", "full")):
            y = layer(x, ids, w, counts=counts, mode=mode, routing=routing)
            err = (y.double() - ref).abs().max().item() if T else 0.0
            assert err <= 1e-5 * scale, (counts, mode, routing, err, scale)
            want = "decode" if mode == "decode" and max(counts) <= 32 else \
                ("pipelined" if mode == "decode" else mode)
            assert layer.last_timing()["mode"] == want, (counts, mode, layer.last_timing())
    layer.close()
    comm.close()


@pytest.mark.expect_errors("a rank's placement is not ascending")
def test_moe_placement_replicas(switch):
    run_ranks(replicas_body, 3, switch.address, new_job())
