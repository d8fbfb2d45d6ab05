#!/bin/bash
set -u
W=/work/main; B=$W/build; OUT=/tmp/n8moe
TB="$W/tools/testbed --id 77"
$TB up -N 8 --rate 100mbit >/dev/null
for r in 1 2; do for nb in 0 8 16 24; do
  env $( [ $nb = 0 ] || echo INCMOE_MOE_BANDS=$nb ) OPENBLAS_NUM_THREADS=1 $TB run --switchd $B/switch/incmoe-switchd -- \
    $B/tools/incmoe-moe-bench --switch {switch} --rank {rank} -N {nranks} -t 1024 -E 64 -k 8 \
    --algo inc --routing masked --link-mbps {mbps} -n 3 -w 1 > $OUT/bands-nb$nb-r$r.txt 2>&1
  echo "nb=$nb r=$r: $(grep -E '^ +1024' $OUT/bands-nb$nb-r$r.txt)"
done; done
$TB down >/dev/null
