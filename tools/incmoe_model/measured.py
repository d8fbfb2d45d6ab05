"""Measured points: incmoe-perf and incmoe-moe-bench outputs and points files, read
and grouped, and the command check."""

import argparse
import re
import shlex
import statistics
import types

from .presets import ModelError, PROG
from .units import fmt_bytes, table
from .routing import expert_owner, route_stats
from .flows import ALGOS, FULL_OPS, MASKED_OPS
from .params import Params, add_time_options, params_from
from .collective import collective_time
from .lowlat import ll_time
from .layer import moe_time


TESTBED_RE = re.compile(r"# testbed \S+: N=(\d+), tbf (\S+) per rank link \(burst (\d+) B\), "
                        r"(\d+) bit/s switch link \(burst (\d+) B\)")


JOINED_RE = re.compile(r"joined job .*\((?:in-network|ring|a2a), chunk (\d+), (\d+) credits\)")


PERF_RE = re.compile(r"# incmoe-perf: op (\w+), algo (\w+), nranks (\d+)")


# incmoe-perf's line of a dispatch, combine or dc run (tools/perf_dc.c).
ROUTED_RE = re.compile(r"# tokens (\d+), hidden (\d+), row (\d+) B, E (\d+), k (\d+), "
                       r"route (\S+), placement (\w+), seed (\d+)")


SWITCH_RE = re.compile(r"stopped: .* (\d+) bytes in, (\d+) out, .* cpu ([0-9.]+) s user "
                       r"([0-9.]+) s sys")


# An incmoe-perf header line naming the low-latency form (its --low-latency runs).
LOW_LATENCY_RE = re.compile(r"^#.*\blow-latency\b", re.M)


MOE_RE = re.compile(r"incmoe-moe-bench: N=(\d+) E=(\d+) k=(\d+) H=(\d+) I=(\d+) float")


class Point:
    def __init__(self, argv, measured_s, label, source):
        self.argv, self.measured_s, self.label, self.source = argv, measured_s, label, source


def testbed_options(tb):
    return ["--rate", tb.group(2), "--burst", tb.group(3), "--switch-rate", tb.group(4),
            "--switch-burst", tb.group(5)]


def routed_options(text, path):
    """The options of a dispatch, combine or dc run of incmoe-perf (its '# tokens' line):
    its rows as fp32 rows of the same bytes, its routing, and a label."""
    r = ROUTED_RE.search(text)
    if not r:
        raise ModelError(f"{path}: incmoe-perf output of a routed op without its '# tokens "
                         f"..., row ... B, E ..., route ...' line")
    tokens, _, row, E, k, route, placement, _ = r.groups()
    if int(row) % 4:
        raise ModelError(f"{path}: rows of {row} B: the model counts fp32 rows (4 x --hidden "
                         f"bytes)")
    hidden = str(int(row) // 4)
    return (["-E", E, "-k", k, "--tokens", tokens, "--hidden", hidden, "--route", route,
             "--placement", placement], f", E={E} k={k} {route} T={tokens} H={hidden}")


def read_perf(text, path, rate):
    m = PERF_RE.search(text)
    op, algo, n = m.group(1), m.group(2), m.group(3)
    if op not in FULL_OPS + MASKED_OPS:
        raise ModelError(f"{path}: op {op} from incmoe-perf is not read here: give its "
                         f"points as a points file (see --help)")
    base = ["--op", op, "--algo", algo, "-N", n]
    tb = TESTBED_RE.search(text)
    if tb:
        base += testbed_options(tb)
    else:
        link = re.search(r"# link (\d+(?:\.\d+)?) Mbit/s", text)
        if not link and not rate:
            raise ModelError(f"{path}: no link rate (no testbed line, no --link-mbps): "
                             f"give --rate")
        base += ["--rate", f"{link.group(1)}mbit" if link else rate]
    label = f"{op} {algo} N={n} @{base[base.index('--rate') + 1]}"
    routed = op in MASKED_OPS
    if routed and LOW_LATENCY_RE.search(text):
        base += ["--form", "ll"]
        label += " low-latency"
    if routed:
        more, what = routed_options(text, path)
        base += more
        label += what
    j = JOINED_RE.search(text)
    if j:
        base += ["--chunk", j.group(1), "--credits", j.group(2)]
        if algo == "inc":
            label += f" chunk {fmt_bytes(float(j.group(1)))}"
    points = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 8 and not line.startswith("#") and f[0].isdigit():
            # A routed op runs one size, its tokens' rows; a full one sizes its buffer.
            size = [] if routed else ["-b", f[0]]
            points.append(Point(base + size, float(f[4]) * 1e-6,
                                label if routed else f"{label}, {fmt_bytes(float(f[0]))}", path))
    sw = [(float(a) + float(b), float(c) + float(d)) for a, b, c, d in SWITCH_RE.findall(text)]
    return points, sw


MOE_COLUMNS = ("tok/rank", "algo", "base_ms", "pipe_ms")


def moe_columns(text, path):
    """The table's column names, from its header line: every output names its own (the
    routing column came with masked routing, auto_ms with mode auto), and the last
    column's name is several words, of which only the first is kept."""
    for line in text.splitlines():
        if line.startswith("tok/rank"):
            names = line.split()
            if "pipelined" in names:  # "pipelined config[; paths run where auto]"
                names = names[: names.index("pipelined") + 1]
            missing = [c for c in MOE_COLUMNS if c not in names]
            if missing:
                raise ModelError(f"{path}: incmoe-moe-bench header without {', '.join(missing)}")
            return names
    raise ModelError(f"{path}: incmoe-moe-bench output without its 'tok/rank' header")


def read_moe(text, path, rate):
    m = MOE_RE.search(text)
    n, E, k, H, I = m.groups()
    tb = TESTBED_RE.search(text)
    if not tb and not rate:
        raise ModelError(f"{path}: incmoe-moe-bench output without a testbed line: give --rate")
    names = moe_columns(text, path)
    col = {c: i for i, c in enumerate(names)}
    base = ["-N", n, "-E", E, "-k", k, "--hidden", H, "--inter", I, "--op", "moe"]
    base += testbed_options(tb) if tb else ["--rate", rate]
    points = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < len(names) or not f[0].isdigit() or f[col["algo"]] not in ALGOS:
            continue
        routing = f[col["routing"]] if "routing" in col else "full"
        common = base + ["--routing", routing, "--tokens", f[0], "--algo", f[col["algo"]]]
        what = (f"{f[col['algo']]} {routing} N={n} @{common[common.index('--rate') + 1]} "
                f"E={E} k={k} T={f[0]}")
        if f[col["base_ms"]] != "-":
            points.append(Point(common + ["--mode", "baseline"], float(f[col["base_ms"]]) * 1e-3,
                                f"moe baseline {what}", path))
        nb = re.search(r"nb=(\d+)", line)
        if f[col["pipe_ms"]] != "-" and nb:
            points.append(Point(common + ["--mode", "pipelined", "--bands", nb.group(1)],
                                float(f[col["pipe_ms"]]) * 1e-3, f"moe pipelined {what}", path))
    return points + decode_points(text, path, base + ["--routing", "masked"], n, E, k)


# incmoe-moe-bench's decode rows: a line "decode T algo routing mode ms ...", under the
# section's header "decode tok/rank ..." that names the columns.
DECODE_COLUMNS = ("tok/rank", "algo", "mode", "ms")


def decode_points(text, path, base, n, E, k):
    """The decode mode's rows of a moe-bench output (the layer's decode step), read by the
    section header's column names; no section, or no decode mode in it: none."""
    names = None
    points = []
    for line in text.splitlines():
        f = line.split()
        if len(f) > 1 and f[0] == "decode" and f[1] == "tok/rank":
            names = f[1:]
            missing = [c for c in DECODE_COLUMNS if c not in names]
            if missing:
                raise ModelError(f"{path}: decode rows' header without {', '.join(missing)}")
            continue
        if names is None or len(f) < len(names) + 1 or f[0] != "decode" or not f[1].isdigit():
            continue
        col = {c: f[1 + i] for i, c in enumerate(names)}
        if col["mode"] != "decode" or col["algo"] not in ALGOS or col["ms"] == "-":
            continue
        common = base + ["--mode", "decode", "--tokens", col["tok/rank"], "--algo", col["algo"]]
        what = (f"{col['algo']} N={n} @{common[common.index('--rate') + 1]} E={E} k={k} "
                f"T={col['tok/rank']}")
        points.append(Point(common, float(col["ms"]) * 1e-3, f"moe decode {what}", path))
    return points


def read_points_file(text, path):
    points = []
    for no, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise ModelError(f"{path}:{no}: {e}") from None
        measured, label, rest, i = None, None, [], 0
        while i < len(argv):
            a = argv[i]
            if a in ("--measured-us", "--measured-ms", "--label"):
                if i + 1 >= len(argv):
                    raise ModelError(f"{path}:{no}: {a} needs a value")
                v = argv[i + 1]
                if a == "--label":
                    label = v
                else:
                    try:
                        measured = float(v) * (1e-6 if a == "--measured-us" else 1e-3)
                    except ValueError:
                        raise ModelError(f"{path}:{no}: {a} takes a number, got '{v}'") from None
                i += 2
            else:
                rest.append(a)
                i += 1
        points.append(Point(rest, measured, label or " ".join(rest), f"{path}:{no}"))
    return points


def read_measurements(paths, rate=None):
    """Points and switch CPU samples (bytes, cpu seconds) of every file; `rate`
    is the link rate of outputs that do not state theirs."""
    points, switch = [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise ModelError(f"cannot read {path}: {e.strerror}") from None
        if PERF_RE.search(text):
            pts, sw = read_perf(text, path, rate)
            points += pts
            switch += sw
        elif MOE_RE.search(text):
            points += read_moe(text, path, rate)
        else:
            points += read_points_file(text, path)
    if not points:
        raise ModelError("no measured points in " + ", ".join(paths))
    return points, switch


class PointParser(argparse.ArgumentParser):
    """The options of `time`, refusing with a ModelError instead of exiting."""

    def error(self, message):
        raise ModelError(message)


def parse_point(argv, where):
    ap = PointParser(prog=PROG, add_help=False)
    add_time_options(ap)
    try:
        ns, extra = ap.parse_known_args(argv)
    except ModelError as e:
        raise ModelError(f"{where}: {e}") from None
    if extra:
        raise ModelError(f"{where}: unknown options {' '.join(extra)}")
    return ns


def model_point(ns, preset):
    """(model seconds, Timing or None) of a parsed point."""
    p = params_from(ns, preset)
    if ns.op == "moe" and ns.mode == "decode":
        # The decode step's bound is moe-bench's decode bound; a step is its bytes at the rate.
        r = moe_time(p, ns.mode, ns.algo, ns.routing)
        return r["total"], types.SimpleNamespace(bound=r["bound"], bandwidth_bound=True)
    if ns.op == "moe":
        return moe_time(p, ns.mode, ns.algo, ns.routing, ns.bands)["total"], None
    if ns.form == "ll":
        t = ll_time(ns.op, ns.algo, p, route_stats(p))
        return t.total, t
    t = collective_time(ns.op, ns.algo, p)
    return t.total, t


class Group:
    """The measured runs of one setting: the parsed options of its first
    point, its label, the runs' times and (MoE pipelined) their band counts."""

    def __init__(self, ns, label):
        self.ns, self.label, self.runs, self.bands = ns, label, [], []

    def model_ns(self):
        """The options to model it with: a pipelined layer at its runs' median band count."""
        ns = argparse.Namespace(**vars(self.ns))
        if self.bands:
            ns.bands = int(round(statistics.median(self.bands)))
        return ns


def grouped(points, preset):
    """Points of one setting (the same parsed parameters) together, in first-seen order."""
    groups, order = {}, []
    for pt in points:
        ns = parse_point(pt.argv, pt.source)
        try:
            p = params_from(ns, preset)
            if ns.op in MASKED_OPS or ns.op == "moe":
                expert_owner(p.N, p.E, p.placement)
        except ModelError as e:
            raise ModelError(f"{pt.source}: {e}") from None
        key = (tuple(getattr(p, f) for f in Params.FIELDS), ns.op, ns.algo, ns.mode, ns.routing,
               ns.form)
        if key not in groups:
            groups[key] = Group(ns, re.sub(r" nb=\d+", "", pt.label))
            order.append(key)
        g = groups[key]
        if pt.measured_s is not None:
            g.runs.append(pt.measured_s)
            if ns.op == "moe" and ns.mode == "pipelined" and ns.bands:
                g.bands.append(ns.bands)
    return [groups[k] for k in order]


def cmd_check(args, preset):
    points, _ = read_measurements(args.files, args.rate)
    rows, worst, bad = [], {"bandwidth": 0.0, "latency": 0.0}, 0
    for g in grouped(points, preset):
        ns = g.model_ns()
        model, t = model_point(ns, preset)
        kind = "latency" if t is not None and not t.bandwidth_bound else "bandwidth"
        unit, scale = ("ms", 1e3) if model >= 1e-2 else ("us", 1e6)
        label = g.label + (f" nb={ns.bands}" if g.bands else "")
        runs = g.runs
        over_bound = f"{model / t.bound:.3f}" if t is not None and t.bound > 0 else "–"
        if not runs:
            rows.append([label, kind, f"{model * scale:.1f} {unit}", over_bound, "to be measured",
                         "", ""])
            continue
        meas = statistics.median(runs)
        err = (model - meas) / meas * 100
        worst[kind] = max(worst[kind], abs(err))
        flag = ""
        if kind == "bandwidth" and abs(err) > args.tolerance:
            flag, bad = "**over tolerance**", bad + 1
        rows.append([label, kind, f"{model * scale:.1f} {unit}", over_bound,
                     f"{meas * scale:.1f} {unit} ({len(runs)})", f"{err:+.1f}%", flag])
    print(f"preset {preset}")
    print(table(["point", "bound by", "model", "model / bound", "measured (median of n)",
                 "error", ""], rows))
    measured = sum(1 for r in rows if r[4] != "to be measured")
    if measured == 0:
        print(f"\n{len(rows)} points, none measured yet")
    else:
        print(f"\n{measured} of {len(rows)} points measured; largest error: bandwidth-bound "
              f"{worst['bandwidth']:.1f}%, latency-bound {worst['latency']:.1f}%; {bad} "
              f"bandwidth-bound point(s) over {args.tolerance:g}%")
    return 1 if bad else 0
