#!/bin/bash
# Issue 30, item 6: dispatch/combine over a two-level tree and a keyed tree, on the
# testbed, beside one switch; 3 rounds, the configurations alternating in each round.
# N=8 at 100 Mbit/s: one switch (testbed 78) and 2 leaves x 4 with up-links at the
# rank rate (testbed 79), both up for the whole script.
set -u
W=$(cd "$(dirname "$0")/../../../.." && pwd) # the source tree; build/ from tools/quickstart build
B=$W/build
OUT=${OUT:-/tmp/issue30-trees}
mkdir -p "$OUT"
KEY=$OUT/key
echo "issue30-tree-key" >"$KEY"
perf() { # ID TAG REP [run args --] perf-args...
    local id=$1 tag=$2 rep=$3 runargs=()
    shift 3
    while [ "$1" != "--" ]; do runargs+=("$1"); shift; done
    shift
    "$W/tools/testbed" --id "$id" run --switchd "$B/switch/incmoe-switchd" "${runargs[@]}" -- \
        "$B/tools/incmoe-perf" --switch {switch} --rank {rank} -N {nranks} --link-mbps {mbps} "$@" \
        >"$OUT/$tag-$rep.txt" 2>&1
    echo "$tag rep $rep: $(grep -E '^ +[0-9]' "$OUT/$tag-$rep.txt" | tail -1)"
}
DC="--op dc -E 64 -k 8 --tokens 2048 --hidden 1024 -n 1 -w 1"
AGRS="--op agrs -b 32M -e 32M -n 2 -w 1"
"$W/tools/testbed" --id 78 up -N 8 --rate 100mbit >/dev/null
"$W/tools/testbed" --id 79 up -N 8 --leaves 2 --rate 100mbit >/dev/null
for rep in 1 2 3; do
    perf 78 flat-dc "$rep" -- $DC --algo inc
    perf 79 tree-dc "$rep" -- $DC --algo inc
    perf 78 flat-a2a "$rep" -- $DC --algo a2a
    perf 79 tree-a2a "$rep" -- $DC --algo a2a
    perf 79 tree-agrs "$rep" -- $AGRS --algo inc
    perf 79 tree-agrs-keyed "$rep" --key-file "$KEY" -- $AGRS --algo inc
    perf 79 tree-dc-keyed "$rep" --key-file "$KEY" -- $DC --algo inc
done
"$W/tools/testbed" --id 78 down >/dev/null
"$W/tools/testbed" --id 79 down >/dev/null
