"""Communicator.shrink: on request with nobody lost, and after a killed process (incmoe.h,
"Shrink"); the survivors' new communicator works, checked against sums made here."""

import os

import pytest
import torch

import incmoe

from conftest import new_job, run_ranks


def _check_sum(c, olds):
    """AllReduce on the shrunk communicator c: every rank adds its old rank + 1."""
    t = torch.full((64,), float(olds[c.rank] + 1))
    c.all_reduce(t)
    assert torch.equal(t, torch.full((64,), float(sum(o + 1 for o in olds))))


def on_request_body(rank, n, addr, job):
    with incmoe.Communicator(addr, job, rank, n, timeout_ms=2000) as c:
        c.barrier()
        with c.shrink() as s:
            assert (s.rank, s.nranks) == (rank, n)
            assert s.job != job
            _check_sum(s, list(range(n)))


def test_shrink_on_request(switch):
    run_ranks(on_request_body, 3, switch.address, new_job())


def killed_body(rank, n, addr, job, victim, algo):
    c = incmoe.Communicator(addr, job, rank, n, algo=algo, timeout_ms=2000)
    c.barrier()
    if rank == victim:
        os._exit(0)  # no report: run_ranks is told it is lost
    with pytest.raises(incmoe.IncmoeError):
        c.barrier()
    assert "rank %d" % victim in c.error()
    olds = [r for r in range(n) if r != victim]
    with c.shrink() as s:
        assert (s.rank, s.nranks) == (olds.index(rank), n - 1)
        _check_sum(s, olds)
    with pytest.raises(incmoe.IncmoeError):
        c.close()


@pytest.mark.expect_errors("rank 1 is killed")
@pytest.mark.parametrize("algo", ["inc", "ring", "a2a"])
def test_shrink_after_a_killed_process(switch, algo):
    run_ranks(killed_body, 4, switch.address, new_job(), 1, algo, lost={1})
