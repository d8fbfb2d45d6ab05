#!/usr/bin/env python3
"""summary.py [FILE...]: the TTFT table of BENCHMARKS.md from run.sh's raw outputs.

Without arguments it reads every <row>.txt beside this script, in run.sh's row
order.  Per row and variant: TTFT (median of the timed prefills, min-max),
TTFT / agrs (the variant's median over agrs's; in brackets each of its prefills
over agrs's median, min-max), the time inside the MoE blocks, inside their
collectives ("overlapped" where a layer ran pipelined), the incmoe-switchd's
CPU seconds per prefill (median, min-max), and for auto the paths its layers
ran.  All of it from the "# prefills" and "# paths" lines incmoe.bench.prefill
prints; the median is the bench's own (of the slowest rank per prefill).
"""

import os
import re
import statistics
import sys

ROWS = ["n4-100", "n4-300", "n4-600", "n4-100-i1024", "n4-100-i2048", "n8-100", "bf16-n4-100",
        "bf16-n4-100-i2048"]
PREFILLS = re.compile(r"^# prefills (\S+) ttft_ms=(\S+) moe_ms=(\S+) coll_ms=(\S+) switch_cpu_s=(\S+)$",
                      re.M)
PATHS = re.compile(r"^# paths (\S+) (.+)$", re.M)
SHAPE = re.compile(r"^# (float32|bfloat16), N=(\d+) ranks", re.M)
SHAPE_I = re.compile(r"I=(\d+)")
RATE = re.compile(r"testbed rank links (\d+) Mbit/s")


def _values(text):
    return None if text == "-" else [float(x) for x in text.split(",")]


def _spread(xs, fmt="%.1f"):
    if not xs:
        return "-"
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(xs), min(xs), max(xs))


def parse(path):
    text = open(path).read()
    variants = {}
    for m in PREFILLS.finditer(text):
        variants[m.group(1)] = {"ttft": _values(m.group(2)), "moe": _values(m.group(3)),
                                "coll": _values(m.group(4)), "sw": _values(m.group(5))}
    for m in PATHS.finditer(text):
        if m.group(1) in variants:
            variants[m.group(1)]["paths"] = m.group(2).split()
    shape = SHAPE.search(text)
    inter = SHAPE_I.search(text)
    rate = RATE.search(text)
    what = "N=%s, %s Mbit/s, I=%s, %s" % (shape.group(2) if shape else "?",
                                          rate.group(1) if rate else "?",
                                          inter.group(1) if inter else "?",
                                          shape.group(1) if shape else "?")
    return what, variants


def _paths(paths):
    counts = {}
    for p in paths or []:
        counts[p] = counts.get(p, 0) + 1
    return ", ".join("%s ×%d" % (p, n) for p, n in counts.items())


def table(files):
    print("| row | variant | TTFT ms (min–max) | TTFT / agrs (prefills' min–max) | MoE ms "
          "| collectives ms | switch CPU s per prefill | auto's paths |")
    print("|---|---|---|---|---|---|---|---|")
    for path in files:
        what, variants = parse(path)
        if not variants:
            print("| %s | (no result: see %s) | | | | | | |" % (what, os.path.basename(path)))
            continue
        ref = variants.get("agrs")
        ref_med = statistics.median(ref["ttft"]) if ref else None
        first = True
        for name, v in variants.items():
            med = statistics.median(v["ttft"])
            ratio = "-"
            if ref_med:
                rs = [t / ref_med for t in v["ttft"]]
                ratio = "%.3f (%.3f–%.3f)" % (med / ref_med, min(rs), max(rs))
            coll = _spread(v["coll"]) if v["coll"] else "overlapped"
            sw = _spread(v["sw"], "%.2f") if v["sw"] and name != "agrs" else "-"
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                what if first else "", name, _spread(v["ttft"]), ratio, _spread(v["moe"]), coll,
                sw, _paths(v.get("paths")) if name == "auto" else ""))
            first = False


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    files = argv or [os.path.join(here, r + ".txt") for r in ROWS
                     if os.path.exists(os.path.join(here, r + ".txt"))]
    if not files:
        sys.exit("summary.py: no raw outputs (run run.sh TBID first, or name the files)")
    table(files)


if __name__ == "__main__":
    main(sys.argv[1:])
