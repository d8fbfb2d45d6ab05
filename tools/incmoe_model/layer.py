"""The MoE layer: its FFN, header exchange and bands, baseline and pipelined, and its decode
step (one low-latency dispatch, the local experts, one low-latency combine)."""

import math

from .presets import ModelError
from .routing import route_stats
from .collective import collective_time
from .lowlat import ll_time


DISPATCH = {"full": ("allgather", "reducescatter", "agrs"), "masked": ("dispatch", "combine", "dc")}


def ffn_time(p, stats):
    """FFN of the busiest rank: 6*H*I flops per routed (token, expert) pair."""
    pairs = max(p.N * p.tokens * s for s in stats.share)
    rate = p.ffn_flops * (min(1.0, p.cores / p.N) if p.cores > 0 else 1.0)
    return pairs * 6.0 * p.hidden * p.inter / rate


def header_time(algo, p):
    """The forward's header exchange: one small AllGather."""
    if p.N == 1:
        return 0.0
    return collective_time("allgather", algo, p.replace(bytes=64.0 * p.N)).total


def auto_bands(p, algo, routing, stats, ffn):
    """moe/autotune.c's choice: nb = sqrt(2 * stage / band cost), 1..min(64, T/8)."""
    d_op, c_op, _ = DISPATCH[routing]
    stage = max(collective_time(d_op, algo, p, stats).link,
                collective_time(c_op, algo, p, stats).link, ffn)
    nb = math.sqrt(2 * stage / p.band_cost_s) if p.band_cost_s > 0 else 8
    most = max(1, min(64, math.ceil(p.tokens / 8)))
    return int(min(max(round(nb), 1), most))


def decode_time(p, algo, dispatch_row=None, combine_row=None):
    """The decode step: a low-latency dispatch, the FFN of the busiest rank's received rows,
    a low-latency combine, in sequence, with no header exchange and no bands.  A dict:
    total, ffn, dispatch, combine, and bound (moe-bench's decode bound: the busiest rank's
    rows on its busier direction, a row up once and down to each other rank of its set, at
    the link rate both ways, plus the FFN)."""
    stats = route_stats(p)
    ffn = ffn_time(p, stats)
    d = ll_time("dispatch", algo, p, stats, dispatch_row, combine_row)
    c = ll_time("combine", algo, p, stats, dispatch_row, combine_row)
    u, _, inn = stats.rows(p.tokens)
    rows = max(max(u), max(inn)) if p.N > 1 else 0.0
    rd = p.row if dispatch_row is None else dispatch_row
    rc = p.row if combine_row is None else combine_row
    bound = rows * (rd + rc) / (p.rate_bps / 8) + ffn
    return {"total": d.total + ffn + c.total, "ffn": ffn, "dispatch": d.total,
            "combine": c.total, "bound": bound, "comm": d.total + c.total, "bands": 0,
            "header": 0.0}


def moe_time(p, mode, algo, routing, bands=None):
    """Layer time and its parts: dict with total, ffn, comm, bands (decode: decode_time's)."""
    if mode == "decode":
        return decode_time(p, algo)
    if routing == "masked" and algo == "ring":
        algo = "a2a"  # dispatch and combine on the ring are point to point
    if routing == "full" and algo == "a2a":
        algo = "ring"  # AllGather and ReduceScatter on a2a run as on the ring
    stats = route_stats(p)
    d_op, c_op, pair_op = DISPATCH[routing]
    ffn = ffn_time(p, stats)
    head = header_time(algo, p)
    if mode == "baseline":
        d = collective_time(d_op, algo, p, stats)
        c = collective_time(c_op, algo, p, stats)
        return {"total": head + d.total + ffn + c.total, "ffn": ffn, "comm": d.total + c.total,
                "bands": 1, "header": head}
    if mode != "pipelined":
        raise ModelError(f"--mode {mode}: expected baseline, pipelined or decode")
    if bands is not None and not 1 <= bands <= 1 << 20:
        raise ModelError(f"--bands {bands}: must be in 1..{1 << 20}")
    nb = bands if bands is not None else auto_bands(p, algo, routing, stats, ffn)
    # A band's share of the bytes; the links' bursts are spent once, by the first.
    bp = p.replace(tokens=p.tokens / nb, bytes=p.gathered / nb if p.bytes else None, burst=0.0,
                   switch_burst=0.0, uplink_burst=0.0)
    A = collective_time(d_op, algo, bp, stats)
    R = collective_time(c_op, algo, bp, stats)
    P = collective_time(pair_op, algo, bp, stats)
    F = ffn / nb
    # The per-message and store-and-forward terms of the pair are paid once:
    # later bands' collectives are already queued behind earlier ones.
    once = P.hops + P.sf
    total = (head + once + A.throughput + F + R.throughput + (nb - 1) * max(P.throughput, F)
             + nb * p.band_cost_s)
    return {"total": total, "ffn": ffn, "comm": None, "bands": nb, "header": head}
