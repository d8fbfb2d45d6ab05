"""The command fit: the testbed preset's constants from measured outputs, one step
after another (--help, "Fit")."""

import argparse
import statistics

from .presets import ModelError
from .units import table
from .routing import route_stats
from .flows import FULL_OPS, ring_steps
from .tree import path_work
from .params import params_from
from .collective import Timing, collective_time, traffic
from .layer import DISPATCH, ffn_time, moe_time
from .measured import grouped, read_measurements


def _with_over(ns, over):
    """ns with the constants fitted so far in place of its options."""
    ns = argparse.Namespace(**vars(ns))
    for key, value in over.items():
        setattr(ns, key, value)
    return ns


def _need(found, what):
    if not found:
        raise ModelError(f"fit: no {what} among the measured points")
    return found


# Each step takes the points (options, measured median), the switch's accounting, the
# preset and the constants fitted before it (over, which it extends); it returns its rows
# (option, value, unit, points used).

def fit_latency(parsed, switch, preset, over):
    """1. per-hop latency: ring collectives within the burst pay steps x latency."""
    alphas = []
    for ns, meas in parsed:
        if ns.op in FULL_OPS and ns.op != "agrs" and ns.algo == "ring":
            p = params_from(ns, preset)
            t = traffic(ns.op, "ring", p)
            if max(t.up) <= p.burst and p.N > 1 and \
                    all(max(ln.up, ln.down) <= p.uplink_burst for ln in t.links or []):
                alphas.append(meas / ring_steps(ns.op, p.N))
    alpha = statistics.median(_need(alphas, "ring collectives within the tbf burst"))
    over["latency"] = alpha * 1e6
    return [("--latency", alpha * 1e6, "us", len(alphas))]


def fit_switch_byte_cost(parsed, switch, preset, over):
    """2. the switch's CPU per byte in or out, from its own accounting."""
    per_byte = [cpu / b for b, cpu in switch if b > 0]
    if not per_byte:
        return []
    over["switch_byte_cost"] = statistics.median(per_byte) * 1e9
    return [("--switch-byte-cost", over["switch_byte_cost"], "ns", len(per_byte))]


def fit_switch_msg_cost(parsed, switch, preset, over):
    """3. the switch's per-message cost: small in-network collectives, less their hops
    (two on one switch) and the switch's per-byte work on their path."""
    sigmas = []
    for ns, meas in parsed:
        if ns.op in FULL_OPS and ns.algo == "inc":
            p = params_from(_with_over(ns, over), preset)
            t = traffic(ns.op, "inc", p)
            if t.small:
                nbytes, msgs = path_work(t)
                sigmas.append((meas - t.hops_s - p.switch_byte_cost_s * nbytes) / msgs)
    sigma = statistics.median(_need(sigmas, "small in-network collectives"))
    over["switch_msg_cost"] = over["msg_cost"] = sigma * 1e6
    return [("--switch-msg-cost", sigma * 1e6, "us", len(sigmas)),
            ("--msg-cost", sigma * 1e6, "us", 0)]


def fit_efficiency(parsed, switch, preset, over):
    """4. link efficiency: bandwidth-bound concurrent pairs."""
    effs = []
    for ns, meas in parsed:
        if ns.op == "agrs":
            p = params_from(_with_over(ns, over), preset).replace(efficiency=1.0)
            t = Timing(traffic("agrs", ns.algo, p), p)
            if t.bandwidth_bound:
                effs.append((t.link + t.sf) / (meas - t.hops))
    eff = statistics.median(_need(effs, "bandwidth-bound AG || RS points"))
    over["efficiency"] = eff
    return [("--efficiency", eff, "", len(effs))]


def fit_ffn(parsed, switch, preset, over):
    """5. the FFN: what a baseline layer leaves after its collectives, at the preset's
    rate scaled by how much longer (or shorter) it took."""
    rates = []
    for ns, meas in parsed:
        if ns.op == "moe" and ns.mode == "baseline":
            p = params_from(_with_over(ns, over), preset)
            r = moe_time(p, "baseline", ns.algo, ns.routing)
            ffn_s = meas - (r["total"] - r["ffn"])
            if ffn_s > 0:
                rates.append(p.ffn_flops / 1e9 * r["ffn"] / ffn_s)
    if not rates:
        return []
    over["ffn_gflops"] = statistics.median(rates)
    return [("--ffn-gflops", over["ffn_gflops"], "GFLOP/s", len(rates))]


def fit_band_cost(parsed, switch, preset, over):
    """6. band cost: the band counts the layer chose (nb = sqrt(2 * stage / band cost))."""
    costs = []
    for ns, meas in parsed:
        if ns.op == "moe" and ns.mode == "pipelined" and ns.bands:
            p = params_from(_with_over(ns, over), preset)
            stats = route_stats(p)
            d_op, c_op, _ = DISPATCH[ns.routing]
            stage = max(collective_time(d_op, ns.algo, p, stats).link,
                        collective_time(c_op, ns.algo, p, stats).link, ffn_time(p, stats))
            costs.append(2 * stage / ns.bands ** 2)
    if not costs:
        return []
    return [("--band-cost", statistics.median(costs) * 1e6, "us", len(costs))]


FIT_STEPS = (fit_latency, fit_switch_byte_cost, fit_switch_msg_cost, fit_efficiency, fit_ffn,
             fit_band_cost)


def fit_constants(paths, preset="testbed", rate=None):
    """The testbed constants from measured outputs (see --help, "Fit"), each step using
    the ones before it.  Returns a list of (option, value, unit, points used)."""
    points, switch = read_measurements(paths, rate)
    parsed = [(g.model_ns(), statistics.median(g.runs)) for g in grouped(points, preset) if g.runs]
    over, result = {}, []
    for step in FIT_STEPS:
        result += step(parsed, switch, preset, over)
    return result


def cmd_fit(args, preset):
    res = fit_constants(args.files, preset, args.rate)
    print(table(["constant", "fitted", "unit", "from points"],
                [[o, f"{v:.4g}", u, n if n else "(set equal)"] for o, v, u, n in res]))
    print("\nas options: " + " ".join(f"{o} {v:.4g}" for o, v, _, _ in res))
    return 0
