#!/usr/bin/env python3
"""summary.py [DIR]: auto's TTFT over the forced ring baseline's, per run (each run's medians
of its prefills) and per tree and row (the median over the runs, min-max beside it), from
auto-shared.sh's outputs <tree>-<row>-r<round>.txt."""
import glob
import os
import re
import statistics
import sys


def medians(path):
    out = {}
    for line in open(path):
        m = re.match(r"# prefills (\w+) ttft_ms=([0-9.,]+)", line)
        if m:
            out[m.group(1)] = statistics.median(float(v) for v in m.group(2).split(","))
    paths = [line.split()[3:] for line in open(path) if line.startswith("# paths auto")]
    return out, paths[0] if paths else []


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rows = {}
    for f in sorted(glob.glob(os.path.join(d, "*-r*.txt"))):
        tree, row = re.match(r"(\w+)-(n4-\d+)-r\d+\.txt", os.path.basename(f)).groups()
        med, paths = medians(f)
        if "ring" in med and "auto" in med:
            r = med["auto"] / med["ring"]
            rows.setdefault((row, tree), []).append(r)
            print(f"{os.path.basename(f)}: ring {med['ring']:.1f} auto {med['auto']:.1f} ms, "
                  f"auto/ring {r:.3f}; paths {' '.join(paths)}")
        else:
            print(f"{os.path.basename(f)}: no result (the run failed)")
    for (row, tree), v in sorted(rows.items()):
        print(f"{row} {tree}: auto/ring {statistics.median(v):.3f} "
              f"({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")


if __name__ == "__main__":
    main()
