#!/bin/bash
# Issue 22's testbed figures: trees vs one switch, side by side, 3 repetitions interleaved.
set -u
W=$(cd "$(dirname "$0")/../../.." && pwd)  # the source tree; build/ from tools/quickstart build
B=$W/build
TB="$W/tools/testbed --id 3"
OUT=${OUT:-/tmp/issue22-run1}
mkdir -p "$OUT"
perf() { # tag rep perf-args...
    local tag=$1 rep=$2; shift 2
    $TB run --switchd $B/switch/incmoe-switchd --logdir "$OUT/log-$tag-$rep" -- \
        $B/tools/incmoe-perf --switch {switch} --rank {rank} -N {nranks} --link-mbps {mbps} "$@" \
        > "$OUT/$tag-$rep.txt" 2>&1
    echo "$tag rep $rep: $(grep -v '^#' "$OUT/$tag-$rep.txt" | grep -E '^ +[0-9]' | tail -1)"
}
AGRS="--op agrs -b 32M -e 32M -n 2 -w 1"
for rep in 1 2 3; do
    $TB up -N 8 --leaves 2 --rate 100mbit >/dev/null && perf t8 $rep $AGRS && perf t8ring $rep $AGRS --algo ring; $TB down >/dev/null
    $TB up -N 8 --leaves 2 --rate 100mbit --uplink-rate 50mbit >/dev/null && perf t8half $rep $AGRS; $TB down >/dev/null
    $TB up -N 8 --rate 100mbit >/dev/null && perf f8 $rep $AGRS && perf f8ring $rep $AGRS --algo ring; $TB down >/dev/null
    $TB up -N 16 --leaves 4 --rate 50mbit >/dev/null && perf t16 $rep $AGRS && perf t16ring $rep $AGRS --algo ring && perf t16small $rep --op allreduce -b 64 -e 64 -n 300 -w 30; $TB down >/dev/null
    $TB up -N 16 --leaves 4 --rate 50mbit --uplink-rate 25mbit >/dev/null && perf t16half $rep $AGRS; $TB down >/dev/null
    $TB up -N 16 --rate 50mbit >/dev/null && perf f16 $rep $AGRS && perf f16ring $rep $AGRS --algo ring && perf f16small $rep --op allreduce -b 64 -e 64 -n 300 -w 30; $TB down >/dev/null
done
