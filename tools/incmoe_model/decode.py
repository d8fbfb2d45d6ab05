"""The command decode: the model's decode points (issue 28), every figure model output but
the published ones beside them."""

from .presets import PREDICT_N, PRESETS
from .units import fmt_bytes, fmt_rate, parse_rate, table
from .routing import route_stats
from .lowlat import ll_time
from .layer import decode_time
from .measured import parse_point
from .params import params_from
from .published import DEEPEP_LL_US, DEEPEP_NIC, DEEPEP_SETTING, DEEPEP_SOURCE


# incmoe-perf --op dc's small points of the issue: (N, tokens, hidden), E=64 k=8 fp32.
DC_POINTS = [(4, 4, 512), (8, 16, 1024)]

# incmoe-moe-bench -E 64 -k 8 (H=512, I=256): N and the token counts of its decode rows.
LAYER_NS = [4, 8]
LAYER_TOKENS = [1, 4, 16, 64]


def point(preset, argv):
    """Params of a point given as `time`'s options."""
    return params_from(parse_point(argv, "decode"), preset)


def ms(s):
    return f"{s * 1e3:.3f}"


def dc_rows():
    rows = []
    for n, tokens, hidden in DC_POINTS:
        p = point("testbed", ["-N", str(n), "--tokens", str(tokens), "--hidden", str(hidden)])
        stats = route_stats(p)
        inc, a2a = (ll_time("dc", algo, p, stats) for algo in ("inc", "a2a"))
        rows.append([n, tokens, f"{4 * hidden} B", ms(inc.total), ms(inc.bound),
                     f"{inc.total / inc.bound:.2f}", ms(a2a.total), ms(a2a.bound),
                     f"{a2a.total / a2a.bound:.2f}", f"{inc.total / a2a.total:.2f}"])
    return rows


def layer_rows():
    rows = []
    for n in LAYER_NS:
        for tokens in LAYER_TOKENS:
            p = point("testbed", ["-N", str(n), "--tokens", str(tokens), "--hidden", "512",
                                  "--inter", "256"])
            inc, a2a = decode_time(p, "inc"), decode_time(p, "a2a")
            rows.append([n, tokens, ms(inc["total"]), ms(a2a["total"]), ms(inc["ffn"]),
                         ms(inc["bound"]), f"{inc['total'] / inc['bound']:.2f}",
                         f"{inc['total'] / a2a['total']:.2f}"])
    return rows


def fabric_rows(rate):
    s = DEEPEP_SETTING
    rows = []
    for n in PREDICT_N:
        p = point("fabric", ["--model", s["model"], "-N", str(n), "--tokens", str(s["tokens"]),
                             "--rate", rate])
        stats = route_stats(p)
        rd, rc = s["dispatch_row"], s["combine_row"]
        t = {(op, algo): ll_time(op, algo, p, stats, rd, rc)
             for op in ("dispatch", "combine") for algo in ("inc", "a2a")}
        d_us, c_us = DEEPEP_LL_US[n]
        credits = max(x.credits for x in t.values())
        rows.append([n, f"{stats.kbar():.2f}"] +
                    [f"{t[key].total * 1e6:.0f}" for key in
                     (("dispatch", "inc"), ("combine", "inc"), ("dispatch", "a2a"),
                      ("combine", "a2a"))] + [d_us, c_us,
                                              f"{credits}" + ("" if credits <= p.credits else
                                                              f" (over {p.credits})")])
    return rows


def cmd_decode(args, preset):
    """The decode points: the testbed's (preset testbed) and the fabric's at EP 8 ... 256
    beside DeepEP's published low-latency figures."""
    tb = PRESETS["testbed"]
    print(f"Decode points, model output (incmoe-model, preset testbed: {tb['rate']} per rank "
          f"link, E=64 k=8 uniform routing, fp32 rows), the low-latency form (base/wire.h).\n")
    print("dispatch || combine (incmoe-perf --op dc --low-latency), per step:\n")
    print(table(["N", "tokens/rank", "row", "model inc ms", "bound ms", "model inc / bound",
                 "model a2a ms", "a2a bound ms", "model a2a / bound", "model inc / a2a"],
                dc_rows()))
    print("\nOne decode layer forward (incmoe-moe-bench -E 64 -k 8, H=512 I=256, the decode "
          "step: one low-latency dispatch, the local experts, one low-latency combine; the "
          "bound as its decode rows state it):\n")
    print(table(["N", "tokens/rank", "model inc ms", "model a2a ms", "model FFN ms",
                 "bound ms", "model inc / bound", "model inc / a2a"], layer_rows()))
    s = DEEPEP_SETTING
    rates = [args.rate] if args.rate else [PRESETS["fabric"]["rate"], DEEPEP_NIC]
    for rate in rates:
        print(f"\nFabric (preset fabric at {fmt_rate(parse_rate(rate))} per rank link), "
              f"DeepEP's low-latency setting: DeepSeek-V3 (E=256, k=8, H=7168), "
              f"{s['tokens']} tokens per rank, FP8 dispatch ({s['dispatch_row']} B a row with "
              f"its scales), BF16 combine ({s['combine_row']} B), each alone, in us.  model: "
              f"incmoe-model's prediction; DeepEP: published, {DEEPEP_SOURCE}, H800 with a "
              f"400 Gbit/s CX7 NIC each:\n")
        print(table(["EP", "k-bar", "model inc dispatch", "model inc combine",
                     "model a2a dispatch", "model a2a combine", "DeepEP dispatch",
                     "DeepEP combine", "model credits of the largest message"],
                    fabric_rows(rate)))
        print(f"\n(credits: of {fmt_bytes(PRESETS['fabric']['chunk'])} chunks, a job's "
              f"{PRESETS['fabric']['credits']} by default; a message over them is refused, "
              f"base/wire.h: the form needs incmoe_comm_params_t's credits raised there)")
    return 0
