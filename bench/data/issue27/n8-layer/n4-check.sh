#!/bin/bash
# Nothing slower at N=4: the pipelined in-network layer (E=16 k=4, the bench's default
# shape, 1024 tok/rank), full and masked routing, before (BEFORE: the branch's base) and
# after (B) the band model followed the routing; three rounds alternating.
set -u
W=${W:-/work/wt-auto2}; B=${B:-$W/build}; BEFORE=${BEFORE:-/tmp/auto2-before/build}
OUT=${OUT:-/tmp/auto2/n4}; mkdir -p $OUT
TB="$W/tools/testbed --id 65"
$TB up -N 4 --rate 100mbit >/dev/null
for r in 1 2 3; do for v in before after; do
  b=$B; [ $v = before ] && b=$BEFORE
  OPENBLAS_NUM_THREADS=1 $TB run --switchd $b/switch/incmoe-switchd -- \
    $b/tools/incmoe-moe-bench --switch {switch} --rank {rank} -N {nranks} -t 1024 \
    --algo inc --routing full,masked --mode pipelined --link-mbps {mbps} -n 3 -w 1 \
    > $OUT/n4-$v-r$r.txt 2>&1
  grep -E "^ +1024" $OUT/n4-$v-r$r.txt | sed "s/^/$v r=$r: /"
done; done
$TB down >/dev/null
