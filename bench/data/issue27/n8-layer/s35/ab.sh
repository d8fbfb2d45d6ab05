#!/bin/bash
# The N=8 layer row, before (BEFORE: a build of main) and after (AFTER: this branch's build)
# alternating, two rounds, on testbed 77: the ab-*.txt beside this script.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../../../.." && pwd)
BEFORE=${BEFORE:-/work/main/build}; AFTER=${AFTER:-$top/build}
TB="$top/tools/testbed --id 77"
$TB up -N 8 --rate 100mbit >/dev/null
for r in 1 2; do
  for v in before after; do
    if [ $v = before ]; then B=$BEFORE; else B=$AFTER; fi
    OPENBLAS_NUM_THREADS=1 $TB run --switchd $B/switch/incmoe-switchd -- \
      $B/tools/incmoe-moe-bench --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 64 -k 8 \
      --algo inc,a2a --routing full,masked --link-mbps {mbps} -n 3 -w 1 > "$here/ab-$v-r$r.txt" 2>&1
    grep -E "a2a baseline|CPU while" "$here/ab-$v-r$r.txt"
  done
done
$TB down >/dev/null
