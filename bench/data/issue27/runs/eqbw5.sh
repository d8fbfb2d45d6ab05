#!/bin/bash
# eqbw5.sh OUTDIR LABEL [runs]: consecutive identical eqbw runs on one testbed (id 77)
set -u
out=$1; label=$2; runs=${3:-5}
B=/work/main/build
mkdir -p "$out"
for i in $(seq 1 $runs); do
  tools/testbed --id 77 run --switchd $B/switch/incmoe-switchd -- $B/tools/incmoe-perf \
    --switch {switch} --rank {rank} -N {nranks} --op agrs --algo inc -b 8M -e 32M -f 4 -n 3 -w 1 --link-mbps {mbps} \
    > "$out/$label-run$i.txt" 2>&1
  grep -E "^ +[0-9]+" "$out/$label-run$i.txt" | tail -2 | tr '\n' ' '; echo
done
