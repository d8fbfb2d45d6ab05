#!/bin/bash
W=$(cd "$(dirname "$0")/../../.." && pwd); B=$W/build; TB="$W/tools/testbed --id 3"; OUT=${OUT:-/tmp/issue22-run2}; mkdir -p $OUT
# usage: half.sh TAG "TESTBED-UP-ARGS" INCMOE-PERF-ARGS...
tag=$1; shift; up="$1"; shift
$TB up $up >/dev/null
$TB run --switchd $B/switch/incmoe-switchd --logdir $OUT/log-$tag -- $B/tools/incmoe-perf --switch {switch} --rank {rank} -N {nranks} --link-mbps {mbps} "$@" > $OUT/$tag.txt 2>&1
echo "$tag: $(grep -E '^ +[0-9]' $OUT/$tag.txt | tail -1)"
$TB down >/dev/null
