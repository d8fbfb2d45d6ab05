"""What one collective moves (Traffic), the operations and algorithms, and the
counting both a switch tree and one switch use (chunks, ring steps)."""

import math


FULL_OPS = ("allgather", "reducescatter", "allreduce", "agrs")


MASKED_OPS = ("dispatch", "combine", "dc")


ALGOS = ("ring", "inc", "a2a")


class Traffic:
    """What one collective moves and what it waits for.
    up, down: bytes per rank (what it sends, what it receives)
    sw_in, sw_out, sw_msgs: through the switch (0 for point-to-point paths)
    hops_s: per-message terms on the critical path
    sf_bytes: store-and-forward pieces paid at the link rate
    over a tree: links (every up-link), switches ((level, bytes in + out,
    messages) of each switch; None: one switch, the sw_ totals) and
    sf_extra_s (the store-and-forward on the up-links, seconds)
    """

    def __init__(self, up, down, sw_in=0.0, sw_out=0.0, sw_msgs=0, hops_s=0.0, sf_bytes=0.0,
                 small=False, links=None, switches=None, sf_extra_s=0.0):
        self.up, self.down = up, down
        self.sw_in, self.sw_out, self.sw_msgs = sw_in, sw_out, sw_msgs
        self.hops_s, self.sf_bytes, self.small = hops_s, sf_bytes, small
        self.links, self.switches, self.sf_extra_s = links, switches, sf_extra_s


def chunks(nbytes, chunk):
    return math.ceil(nbytes / chunk) if nbytes > 0 else 0


def ring_steps(op, N):
    """Messages on a ring collective's critical path: N-1 per collective, 2(N-1)
    for an AllReduce or a concurrent AllGather and ReduceScatter."""
    return (N - 1) * (2 if op in ("allreduce", "agrs") else 1)
