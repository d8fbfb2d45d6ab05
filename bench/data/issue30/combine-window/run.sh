#!/bin/bash
# Issue 30, the combine's window between switches (wire 10): in-network dispatch/combine over
# the testbed's 2 x 4 tree (N=8, 100 Mbit/s, up-links at the rank rate, testbed 79) at the
# default window (W = credits = 64) and at --link-window LOW (default 1), alternating, REPS
# rounds (default 3); the same incmoe-perf arguments as ../trees/run.sh's tree-dc rows.  The window is given to
# every switch through a wrapper around incmoe-switchd (a leaf announces it to the root).
# Outputs beside this script: tree-dc-wLOW-roundR-{w64,wLOW}.txt.
set -u
W=$(cd "$(dirname "$0")/../../../.." && pwd) # the source tree; build/ from tools/quickstart build
B=$W/build
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)}
REPS=${REPS:-3}
LOW=${LOW:-1}
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT
printf '#!/bin/sh\nexec %s "$@" --link-window %s\n' "$B/switch/incmoe-switchd" "$LOW" >"$wrap/low"
chmod +x "$wrap/low"
DC="--op dc -E 64 -k 8 --tokens 2048 --hidden 1024 -n 1 -w 1 --algo inc"
"$W/tools/testbed" --id 79 up -N 8 --leaves 2 --rate 100mbit >/dev/null
for rep in $(seq 1 "$REPS"); do
    for cfg in w64 "w$LOW"; do
        sw=$B/switch/incmoe-switchd
        [ "$cfg" = w64 ] || sw=$wrap/low
        "$W/tools/testbed" --id 79 run --switchd "$sw" -- \
            "$B/tools/incmoe-perf" --switch {switch} --rank {rank} -N {nranks} --link-mbps {mbps} $DC \
            >"$OUT/tree-dc-w$LOW-round$rep-$cfg.txt" 2>&1
        echo "$cfg rep $rep: $(grep -E '^ +[0-9]' "$OUT/tree-dc-w$LOW-round$rep-$cfg.txt" | tail -1)"
    done
done
"$W/tools/testbed" --id 79 down >/dev/null
