"""incmoe.MoE against a plain PyTorch MoE layer (written here, evaluated in
float64 on the same rounded inputs): N = 1, 2, 4 ranks, both modes, fp32,
fp16 and bf16, unequal and zero token counts, counts= and out=; routing=
masked and auto against full (bitwise in fp32 in-network), a routing
refused on one rank failing the others' forward too, and the decode step
(mode="decode").

Tolerances, as max |incmoe - reference| / max |reference| over a rank's
outputs: fp32 1e-5; fp16 2e-3 and bf16 1.5e-2, about three times the worst
seen (6.4e-4 and 4.9e-3 on 4 ranks x 30 tokens): the layer keeps the
activations and the partial sums it sends through ReduceScatter in the
layer's type, so they round at a few points (2**-11 and 2**-8 relative)."""

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

import incmoe
from conftest import new_job, run_ranks

E, K, H, I = 8, 2, 48, 40
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
COUNTS = {1: [[7], [0]], 2: [[0, 9], [6, 6]], 4: [[5, 0, 17, 3], [0, 0, 0, 0], [8, 8, 8, 8]]}


def reference_moe(x, ids, w, w13, w2):
    """y_t = sum_j w[t,j] * W2[e] (silu(W1[e] x_t) * W3[e] x_t), e = ids[t,j], in float64."""
    x, w13, w2, w = x.double(), w13.double(), w2.double(), w.double()
    y = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w13[e] @ x[t]
            g, u = h[: w13.shape[1] // 2], h[w13.shape[1] // 2 :]
            y[t] += w[t, j] * (w2[e] @ (F.silu(g) * u))
    return y


def _inputs(seed, T):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]) if T else torch.empty(0, K, dtype=torch.int64)
    w = torch.rand(T, K, generator=g)
    return x, ids, w


def moe_body(rank, n, addr, job, algo):
    g = torch.Generator().manual_seed(42)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    comm = incmoe.Communicator(addr, job, rank, n, algo=algo)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        w13 = W13[rank * el : (rank + 1) * el].to(dt)
        w2 = W2[rank * el : (rank + 1) * el].to(dt)
        layer = incmoe.MoE(comm, E, K, H, I, w13, w2, max_tokens=32)
        assert layer.dtype == dt
        cfg = layer.config
        assert cfg.nbands >= 1 and str(cfg)
        for ci, counts in enumerate(COUNTS[n]):
            T = counts[rank]
            x, ids, w = _inputs(1000 * ci + rank, T)
            x = x.to(dt)
            # Reference from the rounded inputs and weights the layer sees.
            ref = reference_moe(x, ids, w, W13.to(dt), W2.to(dt))
            scale = max(ref.abs().max().item(), 1e-30) if T else 1.0
            for mode in ("pipelined", "baseline"):
                y = layer(x, ids, w, mode=mode)
                assert y.shape == (T, H) and y.dtype == dt
                err = (y.double() - ref).abs().max().item() if T else 0.0
                assert err <= TOL[dt] * scale, (dt, counts, mode, err, scale)
                # counts given (no gather) and out= (written in place).
                out = torch.full((T, H), float("nan"), dtype=dt)
                r = layer(x, ids.to(torch.int32), w, counts=counts, out=out, mode=mode)
                assert r is out
                assert torch.equal(out, y), (dt, counts, mode)
            assert layer.config == layer.config_for(counts)
        timing = layer.last_timing()
        assert timing["total_ms"] >= 0
        layer.close()
    comm.close()


@pytest.mark.parametrize("algo", ["inc", "ring"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_moe_matches_pytorch(switch, n, algo):
    run_ranks(moe_body, n, switch.address, new_job(), algo)


def module_body(rank, n, addr, job):
    """The module works as a torch.nn.Module: in a Sequential, under no_grad."""
    g = torch.Generator().manual_seed(3)
    W13 = torch.randn(E, 2 * I, H, generator=g)
    W2 = torch.randn(E, H, I, generator=g)
    el = E // n
    comm = incmoe.Communicator(addr, job, rank, n)
    layer = incmoe.MoE(comm, E, K, H, I, W13[rank * el : (rank + 1) * el], W2[rank * el : (rank + 1) * el],
                       mode="baseline", max_tokens=16)
    assert isinstance(layer, torch.nn.Module) and "E=8" in repr(layer)
    x, ids, w = _inputs(rank, 4 + rank)
    with torch.no_grad():
        y = layer(x, ids, w)
    ref = reference_moe(x, ids, w, W13, W2)
    assert (y.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
    layer.close()
    comm.close()


def test_moe_module(switch):
    run_ranks(module_body, 2, switch.address, new_job())


def routing_body(rank, n, addr, job, algo):
    g = torch.Generator().manual_seed(7)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    counts = [5, 0, 17, 3][:n]
    comm = incmoe.Communicator(addr, job, rank, n, algo=algo)
    for dt in (torch.float32, torch.bfloat16):
        w13 = W13[rank * el : (rank + 1) * el].to(dt)
        w2 = W2[rank * el : (rank + 1) * el].to(dt)
        layer = incmoe.MoE(comm, E, K, H, I, w13, w2, max_tokens=32, routing="masked",
                           config={"nbands": 3})
        assert layer.routing == "masked" and "routing=masked" in repr(layer)
        T = counts[rank]
        x, ids, w = _inputs(77 + rank, T)
        x = x.to(dt)
        full = layer(x, ids, w, counts=counts, routing="full")
        assert layer.last_timing()["routing"] == "full"
        try:
            masked = layer(x, ids, w, counts=counts)
        except incmoe.IncmoeError as e:
            # An algorithm without dispatch and combine: refused alike on every rank, the
            # layer carries on, and auto runs full routing.
            assert algo != "inc" and "unsupported" in str(e).lower(), e
            assert torch.equal(layer(x, ids, w, counts=counts, routing="auto"), full)
            assert layer.last_timing()["routing"] == "full"
            layer.close()
            continue
        assert layer.last_timing()["routing"] == "masked"
        ref = reference_moe(x, ids, w, W13.to(dt), W2.to(dt))
        scale = max(ref.abs().max().item(), 1e-30) if T else 1.0
        err = (masked.double() - ref).abs().max().item() if T else 0.0
        assert err <= TOL[dt] * scale, (dt, err, scale)
        if dt == torch.float32 and algo == "inc":
            assert torch.equal(masked, full)
        base = layer(x, ids, w, counts=counts, mode="baseline")
        t = layer.last_timing()
        assert t["routing"] == "masked" and t["dispatch_ms"] > 0 and t["allgather_ms"] == 0
        if dt == torch.float32 and algo == "inc":
            assert torch.equal(base, layer(x, ids, w, counts=counts, mode="baseline",
                                           routing="full"))
        layer.close()
    # A routing no one knows, on rank 0: a ValueError there, the others' forward fails.
    layer = incmoe.MoE(comm, E, K, H, I, W13[rank * el : (rank + 1) * el],
                       W2[rank * el : (rank + 1) * el], max_tokens=32)
    x, ids, w = _inputs(rank, counts[rank])
    if rank == 0:
        with pytest.raises(ValueError, match="routing is 'sideways'"):
            layer(x, ids, w, counts=counts, routing="sideways")
    else:
        with pytest.raises((ValueError, incmoe.IncmoeError)):
            layer(x, ids, w, counts=counts)
    layer.close()
    with pytest.raises(ValueError, match="routing is 'x'"):
        incmoe.MoE(comm, E, K, H, I, W13[rank * el : (rank + 1) * el],
                   W2[rank * el : (rank + 1) * el], routing="x")
    comm.close()


@pytest.mark.expect_errors("a routing one rank refuses fails the others' forward")
@pytest.mark.parametrize("algo", ["inc", "ring"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_moe_routing(switch, n, algo):
    run_ranks(routing_body, n, switch.address, new_job(), algo)


def auto_body(rank, n, addr, job, slow, want):
    """algo="auto", mode="auto": every rank ends on the same path, the one the test hook
    (INCMOE_MOE_TEST_PATH_MS on rank 0 only: milliseconds added to its measured times) leaves
    fastest; outputs match the reference whichever path ran; a bad algo is refused."""
    import os

    if rank == 0:
        os.environ["INCMOE_MOE_TEST_PATH_MS"] = slow
    g = torch.Generator().manual_seed(7)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    comm = incmoe.Communicator(addr, job, rank, n, algo="inc")
    w13, w2 = W13[rank * el : (rank + 1) * el], W2[rank * el : (rank + 1) * el]
    with pytest.raises(ValueError, match="algo"):
        incmoe.MoE(comm, E, K, H, I, w13, w2, algo="fastest")
    layer = incmoe.MoE(comm, E, K, H, I, w13, w2, mode="auto", algo="auto", max_tokens=32)
    assert "algo=auto" in repr(layer)
    for step in range(2):
        x, ids, w = _inputs(50 + rank, 6 + 3 * rank)
        y = layer(x, ids, w)
        ref = reference_moe(x, ids, w, W13, W2)
        assert (y.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
        t = layer.last_timing()
        # 12 bulk paths, and the decode step on each algorithm (counts within its capacity).
        assert t["measured"] == (15 if step == 0 else 0), t
        assert layer.path[0] == want, (layer.path, t)
    layer.close()
    comm.close()


@pytest.mark.expect_errors("a bad algo is refused at create on every rank")
@pytest.mark.parametrize("slow,want", [("inc=10000,a2a=10000", "ring"), ("ring=10000,a2a=10000", "inc")])
def test_moe_auto_picks_the_faster_path(switch, slow, want):
    run_ranks(auto_body, 4, switch.address, new_job(), slow, want)


def decode_body(rank, n, addr, job, algo):
    """mode="decode": forwards within the decode capacity run the decode step (no count
    exchange), into out= in place, matching the reference; one over it runs pipelined; a rank
    that refuses its arguments (counts given) fails the others' decode step too, and the
    layer carries on."""
    g = torch.Generator().manual_seed(11)
    W13 = torch.randn(E, 2 * I, H, generator=g) / H**0.5
    W2 = torch.randn(E, H, I, generator=g) / I**0.5
    el = E // n
    comm = incmoe.Communicator(addr, job, rank, n, algo=algo)
    layer = incmoe.MoE(comm, E, K, H, I, W13[rank * el : (rank + 1) * el],
                       W2[rank * el : (rank + 1) * el], mode="decode", max_tokens=16,
                       decode_tokens=3)
    assert layer.decode_tokens == 3
    out = torch.empty(3, H)
    for step, counts in enumerate(([1, 3, 0, 2][:n], [0, 1, 2, 3][:n], [5, 1, 4, 0][:n])):
        T = counts[rank]
        x, ids, w = _inputs(200 + 10 * step + rank, T)
        y = layer(x, ids, w, counts=counts, out=out[:T] if T <= 3 else None)
        ref = reference_moe(x, ids, w, W13, W2)
        if T:
            assert (y.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
        want = "decode" if max(counts) <= 3 else "pipelined"
        assert layer.last_timing()["mode"] == want, (counts, layer.last_timing())
        if T and T <= 3:
            assert y.data_ptr() == out.data_ptr()
    counts = [2] * n
    x, ids, w = _inputs(300 + rank, 2)
    bad = x.double() if rank == n - 1 else x
    with pytest.raises((ValueError, incmoe.IncmoeError), match="dtype" if rank == n - 1 else "invalid"):
        layer(bad, ids, w, counts=counts)
    y = layer(x, ids, w, counts=counts)
    assert layer.last_timing()["mode"] == "decode"
    ref = reference_moe(x, ids, w, W13, W2)
    assert (y.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
    with pytest.raises(ValueError, match="decode_tokens"):
        incmoe.MoE(comm, E, K, H, I, W13[:el], W2[:el], max_tokens=4, decode_tokens=5)
    layer.close()
    comm.close()


@pytest.mark.expect_errors("a rank refuses its decode step's arguments")
@pytest.mark.parametrize("algo", ["inc", "a2a"])
def test_moe_decode_step(switch, algo):
    run_ranks(decode_body, 4, switch.address, new_job(), algo)


def ownership_body(rank, n, addr, job, order):
    """A layer caught in a reference cycle (as a transformers model's are) is
    freed by a gc pass after its communicator went: the communicator destroyed
    it first, so the gc finds nothing left to release (before, the layer's
    destroy deregistered its regions through the freed communicator, printing
    'region ... is not registered here')."""
    g = torch.Generator().manual_seed(5)
    el = E // n
    w13 = torch.randn(el, 2 * I, H, generator=g)
    w2 = torch.randn(el, H, I, generator=g)
    x, ids, w = _inputs(rank, 3)
    gc.disable()  # the cycle goes when this test says, not at an allocation in between
    try:
        comm = incmoe.Communicator(addr, job, rank, n)
        layer = incmoe.MoE(comm, E, K, H, I, w13, w2, max_tokens=8)
        y = layer(x, ids, w)
        assert y.shape == (3, H)
        holder = {"layer": layer}
        holder["self"] = holder  # the cycle: only a gc pass frees the layer
        gone = weakref.ref(layer)
        del layer, y
        if order == "closed":
            comm.close()  # the layer is still alive, in the cycle
            assert holder["layer"].closed
            with pytest.raises(incmoe.IncmoeError, match="closed"):
                holder["layer"](x, ids, w)
        else:  # the communicator is dropped too, in the same cycle: gc picks the order
            holder["comm"] = comm
        del comm, holder
        gc.collect()
        assert gone() is None, "the layer was not collected: the test proved nothing"
    finally:
        gc.enable()


@pytest.mark.parametrize("order", ["closed", "dropped"])
def test_moe_layer_outliving_its_communicator(switch, order):
    run_ranks(ownership_body, 2, switch.address, new_job(), order)


def test_moe_bench_runs_the_layers_choice():
    """incmoe-moe-bench --algo auto --mode auto: rows for the layer's own choice beside the
    forced ones, each with the path it ran, every output verified (the bench exits 0 only
    then); the mode-auto column of a forced algorithm names that algorithm."""
    import os
    import re
    import subprocess

    from incmoe import _lib
    from conftest import error_lines

    build = os.path.dirname(os.path.dirname(_lib._source_build_dirs()[0]))
    bench = os.path.join(build, "tools", "incmoe-moe-bench")
    if not os.access(bench, os.X_OK):
        pytest.fail("no %s: build the tree first" % bench)
    r = subprocess.run([bench, "-N", "2", "-t", "16", "-n", "1", "-w", "1", "--algo", "ring,auto",
                        "--mode", "baseline,pipelined,auto", "--routing", "full,auto"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "outputs verified" in r.stdout, r.stdout + r.stderr
    assert not error_lines(r.stdout + r.stderr), r.stdout + r.stderr
    head = next(x for x in r.stdout.splitlines() if x.startswith("tok/rank")).split()
    assert head[3:6] == ["base_ms", "pipe_ms", "auto_ms"], head
    rows = [x.split() for x in r.stdout.splitlines() if x.split() and x.split()[0] == "16"]
    assert [(x[1], x[2].split(">")[0]) for x in rows] == [
        ("ring", "full"), ("ring", "auto"), ("auto", "full"), ("auto", "auto")], r.stdout
    for x in rows:
        assert all(float(v) > 0 for v in x[3:6]), x  # every mode ran
        line = " ".join(x)
        if x[1] == "ring":
            assert "auto: path ring/" in line, line
        else:
            for mode in ("baseline", "pipelined", "auto"):
                assert "%s: path " % mode in line, line
        if x[2] == "full":  # a routing the forwards force stays forced in every path
            paths = re.findall(r"path \w+/\w+/(\w+)", line)
            assert paths and set(paths) == {"full"}, line
