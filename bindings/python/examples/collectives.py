#!/usr/bin/env python3
"""Two ranks doing collectives through an incmoe-switchd: first with
incmoe.Communicator, then through torch.distributed's "incmoe" backend.

    python3 bindings/python/examples/collectives.py

Starts its own switch (incmoe-switchd from $INCMOE_SWITCHD, the build tree or
PATH) unless INCMOE_SWITCH=host:port names a running one.  The two ranks are
forked processes on this machine; on several machines run one rank per host
with the same switch and job id.
"""

import multiprocessing
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import incmoe  # noqa: E402

N = 2


def rank_main(rank, switch, job, port):
    # incmoe.Communicator: the collectives on CPU tensors (numpy arrays work too).
    with incmoe.Communicator(switch, job, rank, N, algo="inc") as comm:
        x = torch.full((4,), float(rank + 1))
        gathered = torch.empty(N * 4)
        comm.all_gather(gathered, x)
        shard = torch.empty(2)
        comm.reduce_scatter(shard, torch.arange(N * 2, dtype=torch.float32), op="sum")
        comm.all_reduce(x, op="max")
        work = comm.barrier(async_op=True)
        work.wait()
        print("rank %d: all_gather %s  reduce_scatter %s  all_reduce(max) %s"
              % (rank, gathered.tolist(), shard.tolist(), x.tolist()), flush=True)

    # torch.distributed: the same switch serves the "incmoe" backend.
    os.environ.update(INCMOE_SWITCH=switch, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("incmoe", rank=rank, world_size=N)
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    b = torch.full((2,), float(rank))
    dist.broadcast(b, src=1)
    print("rank %d: dist.all_reduce %s  dist.broadcast(src=1) %s" % (rank, t.tolist(), b.tolist()),
          flush=True)
    dist.destroy_process_group()


def main():
    sw = None
    switch = os.environ.get("INCMOE_SWITCH")
    if not switch:
        sw = incmoe.Switch()
        switch = sw.address
    with socket.socket() as s:  # a free port for torch's TCPStore
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = int.from_bytes(os.urandom(8), "little") >> 1
    # fork: the ranks inherit the imported torch instead of importing it again.
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, switch, job, port)) for r in range(N)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.is_alive():
            p.kill()
    if sw is not None:
        sw.stop()
    bad = [r for r, p in enumerate(procs) if p.exitcode != 0]
    print("collectives example: %s" % ("FAILED (ranks %s)" % bad if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
