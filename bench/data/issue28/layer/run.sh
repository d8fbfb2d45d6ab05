#!/bin/bash
# One MoE layer forward at decode sizes on the testbed (issue 28): the decode step beside the
# bulk modes, on inc, a2a and ring, E=64 k=8 H=512 (I=256), three runs on one testbed.
#   bench/data/issue28/layer/run.sh BUILD N TESTBED_ID OUTDIR
set -u
B=$1 N=$2 ID=$3 OUT=$4
mkdir -p "$OUT"
tools/testbed --id "$ID" up -N "$N" --rate 100mbit --cc cubic > /dev/null
for r in 1 2 3; do
    nice -n -10 tools/testbed --id "$ID" run --switchd "$B/switch/incmoe-switchd" -- \
        "$B/tools/incmoe-moe-bench" --switch {switch} --rank {rank} -N {nranks} \
        -t 1,4,16,64 -E 64 -k 8 --algo inc,a2a,ring --routing full,masked \
        --mode baseline,pipelined,decode --decode-tokens 64 --link-mbps {mbps} -n 5 -w 2 \
        > "$OUT/n$N-r$r.txt" 2>&1
done
tools/testbed --id "$ID" down > /dev/null
