"""The torch.distributed backend "incmoe": every call it implements, on
N = 1, 2, 4 ranks and every algorithm, checked against the same call on a
gloo group of the same processes; new_group's job id agreed through the
store; what it does not implement raises a clear error."""

import datetime
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

import incmoe  # noqa: F401  (registers the backend)
from conftest import PG_TIMEOUT, run_ranks

COUNT = 29
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
DTYPES = [torch.float32, torch.bfloat16, torch.int32]


def _vals(g, shape, dt):
    return torch.randint(-8, 9, shape, generator=g).to(dt)


def _eq(name, a, b):
    assert torch.equal(a, b), "%s: incmoe %s, gloo %s" % (name, a, b)


def _calls(g, rank, n, pg, gloo, tag):
    """Every implemented call on pg against gloo."""
    for dt in DTYPES:
        for op in OPS:
            t = _vals(g, (COUNT,), dt)
            r = t.clone()
            dist.all_reduce(t, op=op, group=pg)
            dist.all_reduce(r, op=op, group=gloo)
            _eq("%s all_reduce %s %s" % (tag, op, dt), t, r)
            inp = _vals(g, (n * COUNT,), dt)
            o, ro = torch.empty(COUNT, dtype=dt), torch.empty(COUNT, dtype=dt)
            dist.reduce_scatter_tensor(o, inp, op=op, group=pg)
            dist.reduce_scatter_tensor(ro, inp, op=op, group=gloo)
            _eq("%s reduce_scatter_tensor %s %s" % (tag, op, dt), o, ro)
            ins = [_vals(g, (3, 5), dt) for _ in range(n)]
            o, ro = torch.empty(3, 5, dtype=dt), torch.empty(3, 5, dtype=dt)
            dist.reduce_scatter(o, ins, op=op, group=pg)
            dist.reduce_scatter(ro, ins, op=op, group=gloo)
            _eq("%s reduce_scatter (list) %s %s" % (tag, op, dt), o, ro)
        x = _vals(g, (COUNT,), dt)
        o, ro = torch.empty(n * COUNT, dtype=dt), torch.empty(n * COUNT, dtype=dt)
        dist.all_gather_into_tensor(o, x, group=pg)
        dist.all_gather_into_tensor(ro, x, group=gloo)
        _eq("%s all_gather_into_tensor %s" % (tag, dt), o, ro)
        x = _vals(g, (4, 3), dt)
        outs = [torch.empty(4, 3, dtype=dt) for _ in range(n)]
        routs = [torch.empty(4, 3, dtype=dt) for _ in range(n)]
        dist.all_gather(outs, x, group=pg)
        dist.all_gather(routs, x, group=gloo)
        for i in range(n):
            _eq("%s all_gather (list) block %d %s" % (tag, i, dt), outs[i], routs[i])
        for root in range(n):
            t = _vals(g, (COUNT,), dt)
            r = t.clone()
            src = dist.get_global_rank(pg, root) if pg is not None else root
            gsrc = dist.get_global_rank(gloo, root) if gloo is not None else root
            dist.broadcast(t, src=src, group=pg)
            dist.broadcast(r, src=gsrc, group=gloo)
            _eq("%s broadcast root %d %s" % (tag, root, dt), t, r)
    dist.barrier(group=pg)

    # async_op: Work objects as torch hands them out, and their futures.
    a = _vals(g, (COUNT,), torch.float32)
    ra = a.clone()
    x = _vals(g, (COUNT,), torch.float32)
    ag = torch.empty(n * COUNT)
    works = [
        dist.all_reduce(a, group=pg, async_op=True),
        dist.all_gather_into_tensor(ag, x, group=pg, async_op=True),
        dist.barrier(group=pg, async_op=True),
    ]
    fut = works[0].get_future()
    for w in works:
        assert w.wait()
    dist.all_reduce(ra, group=gloo)
    _eq("%s async all_reduce" % tag, a, ra)
    _eq("%s future value" % tag, fut.wait()[0], ra)
    rag = torch.empty(n * COUNT)
    dist.all_gather_into_tensor(rag, x, group=gloo)
    _eq("%s async all_gather_into_tensor" % tag, ag, rag)


def dist_body(rank, n, addr, algo, store):
    os.environ["INCMOE_SWITCH"] = addr
    os.environ["INCMOE_ALGO"] = algo
    dist.init_process_group(
        "incmoe", init_method="file://" + store, rank=rank, world_size=n, timeout=PG_TIMEOUT
    )
    assert dist.get_backend() == "incmoe"
    gloo = dist.new_group(backend="gloo")
    g = torch.Generator().manual_seed(7 + rank)
    _calls(g, rank, n, None, gloo, "default group")

    # A second incmoe group over the first half of the ranks (its own job).
    half = list(range(max(1, n // 2)))
    sub = dist.new_group(half, backend="incmoe")
    gsub = dist.new_group(half, backend="gloo")
    if rank in half:
        _calls(g, rank, len(half), sub, gsub, "new_group %s" % half)

    # all_to_all_single with uneven splits (some empty, rows of [3, 2]) against gloo's.
    for step in range(3):
        ins = [(rank + d + step) % 3 for d in range(n)]
        outs = [(s + rank + step) % 3 for s in range(n)]
        x = _vals(g, (sum(ins), 3, 2), torch.float32)
        o = torch.full((sum(outs), 3, 2), -1.0)
        ro = torch.full((sum(outs), 3, 2), -2.0)
        dist.all_to_all_single(ro, x, outs, ins, group=gloo)
        w = dist.all_to_all_single(o, x, outs, ins, async_op=step == 1)
        if step == 1:
            assert w.wait()
        _eq("all_to_all_single step %d" % step, o, ro)
    t = torch.ones(n * 2)
    o = torch.empty_like(t)
    dist.all_to_all_single(o, t)  # equal splits
    _eq("all_to_all_single equal splits", o, t)
    with pytest.raises(ValueError, match="splits"):
        dist.all_to_all_single(torch.empty(n * 2), t, [1] * n, [2] * (n + 1))
    with pytest.raises((NotImplementedError, RuntimeError), match="reduce|does not"):
        dist.reduce(torch.ones(3), dst=0)
    with pytest.raises(ValueError, match="ReduceOp|reduces with"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.AVG) if hasattr(
            dist.ReduceOp, "AVG"
        ) else (_ for _ in ()).throw(ValueError("ReduceOp"))
    # The group still works after the refusals.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(n)))
    dist.destroy_process_group()


@pytest.mark.parametrize("algo", ["inc", "ring", "a2a"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_backend_matches_gloo(switch, store_path, n, algo):
    run_ranks(dist_body, n, switch.address, algo, store_path)


def env_body(rank, n, addr, port):
    """init_process_group with MASTER_ADDR/MASTER_PORT (torch's TCPStore)."""
    os.environ.update(INCMOE_SWITCH=addr, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("incmoe", rank=rank, world_size=n, timeout=PG_TIMEOUT)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(n * (n + 1) // 2)))
    # The group's communicator, for calls that take one; a gloo group has none.
    comm = incmoe.distributed.communicator()
    assert isinstance(comm, incmoe.Communicator) and (comm.rank, comm.nranks) == (rank, n)
    x = torch.full((3,), float(rank))
    comm.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(n * (n - 1) // 2)))
    with pytest.raises(ValueError, match="backend is 'gloo'"):
        incmoe.distributed.communicator(dist.new_group(backend="gloo"))
    dist.destroy_process_group()
    with pytest.raises(ValueError, match="not initialized"):
        incmoe.distributed.communicator()


def test_backend_env_store(switch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_ranks(env_body, 2, switch.address, port)


def _world_comm(rank, n, addr, store, timeout_s):
    """The incmoe world group on addr with a timeout_s bound, and its communicator."""
    os.environ["INCMOE_SWITCH"] = addr
    dist.init_process_group(
        "incmoe",
        init_method="file://" + store,
        rank=rank,
        world_size=n,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return dist.group.WORLD._get_backend(torch.device("cpu")).comm


def timeout_body(rank, n, addr, store):
    """init_process_group(timeout=2 s) on a switch whose own progress timeout is
    20 s (conftest): rank 1 never posts the all_reduce rank 0 posted, and both
    ranks' communicators fail naming the 2 s bound."""
    comm = _world_comm(rank, n, addr, store, timeout_s=2)
    want = "rank 1 did not post within 2.0 s"
    if rank == 0:
        with pytest.raises(Exception, match=want):
            dist.all_reduce(torch.ones(4))
    else:
        deadline = time.monotonic() + 15
        while not comm.error() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert want in comm.error()
    with pytest.raises(incmoe.IncmoeError):
        comm.close()


@pytest.mark.expect_errors("a rank never posts: the progress timeout fails the job")
def test_backend_timeout_bounds_each_collective(switch, store_path):
    run_ranks(timeout_body, 2, switch.address, store_path)


def silent_rank_body(rank, n, addr, store):
    """init_process_group(timeout=300 s): rank 1 stops (alive, silent) and rank 0's
    all_reduce still fails by the liveness timeout, 10 s, long before 300 s."""
    comm = _world_comm(rank, n, addr, store, timeout_s=300)
    kv = dist.FileStore(store + ".pids", n)
    if rank == 1:
        kv.set("rank1", str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)  # rank 0 wakes it once its all_reduce failed
    else:
        pid = int(kv.get("rank1"))
        t0 = time.monotonic()
        with pytest.raises(Exception, match="silent|rank 1"):
            dist.all_reduce(torch.ones(4))
        assert time.monotonic() - t0 < 60, "a silent rank was not found by the liveness timeout"
        os.kill(pid, signal.SIGCONT)
    try:
        comm.close()
    except incmoe.IncmoeError:
        pass  # failed (rank 0), or failed while stopped (rank 1, if it heard already)


@pytest.mark.expect_errors("a rank is stopped: the liveness timeout fails the job")
def test_backend_timeout_leaves_liveness_alone(switch, store_path):
    run_ranks(silent_rank_body, 2, switch.address, store_path)
