#!/usr/bin/env python3
"""Issue 28's decode figures from the raw files beside this script: dc/raw (incmoe-perf and
mpi_dc, one file per configuration and round) and layer/raw (incmoe-moe-bench's decode rows).
Ratios are taken per round (configurations alternate within a round), then the median with
the min-max beside it."""
import os
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def dc_row(path):
    """(time us, t/bound) of an incmoe-perf or mpi_dc output's one table row."""
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.split()
            if len(cols) > 10:
                return float(cols[4]), float(cols[-1])
    raise ValueError("no table row in " + path)


def med(xs):
    return "%.3f (%.3f-%.3f)" % (statistics.median(xs), min(xs), max(xs))


def dc_table():
    raw = os.path.join(HERE, "dc", "raw")
    for n in (4, 8):
        t = {}
        for cfg in ("inc-ll", "a2a-ll", "inc", "a2a", "mpi"):
            t[cfg] = [dc_row(os.path.join(raw, "n%d-%s-r%d.txt" % (n, cfg, r))) for r in (1, 2, 3)]
        print("N=%d:" % n)
        for cfg, v in t.items():
            print("  %-7s time us %s  t/bound %s" % (cfg, med([x[0] for x in v]),
                                                   med([x[1] for x in v])))
        for other in ("a2a-ll", "inc", "a2a", "mpi"):
            print("  inc-ll / %-6s %s" % (other, med([a[0] / b[0] for a, b in
                                                       zip(t["inc-ll"], t[other])])))


DECODE = re.compile(r"^decode\s+(\d+)\s+(\w+)\s+(\w+)\s+(\w+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+"
                    r"([\d.]+)\s+([\d.]+)")


def layer_table():
    raw = os.path.join(HERE, "layer", "raw")
    for n in (4, 8):
        runs = []
        for r in (1, 2, 3):
            rows = {}
            with open(os.path.join(raw, "n%d-r%d.txt" % (n, r))) as f:
                for line in f:
                    m = DECODE.match(line)
                    if m:
                        key = (int(m.group(1)), m.group(2), m.group(3), m.group(4))
                        rows[key] = (float(m.group(5)), float(m.group(9)))
            runs.append(rows)
        print("N=%d layer forward (ms; t/bound):" % n)
        for T in (1, 4, 16, 64):
            inc = [r[(T, "inc", "masked", "decode")][0] for r in runs]
            tb = [r[(T, "inc", "masked", "decode")][1] for r in runs]
            best_bulk_inc = [min(v[0] for k, v in r.items() if k[0] == T and k[1] == "inc"
                                 and k[3] != "decode") for r in runs]
            best_other = [min(v[0] for k, v in r.items() if k[0] == T and k[1] in ("a2a", "ring"))
                          for r in runs]
            print("  T=%-3d inc decode %s ms, t/bound %s; / inc's best bulk mode %s; "
                  "/ best a2a or ring mode %s" % (T, med(inc), med(tb),
                                                   med([a / b for a, b in zip(inc, best_bulk_inc)]),
                                                   med([a / b for a, b in zip(inc, best_other)])))


def hf_table():
    """The prefill bench's decode table (ms per output token) of each run, then the ratios."""
    runs = []
    for r in (1, 2, 3):
        rows = {}
        with open(os.path.join(HERE, "hf", "n4-100-r%d.txt" % r)) as f:
            in_table = False
            for line in f:
                if line.startswith("| decode variant"):
                    in_table = True
                    continue
                if in_table and line.startswith("| ") and not line.startswith("|---"):
                    cols = [c.strip() for c in line.strip().strip("|").split("|")]
                    rows[cols[0]] = [float(c) for c in cols[1:4]]
                elif in_table and not line.startswith("|"):
                    in_table = False
        runs.append(rows)
    print("HF decode, N=4 @100 Mbit/s, ms per output token (B = 1, 4, 16 per rank):")
    for name in runs[0]:
        print("  %-10s %s" % (name, "  ".join(med([r[name][b] for r in runs]) for b in range(3))))
    pairs = [("inc-decode", "agrs"), ("inc-auto", "agrs"), ("inc-decode", "a2a-decode"),
             ("inc-auto", "a2a-auto"), ("a2a-decode", "agrs")]
    for a, b in pairs:
        print("  %-10s / %-10s %s" % (a, b, "  ".join(
            med([r[a][i] / r[b][i] for r in runs]) for i in range(3))))


if __name__ == "__main__":
    dc_table()
    layer_table()
    hf_table()
