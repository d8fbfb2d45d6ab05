#!/bin/bash
# Issue 27's row "MoE layer N=8, E=64 k=8, 1024 tok/rank": three runs on one testbed.
set -u
W=${W:-/work/main}; B=${B:-$W/build}; OUT=${OUT:-/tmp/n8moe}
TB="$W/tools/testbed --id 77"
$TB up -N 8 --rate 100mbit >/dev/null
for r in 1 2 3; do
  OPENBLAS_NUM_THREADS=1 $TB run --switchd $B/switch/incmoe-switchd -- \
    $B/tools/incmoe-moe-bench --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 64 -k 8 \
    --algo inc,a2a --routing full,masked --link-mbps {mbps} -n 3 -w 1 > $OUT/n8-moe-r$r.txt 2>&1
  grep -E "^ +1024|=|quiet|retrans" $OUT/n8-moe-r$r.txt
done
$TB down >/dev/null
