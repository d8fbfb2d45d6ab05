#!/usr/bin/env bash
# BENCHMARKS.md "CPU expert compute": the expert compute alone, one rank, against one large
# sgemm (C) and against torch's experts (Python), 1 and 2 threads, fp32 and bf16 (and fp16
# in C), three runs each with the load (uptime) before each.  Run from the top of the tree
# after tools/quickstart build; outputs beside this script (c_DTYPE_s2.txt,
# py_DTYPE_s2.txt; the first session's are c_DTYPE.txt, py_DTYPE.txt).
# run_dnnl.sh measures oneDNN beside the C bench; spin_n4.txt is four ranks on two cores.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../../.." && pwd)
out=$(cd "$(dirname "$0")" && pwd)
B=${INCMOE_BUILD_DIR:-$top/build}
for dt in float32 bfloat16 float16; do
    for s in h512 h2048 olmoe; do
        uptime
        "$B/tools/incmoe-ffn-bench" --shape $s --dtype $dt --threads 1,2 -n 3 -w 1
    done | tee "$out/c_${dt}_s2.txt"
done
for dt in float32 bfloat16; do
    for s in h512 h2048 olmoe; do
        uptime
        (cd "$top/bindings/python" && INCMOE_BUILD_DIR=$B python3 -m incmoe.bench.ffn \
            --shapes $s --dtype $dt --threads 1,2 -n 3 -w 1)
    done | tee "$out/py_${dt}_s2.txt"
done
