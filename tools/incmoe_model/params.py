"""The parameters of one point (Params) from the command line's options and a preset."""

import math

from .presets import MAX_RANKS, MODELS, ModelError, PRESETS
from .units import parse_rate, parse_route, parse_size
from .routing import PLACEMENTS
from .tree import parse_tree, tree_shape


class Params:
    """Everything one prediction depends on; built from the options."""

    FIELDS = ("N", "E", "k", "route", "placement", "tokens", "hidden", "inter", "bytes", "rate_bps",
              "switch_rate_bps", "tree", "uplink_rate_bps", "uplink_burst", "latency_s",
              "msg_cost_s", "switch_msg_cost_s", "switch_byte_cost_s", "efficiency", "burst",
              "switch_burst", "chunk", "credits", "meta", "ffn_flops", "cores", "band_cost_s",
              "samples", "seed")

    def __init__(self, **kw):
        for f in self.FIELDS:
            setattr(self, f, kw[f])

    def replace(self, **kw):
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(kw)
        return Params(**d)

    @property
    def row(self):
        return 4 * self.hidden

    @property
    def meta_bytes(self):
        return 8 * math.ceil(self.N / 64) if self.meta is None else self.meta

    @property
    def gathered(self):
        """The gathered buffer of a full collective: -b, else every rank's tokens."""
        return self.bytes if self.bytes is not None else self.N * self.tokens * self.row


def testbed_burst(bps, mtu=9000):
    """tools/testbed's tbf burst: 1 ms at the rate, at least 4 frames."""
    return max(int(bps / 8 / 1000), 4 * (mtu + 14))


def add_model_options(ap):
    g = ap.add_argument_group("what is modelled")
    opt = g.add_argument
    opt("--model", choices=sorted(MODELS), metavar="NAME",
        help="sets -E, -k, --hidden, --inter: " + ", ".join(sorted(MODELS)))
    opt("-N", type=int, help="ranks (1..256; default 8, or the size of --tree)")
    opt("-E", type=int, help="experts (default 64)")
    opt("-k", type=int, help="experts per token (default 8)")
    opt("--route", default="uniform", metavar="ROUTE", help="uniform or zipf:S (default uniform)")
    opt("--placement", default="contiguous", choices=PLACEMENTS,
        help="experts on ranks: contiguous blocks (rank 0 holds the most popular; default) "
        "or strided (expert e on rank e %% N)")
    opt("--tokens", type=float, default=2048, metavar="T", help="tokens per rank (default 2048)")
    opt("--hidden", type=int, metavar="H", help="fp32 elements per row (default 1024)")
    opt("--inter", type=int, metavar="I", help="expert intermediate size (default 256)")
    opt("-b", "--bytes", metavar="BYTES", help="size of a full collective, the gathered buffer "
        "as incmoe-perf's (default N * tokens * 4 * hidden)")
    g = ap.add_argument_group("the network (defaults from --preset)")
    opt = g.add_argument
    opt("--rate", metavar="RATE", help="rank link rate per direction (e.g. 100mbit, 100gbit)")
    opt("--switch-rate", metavar="RATE", help="switch link rate per direction (default N x --rate; "
        "one switch only)")
    opt("--leaves", type=int, metavar="K", help="a switch tree: a root over K leaf switches, the "
        "ranks spread over them contiguously (the first N %% K one more)")
    opt("--tree", metavar="SHAPE", help="a switch tree by its radix per level from the root down: "
        "4x4 (a root over 4 leaves of 4 ranks), 2x2x4 (3 levels); N defaults to their product")
    opt("--uplink-rate", metavar="RATE", help="rate per direction of a switch's link to its parent "
        "(default --rate)")
    opt("--uplink-burst", metavar="BYTES", help="the tbf burst of the up-links")
    opt("--latency", type=float, metavar="US", help="us per message hop")
    opt("--msg-cost", type=float, metavar="US", help="us per message a host sends (all-to-all)")
    opt("--switch-msg-cost", type=float, metavar="US",
        help="us per message in or out of the switch")
    opt("--switch-byte-cost", type=float, metavar="NS", help="ns per byte in or out of the switch")
    opt("--efficiency", type=float, metavar="F", help="payload share of the link rate")
    opt("--burst", metavar="BYTES",
        help="bytes a rank link passes before its rate applies (tbf burst)")
    opt("--switch-burst", metavar="BYTES", help="the same for the switch link")
    opt("--chunk", metavar="BYTES", help="chunk bytes (default 128K)")
    opt("--credits", type=int, metavar="N", help="credits per stream (default 64)")
    opt("--meta", type=int, metavar="BYTES", help="bitmap bytes per masked row (default "
        "8*ceil(N/64))")
    g = ap.add_argument_group("the MoE layer and the sampling")
    opt = g.add_argument
    opt("--ffn-gflops", type=float, metavar="G",
        help="FFN rate: per core where --cores > 0 (shared by the ranks), else per rank")
    opt("--cores", type=int, metavar="N", help="cores the ranks share (0: one rank, one device)")
    opt("--band-cost", type=float, metavar="US", help="us of fixed cost per band")
    opt("--samples", type=int, default=100000, metavar="M",
        help="zipf: tokens sampled (1..10000000, default 100000)")
    opt("--seed", type=int, default=1, metavar="S", help="zipf: sampling seed (default 1)")


def params_from(args, preset):
    pre = PRESETS[preset]
    radices = parse_tree(args.tree) if args.tree else None
    N = args.N if args.N is not None else \
        (math.prod(radices) if radices and args.leaves is None else 8)
    if not 1 <= N <= MAX_RANKS:
        raise ModelError(f"-N {N}: ranks must be 1..{MAX_RANKS}")
    tree = tree_shape(N, args.leaves, radices)
    m = MODELS.get(args.model, {}) if args.model else {}

    def pick(value, model_key, default):
        return value if value is not None else m.get(model_key, default)

    E, k = pick(args.E, "E", 64), pick(args.k, "k", 8)
    hidden, inter = pick(args.hidden, "H", 1024), pick(args.inter, "I", 256)
    if E < 1 or not 1 <= k <= E:
        raise ModelError(f"-E {E} -k {k}: need E >= 1 and 1 <= k <= E")
    if hidden < 1 or inter < 1:
        raise ModelError(f"--hidden {hidden} --inter {inter}: both must be >= 1")
    if not 0 <= args.tokens <= 1e12:
        raise ModelError(f"--tokens {args.tokens:g}: must be in 0..1e12")
    rate = parse_rate(args.rate or pre["rate"])

    def num(value, default, what, lo=0.0, hi=1e15):
        v = default if value is None else value
        if not lo <= v <= hi:
            raise ModelError(f"{what} {v:g}: must be in {lo:g}..{hi:g}")
        return v

    if tree and (args.switch_rate or args.switch_burst):
        raise ModelError("--switch-rate and --switch-burst are one switch's link: a tree's "
                         "switches are modelled by their links (--rate, --uplink-rate)")
    if not tree and (args.uplink_rate or args.uplink_burst):
        raise ModelError("--uplink-rate and --uplink-burst need a tree (--leaves or --tree)")
    switch_rate = parse_rate(args.switch_rate, "--switch-rate") if args.switch_rate \
        else N * rate
    uplink_rate = parse_rate(args.uplink_rate, "--uplink-rate") if args.uplink_rate else rate

    def burst_of(value, bps, what):
        value = value if value is not None else pre["burst"]
        return testbed_burst(bps) if value is None else parse_size(value, what)
    chunk = parse_size(args.chunk or pre["chunk"], "--chunk")
    if chunk < 64:
        raise ModelError(f"--chunk {chunk:g}: must be at least 64 bytes")
    if not 1 <= args.samples <= 10_000_000:
        raise ModelError(f"--samples {args.samples}: must be in 1..10000000")
    return Params(
        N=N, E=E, k=k, route=parse_route(args.route), placement=args.placement,
        tokens=args.tokens, hidden=hidden,
        inter=inter, bytes=parse_size(args.bytes, "-b") if args.bytes else None, rate_bps=rate,
        switch_rate_bps=switch_rate, tree=tree, uplink_rate_bps=uplink_rate,
        uplink_burst=burst_of(args.uplink_burst, uplink_rate, "--uplink-burst"),
        latency_s=num(args.latency, pre["latency_us"], "--latency") * 1e-6,
        msg_cost_s=num(args.msg_cost, pre["msg_cost_us"], "--msg-cost") * 1e-6,
        switch_msg_cost_s=num(args.switch_msg_cost, pre["switch_msg_cost_us"],
                              "--switch-msg-cost") * 1e-6,
        switch_byte_cost_s=num(args.switch_byte_cost, pre["switch_byte_cost_ns"],
                               "--switch-byte-cost") * 1e-9,
        efficiency=num(args.efficiency, pre["efficiency"], "--efficiency", 1e-3, 1.0),
        burst=burst_of(args.burst, rate, "--burst"),
        switch_burst=burst_of(args.switch_burst, switch_rate, "--switch-burst"), chunk=chunk,
        credits=int(num(args.credits, pre["credits"], "--credits", 1, 4096)),
        meta=None if args.meta is None else int(num(args.meta, 0, "--meta", 0, 1 << 20)),
        ffn_flops=num(args.ffn_gflops, pre["ffn_gflops"], "--ffn-gflops", 1e-6) * 1e9,
        cores=int(num(args.cores, pre["cores"], "--cores", 0, 1 << 16)),
        band_cost_s=num(args.band_cost, pre["band_cost_us"], "--band-cost") * 1e-6,
        samples=args.samples, seed=args.seed)


def add_time_options(ap):
    ap.add_argument("--op", default="agrs",
                    help="allgather, reducescatter, allreduce, agrs, dispatch, combine, dc, moe")
    ap.add_argument("--algo", default="inc", help="ring, inc, a2a (default inc)")
    ap.add_argument("--mode", default="pipelined",
                    help="moe: baseline, pipelined or decode (the decode step)")
    ap.add_argument("--form", default="bulk", choices=("bulk", "ll"),
                    help="dispatch, combine, dc: bulk (default) or ll, the low-latency form")
    ap.add_argument("--routing", default="full", help="moe: full or masked")
    ap.add_argument("--bands", type=int, help="moe pipelined: bands (default: as the layer picks)")
    add_model_options(ap)
