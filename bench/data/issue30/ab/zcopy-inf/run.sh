#!/bin/bash
# Issue 30's A/B of the MoE layer again, with both builds copying their eager sends
# (UCX_ZCOPY_THRESH=inf, which the code after the restructuring sets by default for TCP
# and the code before did not): 3 rounds alternating on one testbed, N=4 @100 Mbit/s.
#   BEFORE=/path/to/build-of-d1d3e67 AFTER=/path/to/build bench/data/issue30/ab/zcopy-inf/run.sh
set -u
W=$(cd "$(dirname "$0")/../../../../.." && pwd)
OUT=${OUT:-/tmp/issue30-ab-zcopy-inf}
mkdir -p "$OUT"
TB="$W/tools/testbed --id 76"
layer() { # TAG BUILD REP
    UCX_ZCOPY_THRESH=inf OPENBLAS_NUM_THREADS=1 $TB run --switchd "$2/switch/incmoe-switchd" -- \
        "$2/tools/incmoe-moe-bench" --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 16 -k 4 \
        -H 512 -I 256 --link-mbps {mbps} -n 3 -w 1 >"$OUT/layer-$1-$3.txt" 2>&1
    echo "layer $1 $3:"; grep -E '^ +[0-9]|not quiet|retrans' "$OUT/layer-$1-$3.txt"
}
$TB up -N 4 --rate 100mbit >/dev/null
for rep in 1 2 3; do layer before "$BEFORE" $rep; layer after "$AFTER" $rep; done
$TB down >/dev/null
