"""Bad input gets the documented error, and the communicator or layer stays
usable after a ValueError; a dead switch or a wrong key is an IncmoeError
carrying incmoe_strerror's text, never a crash or a hang.

CUDA tensors: these machines run torch without a GPU, where a tensor on
device 'cuda' cannot be made.  Two stand-ins reach the same check a CUDA
tensor does: a 'meta' tensor (a real non-CPU device), and a CPU tensor
subclass whose `device` property says 'cuda' and `is_cuda` True (a mock of
exactly the attributes the check reads)."""

import gc
import os
import pathlib
import signal
import socket
import tempfile
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import incmoe
from conftest import PG_TIMEOUT, new_job, run_ranks


class FakeCuda(torch.Tensor):
    """A CPU tensor that reports device 'cuda' (see the module docstring)."""

    @property
    def device(self):
        return torch.device("cuda", 0)

    @property
    def is_cuda(self):
        return True


def fake_cuda(t):
    return torch.Tensor._make_subclass(FakeCuda, t)


def comm_errors_body(rank, n, addr, job):
    c = incmoe.Communicator(addr, job, rank, n)
    x = torch.ones(8)
    cases = [
        ("dtype", lambda: c.all_reduce(torch.ones(4, dtype=torch.complex64))),
        ("dtype", lambda: c.all_reduce(torch.ones(4, dtype=torch.bool))),
        ("dtype", lambda: c.all_reduce(np.ones(4, dtype=np.complex64))),
        ("contiguous", lambda: c.all_reduce(torch.ones(8, 2)[:, 0])),
        ("contiguous", lambda: c.all_gather(torch.empty(16)[::2], x)),
        ("contiguous", lambda: c.all_reduce(np.ones((4, 4), np.float32).T)),
        ("NCCL", lambda: c.all_reduce(torch.ones(4, device="meta"))),
        ("NCCL", lambda: c.all_reduce(fake_cuda(torch.ones(4)))),
        ("NCCL", lambda: c.all_gather(torch.empty(8 * n), fake_cuda(torch.ones(8)))),
        ("elements", lambda: c.all_gather(torch.empty(8 * n + 1), x)),
        ("elements", lambda: c.reduce_scatter(torch.empty(8), torch.empty(8 * n + 2))),
        ("differs", lambda: c.all_gather(torch.empty(8 * n, dtype=torch.float64), x)),
        ("differs", lambda: c.reduce_scatter(torch.empty(8, dtype=torch.int32), torch.ones(8 * n))),
        ("op", lambda: c.all_reduce(x, op="avg")),
        ("root", lambda: c.broadcast(x, root=n)),
        ("numpy", lambda: c.all_reduce([1.0, 2.0])),
    ]
    for want, call in cases:
        with pytest.raises(ValueError, match=want):
            call()
    # Nothing was posted: the communicator goes on as if the calls never happened.
    x = torch.full((8,), float(rank))
    c.all_reduce(x)
    assert torch.equal(x, torch.full((8,), float(sum(range(n)))))
    c.close()
    with pytest.raises(incmoe.IncmoeError, match="closed"):
        c.all_reduce(x)


def test_communicator_bad_input(switch):
    run_ranks(comm_errors_body, 2, switch.address, new_job())


def test_bad_constructor_arguments(switch):
    for kw, want in [
        (dict(switch="nowhere"), "host:port"),
        (dict(job=-1), "job"),
        (dict(rank=2, nranks=2), "rank"),
        (dict(nranks=0), "nranks"),
        (dict(algo="tree"), "algo"),
        (dict(auth_key=b"x" * 65), "1..64"),
        (dict(auth_key=""), "1..64"),
        (dict(auth_key=3), "auth_key"),
        (dict(timeout_ms=0), "timeout_ms"),
        (dict(progress_timeout_ms=86400001), "progress_timeout_ms"),
    ]:
        args = dict(switch=switch.address, job=1, rank=0, nranks=1)
        args.update(kw)
        with pytest.raises(ValueError, match=want):
            incmoe.Communicator(**args)


def dead_port_body(rank, n, port):
    with pytest.raises(incmoe.IncmoeError) as e:
        incmoe.Communicator("127.0.0.1:%d" % port, 1, rank, n, timeout_ms=3000)
    assert e.value.status is incmoe.Status.ERR_UNREACHABLE and e.value.name in str(e.value)


@pytest.mark.expect_errors("nothing listens where the ranks look for the switch")
def test_no_switch_listening():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_ranks(dead_port_body, 1, port, timeout=60)


def dropped_body(rank, n, addr, job):
    """Rank 0 drops its communicator (no close()) with an all_reduce rank 1 never
    posts.  The finalizer must not wait out the 30 s liveness timeout that
    close() would wait: it returns within a tenth of it, and rank 1 hears that
    rank 0 released its communicator."""
    c = incmoe.Communicator(addr, job, rank, n, timeout_ms=30000)
    c.barrier()  # both have joined
    if rank == 0:
        work = c.all_reduce(torch.ones(64), async_op=True)
        t0 = time.monotonic()
        del work, c
        gc.collect()
        assert time.monotonic() - t0 < 3, "dropping the communicator blocked"
        return
    deadline = time.monotonic() + 10
    while not c.error() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "rank 0 released its communicator" in c.error()
    with pytest.raises(incmoe.IncmoeError):
        c.close()


@pytest.mark.expect_errors("a rank drops its communicator mid-job")
def test_dropped_communicator_does_not_block(switch):
    run_ranks(dropped_body, 2, switch.address, new_job())


def switch_dies_body(rank, n, addr, job, pid):
    """Rank 0 kills the switch once it joined: every rank's next call (rank
    1's may still be the join) ends in IncmoeError, none hangs."""
    c = None
    with pytest.raises(incmoe.IncmoeError) as e:
        c = incmoe.Communicator(addr, job, rank, n, timeout_ms=2000)
        if rank == 0:
            os.kill(pid, signal.SIGKILL)
        t = torch.ones(1024)
        for _ in range(100000):  # until the failure is seen
            c.all_reduce(t)
    assert e.value.name in str(e.value)
    if rank == 0:
        assert e.value.reason, "the communicator's reason is carried"
    if c is not None:
        with pytest.raises(incmoe.IncmoeError):
            c.close()
        assert c.closed


@pytest.mark.expect_errors("the switch is killed under the ranks")
def test_switch_dies(switch):
    with incmoe.Switch(["--timeout-ms", "2000"]) as sw:
        run_ranks(switch_dies_body, 2, sw.address, new_job(), sw.proc.pid, timeout=90)


def auth_body(rank, n, addr, keyfile):
    with incmoe.Communicator(addr, new_job(), 0, 1, auth_key=b"sesame") as c:
        c.barrier()
    with incmoe.Communicator(addr, new_job(), 0, 1, auth_key="sesame") as c:
        c.barrier()
    with incmoe.Communicator(addr, new_job(), 0, 1, auth_key=pathlib.Path(keyfile)) as c:
        c.barrier()
    with pytest.raises(incmoe.IncmoeError) as e:
        incmoe.Communicator(addr, new_job(), 0, 1, auth_key=b"wrong", timeout_ms=3000)
    assert "auth" in e.value.name.lower() or "secret" in str(e.value).lower()


@pytest.mark.expect_errors("a rank holds the wrong key")
def test_auth_key():
    with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
        f.write("sesame\n")
    try:
        with incmoe.Switch(["--auth-key-file", f.name]) as sw:
            run_ranks(auth_body, 1, sw.address, f.name, timeout=60)
    finally:
        os.unlink(f.name)


E, K, H, I = 4, 2, 16, 8


def moe_errors_body(rank, n, addr, job):
    c = incmoe.Communicator(addr, job, rank, n)
    el = E // n
    w13, w2 = torch.randn(el, 2 * I, H), torch.randn(el, H, I)
    # Construction: every rank refuses together (one rank's bad shape would
    # otherwise leave the others waiting in the collective create).
    bad_w13 = torch.randn(el, I, H) if rank == 0 else w13
    with pytest.raises((ValueError, incmoe.IncmoeError), match="w13|invalid"):
        incmoe.MoE(c, E, K, H, I, bad_w13, w2, max_tokens=8)
    m = incmoe.MoE(c, E, K, H, I, w13, w2, max_tokens=8)
    x = torch.randn(3, H)
    ids = torch.tensor([[0, 1], [2, 3], [1, 2]])
    w = torch.rand(3, 2)
    cases = [
        ("dtype", lambda: m(x.half(), ids, w)),
        ("shape", lambda: m(x[:, :-1].contiguous(), ids, w)),
        ("contiguous", lambda: m(torch.randn(H, 3).T, ids, w)),
        ("topk_ids has shape", lambda: m(x, ids[:, :1], w)),
        ("topk_weights has shape", lambda: m(x, ids, w[:2])),
        ("integer", lambda: m(x, ids.float(), w)),
        ("outside", lambda: m(x, ids + 3, w)),
        ("twice", lambda: m(x, torch.tensor([[0, 0], [1, 2], [2, 3]]), w)),
        ("max_tokens", lambda: m(torch.randn(9, H), torch.zeros(9, 2, dtype=torch.long), torch.rand(9, 2))),
        ("device", lambda: m(torch.randn(3, H, device="meta"), ids, w)),
        ("device", lambda: m(fake_cuda(x), ids, w)),
        ("out", lambda: m(x, ids, w, out=torch.empty(3, H + 1))),
        ("mode", lambda: m(x, ids, w, mode="fast")),
    ]
    for want, call in cases:
        with pytest.raises(ValueError, match=want):
            call()
    # One rank alone passes bad input: it gets ValueError, the others fail
    # their matching forward too (they learn it through the counts' gather,
    # or through the layer's own check when counts are given): no hang.
    bad = x.double() if rank == 1 else x
    with pytest.raises(ValueError, match="dtype" if rank == 1 else "refused"):
        m(bad, ids, w)
    counts = [3] * n
    with pytest.raises((ValueError, incmoe.IncmoeError), match="dtype" if rank == 1 else "invalid"):
        m(bad, ids, w, counts=counts)
    # The layer is still usable.
    y = m(x, ids, w, counts=counts)
    assert y.shape == (3, H) and torch.isfinite(y).all()
    m.close()
    c.close()


@pytest.mark.expect_errors("ranks pass arguments the layer refuses")
def test_moe_bad_input(switch):
    run_ranks(moe_errors_body, 2, switch.address, new_job())


def backend_errors_body(rank, n, addr, store):
    os.environ["INCMOE_SWITCH"] = addr
    dist.init_process_group(
        "incmoe", init_method="file://" + store, rank=rank, world_size=n, timeout=PG_TIMEOUT
    )
    with pytest.raises(ValueError, match="NCCL_NET_PLUGIN=incmoe"):
        dist.all_reduce(fake_cuda(torch.ones(4)))
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(torch.ones(4, 2)[:, 0])
    with pytest.raises(ValueError, match="elements"):
        dist.all_gather_into_tensor(torch.empty(3 * n + 1), torch.ones(3))
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(n)))
    dist.destroy_process_group()


def test_backend_bad_input(switch, store_path):
    run_ranks(backend_errors_body, 2, switch.address, store_path)


def no_switch_env_body(rank, n, store):
    os.environ.pop("INCMOE_SWITCH", None)
    with pytest.raises(Exception, match="INCMOE_SWITCH"):
        dist.init_process_group("incmoe", init_method="file://" + store, rank=rank, world_size=n)


def test_backend_without_switch(store_path):
    run_ranks(no_switch_env_body, 1, store_path, timeout=60)
