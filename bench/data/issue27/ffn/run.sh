#!/usr/bin/env bash
# BENCHMARKS.md "CPU expert compute": the expert compute alone, one rank, against one large
# sgemm (C) and against torch's experts (Python), 1 and 2 threads, fp32 and bf16; then
# four ranks on two cores (incmoe-moe-bench over loopback) for the CPU a forward takes.
# Run from the top of the tree after tools/quickstart build; outputs beside this script.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../../.." && pwd)
out=$(cd "$(dirname "$0")" && pwd)
B=${INCMOE_BUILD_DIR:-$top/build}
for dt in float32 bfloat16; do
    for s in h512 h2048 olmoe; do
        nice -n 15 "$B/tools/incmoe-ffn-bench" --shape $s --dtype $dt --threads 1,2 -n 3 -w 1
    done | tee "$out/c_$dt.txt"
    (cd "$top/bindings/python" && INCMOE_BUILD_DIR=$B nice -n 15 python3 -m incmoe.bench.ffn \
        --dtype $dt --threads 1,2 -n 3 -w 1) | tee "$out/py_$dt.txt"
done
