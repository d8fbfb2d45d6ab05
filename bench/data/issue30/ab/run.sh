#!/bin/bash
# Issue 30's A/B: the code before the restructuring (BEFORE, a build of d1d3e67) and
# after it (AFTER), alternating on one testbed, 3 rounds: eqbw at N=4 @200 Mbit/s,
# 32 MiB; and the MoE layer at N=4 @100 Mbit/s (E=16 k=4 H=512 I=256, 1024 tokens
# per rank, the four modes of incmoe-moe-bench, median of 3 forwards each).
#   BEFORE=/path/to/build-of-d1d3e67 AFTER=/path/to/build bench/data/issue30/ab/run.sh
set -u
W=$(cd "$(dirname "$0")/../../../.." && pwd)
OUT=${OUT:-/tmp/issue30-ab}
mkdir -p "$OUT"
TB="$W/tools/testbed --id 76"
eqbw() { # TAG BUILD REP
    $TB run --switchd "$2/switch/incmoe-switchd" -- "$2/tools/incmoe-perf" --switch {switch} --rank {rank} \
        -N {nranks} --op agrs --algo inc -b 32M -e 32M -n 3 -w 1 --link-mbps {mbps} >"$OUT/eqbw-$1-$3.txt" 2>&1
    echo "eqbw $1 $3: $(grep -E '^ +[0-9]' "$OUT/eqbw-$1-$3.txt" | tail -1)"
}
layer() { # TAG BUILD REP
    OPENBLAS_NUM_THREADS=1 $TB run --switchd "$2/switch/incmoe-switchd" -- "$2/tools/incmoe-moe-bench" \
        --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 16 -k 4 -H 512 -I 256 --link-mbps {mbps} \
        -n 3 -w 1 >"$OUT/layer-$1-$3.txt" 2>&1
    echo "layer $1 $3:"; grep -E '^ +[0-9]' "$OUT/layer-$1-$3.txt"
}
$TB up -N 4 --rate 200mbit >/dev/null
for rep in 1 2 3; do eqbw before "$BEFORE" $rep; eqbw after "$AFTER" $rep; done
$TB down >/dev/null
$TB up -N 4 --rate 100mbit >/dev/null
for rep in 1 2 3; do layer before "$BEFORE" $rep; layer after "$AFTER" $rep; done
$TB down >/dev/null
