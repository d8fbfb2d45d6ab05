#!/usr/bin/env bash
# BENCHMARKS.md "CPU expert compute", the GEMM library: oneDNN's matmul (libdnnl-dev 2.6.3,
# dnnl_bench.cc beside this script) on the expert compute's GEMMs, each shape, dtype and
# thread count right after incmoe-ffn-bench on the same (the layer's kernels with their
# SwiGLU and row handling, against OpenBLAS's sgemm).  Run from the top of the tree after
# tools/quickstart build, with libdnnl-dev installed; output in dnnl.txt beside this script.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../../.." && pwd)
out=$(cd "$(dirname "$0")" && pwd)
B=${INCMOE_BUILD_DIR:-$top/build}
bin=$(mktemp -d)/dnnl_bench
g++ -O2 -fopenmp "$out/dnnl_bench.cc" -ldnnl -o "$bin"
for run in 1 2 3; do
    echo "# run $run, $(uptime)"
    for s in h512 h2048 olmoe; do
        for dt in float32 bfloat16; do
            for t in 1 2; do
                "$B/tools/incmoe-ffn-bench" --shape $s --dtype $dt --threads $t -n 1 -w 1 | grep -v '^#'
                OMP_NUM_THREADS=$t "$bin" $s $dt $t 1
            done
        done
    done
done | tee "$out/dnnl.txt"
rm -f "$bin"
