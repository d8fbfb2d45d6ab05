"""One collective: its bytes per rank and direction (full and masked paths, over
one switch or a tree), then its time (Timing)."""

from .presets import ModelError
from .routing import route_stats
from .flows import ALGOS, FULL_OPS, MASKED_OPS, Traffic, chunks, ring_steps
from .tree import path_work, tree_traffic


def full_traffic(op, algo, p):
    N, S = p.N, p.gathered
    B = S / N
    if algo in ("ring", "a2a") or N == 1:
        # On a2a, AllGather, ReduceScatter and AllReduce run as on the ring.
        each = {"allgather": (N - 1) * B, "reducescatter": (N - 1) * B,
                "allreduce": 2 * (N - 1) * B, "agrs": 2 * (N - 1) * B}[op]
        return Traffic([each] * N, [each] * N, hops_s=ring_steps(op, N) * p.latency_s)
    up, down = {"allgather": (B, (N - 1) * B), "reducescatter": ((N - 1) * B, B),
                "allreduce": (S, S), "agrs": (S, S)}[op]
    # The small rule (base/wire.h): AllGather up to half a chunk in all (the
    # switch holds the blocks twice), ReduceScatter and AllReduce a chunk; a
    # pair is two small collectives when its AllGather is small.
    small_limit = {"allgather": p.chunk / 2, "reducescatter": p.chunk, "allreduce": p.chunk,
                   "agrs": p.chunk / 2}[op]
    small = S <= small_limit
    pieces = {"allgather": 1, "reducescatter": 1, "allreduce": 1, "agrs": 2}[op]
    if small:
        # One message each way per collective: it must arrive whole before
        # anything leaves (for a pair, the larger of its two).
        sf = (N - 1) * B if op == "agrs" else up
        msgs = 2 * N * (2 if op == "agrs" else 1)
    else:
        sf = pieces * min(p.chunk, B if op != "allreduce" else S)
        msgs = N * (chunks(up, p.chunk) + chunks(down, p.chunk))
    return Traffic([up] * N, [down] * N, sw_in=N * up, sw_out=N * down, sw_msgs=msgs,
                   hops_s=2 * p.latency_s, sf_bytes=sf, small=small)


def masked_traffic(op, algo, p, stats):
    u, out, inn = stats.rows(p.tokens)
    N, R, m = p.N, p.row, p.meta_bytes
    if N == 1:
        return Traffic([0.0], [0.0])  # every row is its owner's
    if algo in ("a2a", "ring"):
        # Point to point: each row once to each rank of its set, partials back.
        d_up, d_down = [o * R for o in out], [i * R for i in inn]
        c_up, c_down = d_down, d_up
        sends = {"dispatch": 1, "combine": 1, "dc": 2}[op] * (N - 1)
        up = {"dispatch": d_up, "combine": c_up,
              "dc": [a + b for a, b in zip(d_up, c_up)]}[op]
        down = {"dispatch": d_down, "combine": c_down,
                "dc": [a + b for a, b in zip(d_down, c_down)]}[op]
        hops = p.latency_s + max(sends - 1, 0) * p.msg_cost_s if N > 1 else 0.0
        return Traffic(up, down, hops_s=hops)
    # In-network: a row crosses its owner's up link once with its bitmap and
    # is replicated toward its set; partials are summed in the switch and the
    # sum crosses the owner's down link once; the owner resends its bitmaps.
    d_up, d_down = [x * (R + m) for x in u], [x * (R + m) for x in inn]
    c_up = [i * R + x * m for i, x in zip(inn, u)]
    c_down = [x * R for x in u]
    up = {"dispatch": d_up, "combine": c_up, "dc": [a + b for a, b in zip(d_up, c_up)]}[op]
    down = {"dispatch": d_down, "combine": c_down,
            "dc": [a + b for a, b in zip(d_down, c_down)]}[op]
    # Assumed small rule, as the full collectives': a dispatch whose rows fit
    # half a chunk on every rank, a combine whose partials fit a chunk.
    small_d = max(d_up) <= p.chunk / 2
    small_c = max(c_up) <= p.chunk
    small = {"dispatch": small_d, "combine": small_c, "dc": small_d and small_c}[op]
    if small:
        sf = max(up)
        msgs = N * 2 * (2 if op == "dc" else 1)
    else:
        sf = 0.0
        if op in ("dispatch", "dc"):
            sf += min(p.chunk, max(d_up))
        if op in ("combine", "dc"):
            sf += min(p.chunk, max(c_down))
        msgs = sum(chunks(a, p.chunk) + chunks(b, p.chunk) for a, b in zip(up, down))
    return Traffic(up, down, sw_in=sum(up), sw_out=sum(down), sw_msgs=msgs,
                   hops_s=2 * p.latency_s if N > 1 else 0.0, sf_bytes=sf, small=small)


def traffic(op, algo, p, stats=None):
    if algo not in ALGOS:
        raise ModelError(f"--algo {algo}: expected one of {', '.join(ALGOS)}")
    if op in MASKED_OPS:
        stats = stats or route_stats(p)
    if op in FULL_OPS:
        flat = full_traffic(op, algo, p)
    elif op in MASKED_OPS:
        flat = masked_traffic(op, algo, p, stats)
    else:
        raise ModelError(f"--op {op}: expected one of {', '.join(FULL_OPS + MASKED_OPS)} or moe")
    return tree_traffic(op, algo, p, stats, flat) if p.tree else flat


class Timing:
    """total = hops + store-and-forward + max(rank link, up-link, switch link, switch CPU)."""

    def __init__(self, t, p):
        eff = p.efficiency * p.rate_bps / 8  # payload bytes per second
        busiest = max(max(t.up), max(t.down))
        self.rank_link = max(busiest - p.burst, 0.0) / eff
        links = t.links or []
        self.uplink_busiest = max((max(ln.up, ln.down) for ln in links), default=0.0)
        self.uplink = max(self.uplink_busiest - p.uplink_burst, 0.0) / \
            (p.efficiency * p.uplink_rate_bps / 8) if links else 0.0

        def work(nbytes, msgs):
            return p.switch_byte_cost_s * nbytes + p.switch_msg_cost_s * msgs
        if t.switches is None:
            self.switch_link = max(max(t.sw_in, t.sw_out) - p.switch_burst, 0.0) / \
                (p.efficiency * p.switch_rate_bps / 8)
            self.switch_cpu = work(t.sw_in + t.sw_out, t.sw_msgs)
        else:
            # A tree's switches are modelled by their links; each switch works
            # apart: a chunked collective waits for the busiest, a one-message
            # one for each level's in turn.
            self.switch_link = 0.0
            self.switch_cpu = work(*path_work(t)) if t.small else \
                max(work(b, n) for _, b, n in t.switches)
        self.hops = t.hops_s
        # A one-message collective meets a full token bucket; a chunked one has drained it.
        self.sf = (max(t.sf_bytes - p.burst, 0.0) if t.small else t.sf_bytes) / eff + \
            t.sf_extra_s
        self.link = max(self.rank_link, self.uplink)
        self.throughput = max(self.link, self.switch_link, self.switch_cpu)
        self.total = self.hops + self.sf + self.throughput
        # incmoe-perf's bound: max over ranks and link directions of bytes / link rate.
        self.bound = busiest / (p.rate_bps / 8)
        self.busiest = busiest
        # The same for the up-links; and what they carry against a rank's link.
        self.uplink_bound = self.uplink_busiest / (p.uplink_rate_bps / 8)
        self.uplink_ratio = self.uplink_busiest / busiest if busiest > 0 else 0.0
        self.traffic = t

    @property
    def bandwidth_bound(self):
        return self.link + self.switch_link >= self.hops + self.sf + self.switch_cpu


def collective_time(op, algo, p, stats=None):
    return Timing(traffic(op, algo, p, stats), p)
