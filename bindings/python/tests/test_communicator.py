"""Every incmoe.Communicator call on N = 1, 2, 4 ranks and every algorithm,
each checked against the same call on PyTorch's gloo backend in the same
processes.  Values are small integers, so every type and every reduction
order gives the exact same result and the comparison is bit for bit."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

import incmoe
from conftest import DTYPES, new_job, run_ranks

OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
COUNT = 37  # elements per rank: odd, so no block is a round size


def _values(g, n, dtype):
    lo = 0 if dtype == torch.uint8 else -8
    return torch.randint(lo, 9, (n,), generator=g).to(dtype)


def _check(name, got, want):
    assert torch.equal(torch.as_tensor(got), want), "%s: got %s, gloo gives %s" % (name, got, want)


def comm_body(rank, n, addr, job, algo, store):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=n)
    g = torch.Generator().manual_seed(1000 + rank)
    c = incmoe.Communicator(addr, job, rank, n, algo=algo)
    assert (c.rank, c.nranks, c.algo) == (rank, n, algo)
    for dt in DTYPES:
        x = _values(g, COUNT, dt)
        out = torch.empty(n * COUNT, dtype=dt)
        c.all_gather(out, x)
        ref = torch.empty(n * COUNT, dtype=dt)
        dist.all_gather_into_tensor(ref, x)
        _check("all_gather %s" % dt, out, ref)
        for op, gop in OPS.items():
            inp = _values(g, n * COUNT, dt)
            o = torch.empty(COUNT, dtype=dt)
            c.reduce_scatter(o, inp, op=op)
            ro = torch.empty(COUNT, dtype=dt)
            dist.reduce_scatter_tensor(ro, inp, op=gop)
            _check("reduce_scatter %s %s" % (op, dt), o, ro)
            t = _values(g, COUNT, dt)
            rt = t.clone()
            c.all_reduce(t, op=op)
            dist.all_reduce(rt, op=gop)
            _check("all_reduce %s %s" % (op, dt), t, rt)
        for root in range(n):
            t = _values(g, COUNT, dt)
            rt = t.clone()
            c.broadcast(t, root=root)
            dist.broadcast(rt, src=root)
            _check("broadcast root %d %s" % (root, dt), t, rt)

    # numpy arrays take the same path as tensors.
    a = _values(g, COUNT, torch.float32).numpy()
    ra = torch.from_numpy(a.copy())
    c.all_reduce(a, op="sum")
    dist.all_reduce(ra)
    _check("all_reduce numpy", torch.from_numpy(a), ra)
    ai = _values(g, COUNT, torch.int32).numpy()
    ao = np.empty(n * COUNT, dtype=np.int32)
    c.all_gather(ao, ai)
    rao = torch.empty(n * COUNT, dtype=torch.int32)
    dist.all_gather_into_tensor(rao, torch.from_numpy(ai))
    _check("all_gather numpy", torch.from_numpy(ao), rao)

    # Several collectives in flight at once, on every stream, then waited.
    x = _values(g, 4 * COUNT, torch.float32)
    ag_out = torch.empty(n * x.numel())
    rs_in = _values(g, n * COUNT, torch.float32)
    rs_out = torch.empty(COUNT)
    ar = _values(g, COUNT, torch.float32)
    ar_ref = ar.clone()
    works = [
        c.all_gather(ag_out, x, async_op=True),
        c.reduce_scatter(rs_out, rs_in, async_op=True),
        c.all_reduce(ar, async_op=True),
        c.barrier(async_op=True),
    ]
    assert all(isinstance(w, incmoe.Work) for w in works)
    for w in works:
        assert w.wait() is True
        assert w.is_completed()
    ref = torch.empty(n * x.numel())
    dist.all_gather_into_tensor(ref, x)
    _check("async all_gather", ag_out, ref)
    ref = torch.empty(COUNT)
    dist.reduce_scatter_tensor(ref, rs_in)
    _check("async reduce_scatter", rs_out, ref)
    dist.all_reduce(ar_ref)
    _check("async all_reduce", ar, ar_ref)
    w = c.all_reduce(ar, async_op=True)
    while not w.is_completed():
        pass
    assert w.wait(timeout=10)

    # Views at an offset inside a larger tensor (one registration, offsets).
    big = torch.zeros(3 * n * COUNT)
    inp = _values(g, COUNT, torch.float32)
    c.all_gather(big[n * COUNT : 2 * n * COUNT], inp)
    ref = torch.empty(n * COUNT)
    dist.all_gather_into_tensor(ref, inp)
    _check("all_gather into a view", big[n * COUNT : 2 * n * COUNT], ref)
    assert not big[: n * COUNT].any() and not big[2 * n * COUNT :].any()

    # all_to_all_single (a dispatch, on every algorithm): every dtype, uneven splits (some
    # empty), numpy too; out_splits that disagree with what came is a ValueError.
    for dt in DTYPES:
        ins = [(rank * 3 + d) % 4 for d in range(n)]
        outs = [(s * 3 + rank) % 4 for s in range(n)]
        x = _values(g, sum(ins) * 5, dt).view(-1, 5)
        o = torch.empty(sum(outs), 5, dtype=dt)
        c.all_to_all_single(o, x, outs, ins)
        ro = torch.empty(sum(outs), 5, dtype=dt)
        dist.all_to_all_single(ro, x, outs, ins)
        _check("all_to_all_single %s" % dt, o, ro)
    a = np.arange(2 * n, dtype=np.float64) + 100 * rank
    ao = np.empty(2 * n, dtype=np.float64)
    c.all_to_all_single(ao, a)
    rao = torch.empty(2 * n, dtype=torch.float64)
    dist.all_to_all_single(rao, torch.from_numpy(a))
    _check("all_to_all_single numpy", torch.from_numpy(ao), rao)
    if n > 1:
        # One row from every rank comes, out_splits says two from rank 0 and none from rank
        # 1: a ValueError naming the counts, and the communicator carries on.
        x = torch.zeros(n, 2)
        with pytest.raises(ValueError, match="received"):
            c.all_to_all_single(torch.empty(n, 2), x, [2, 0] + [1] * (n - 2))

    c.barrier()
    c.close()
    assert c.closed
    dist.destroy_process_group()


@pytest.mark.parametrize("algo", ["inc", "ring", "a2a"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_communicator_matches_gloo(switch, store_path, n, algo):
    run_ranks(comm_body, n, switch.address, new_job(), algo, store_path)


def cache_body(rank, n, addr, job):
    """A registration is never served for memory that was freed and reused."""
    c = incmoe.Communicator(addr, job, rank, n, mr_cache=2)
    for i in range(40):
        # Fresh tensors of one size each time: the allocator hands back the
        # same addresses, which must not match a stale registration.
        t = torch.full((4096,), float(rank + i))
        c.all_reduce(t)
        want = float(sum(r + i for r in range(n)))
        assert torch.equal(t, torch.full((4096,), want)), (i, t[:4])
        del t
    assert len(c._mrs) <= 2
    # A storage resized in place moves its memory: the stale entry is dropped.
    t = torch.ones(16)
    c.all_reduce(t)
    t.resize_(1 << 20)
    t.fill_(1.0)
    c.all_reduce(t)
    assert torch.equal(t, torch.full((1 << 20,), float(n)))
    c.clear_cache()
    assert len(c._mrs) == 0
    c.close()


@pytest.mark.parametrize("n", [2])
def test_registration_cache_never_stale(switch, n):
    run_ranks(cache_body, n, switch.address, new_job())
