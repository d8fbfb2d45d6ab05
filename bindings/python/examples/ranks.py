"""What the examples share: a switch and N forked ranks that each report one result."""

import multiprocessing
import os

import torch

import incmoe


def run_ranks(n, rank_main, rank_args, timeout_s):
    """rank_main(rank, switch, job, *rank_args[rank], results) in n forked processes (they inherit
    the imported torch instead of importing it again), on the switch INCMOE_SWITCH=host:port
    names or else on one started here; each rank puts (rank, numpy array) on results.  Returns
    {rank: tensor} of the ranks that reported within timeout_s, having said why one did not."""
    sw = None
    switch = os.environ.get("INCMOE_SWITCH")
    if not switch:
        sw = incmoe.Switch()
        switch = sw.address
    job = int.from_bytes(os.urandom(8), "little") >> 1
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, switch, job) + tuple(rank_args[r]) + (results,))
             for r in range(n)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in range(n):
            r, out = results.get(timeout=timeout_s)
            got[r] = torch.from_numpy(out)
    except Exception as e:
        print("a rank did not report: %s" % e)
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if sw is not None:
        sw.stop()
    return got
