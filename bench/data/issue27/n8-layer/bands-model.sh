#!/bin/bash
# The masked layer's band count after the band model follows the routing (bandmodel.c):
# issue 27's N=8 row (E=64 k=8, 1024 tok/rank, inc masked) with the count the layer picks,
# before (BEFORE: the build of the branch's base) and after (B), beside INCMOE_MOE_BANDS=8
# and 16 on the new build; three rounds, the variants alternating within each.
set -u
W=${W:-/work/wt-auto2}; B=${B:-$W/build}; BEFORE=${BEFORE:-/tmp/auto2-before/build}
OUT=${OUT:-/tmp/auto2/n8}; mkdir -p $OUT
TB="$W/tools/testbed --id 64"
$TB up -N 8 --rate 100mbit >/dev/null
run() { # name build [env...]
  local name=$1 b=$2; shift 2
  env "$@" OPENBLAS_NUM_THREADS=1 INCMOE_LOG_LEVEL=info $TB run --switchd $b/switch/incmoe-switchd -- \
    $b/tools/incmoe-moe-bench --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 64 -k 8 \
    --algo inc --routing masked --link-mbps {mbps} -n 3 -w 1 > $OUT/model-$name-r$r.txt 2>&1
  echo "$name r=$r: $(grep -E '^ +1024' $OUT/model-$name-r$r.txt)"
}
for r in 1 2 3; do
  run before $BEFORE
  run after $B
  run nb8 $B INCMOE_MOE_BANDS=8
  run nb16 $B INCMOE_MOE_BANDS=16
done
$TB down >/dev/null
