#!/bin/bash
# Skewed routing with expert replicas on the testbed (issue 29): masked dispatch || combine
# (incmoe-perf --op dc) of OLMoE's shape under uniform routing, under zipf:1.0 (the popular
# experts on rank 0, the contiguous placement), and under zipf:1.0 with one extra expert slot
# per rank (--extra-slots 1: the placement incmoe_moe_placement_choose gives for a sample of the
# same routing on another seed, each token's ranks by the layer's per-token rule), on inc and
# a2a; then the MoE layer (incmoe-moe-bench, pipelined masked in-network, 1024 tokens per rank)
# under uniform routing, zipf:1.0, and zipf:1.0 with one extra slot.  Three rounds, every
# configuration alternating within a round on one testbed.
#   bench/data/issue29/dc/run.sh BUILD N RATE TESTBED_ID OUTDIR [layer]
# e.g. run.sh $PWD/build 8 100mbit 76 out layer     and    run.sh $PWD/build 16 50mbit 76 out
set -u
B=$1 N=$2 RATE=$3 ID=$4 OUT=$5 LAYER=${6:-}
mkdir -p "$OUT"
tools/testbed --id "$ID" up -N "$N" --rate "$RATE" --cc cubic > /dev/null
run() { # NAME CMD...: one run on the testbed, output into OUT/nN-NAME-rR.txt
    local name=$1
    shift
    nice -n -10 tools/testbed --id "$ID" run --switchd "$B/switch/incmoe-switchd" -- "$@" \
        > "$OUT/n$N-$name-r$r.txt" 2>&1
}
for r in 1 2 3; do
    for algo in inc a2a; do
        for cfg in uniform zipf zipf-rep1; do
            route=zipf:1.0 extra=()
            [ "$cfg" = uniform ] && route=uniform
            [ "$cfg" = zipf-rep1 ] && extra=(--extra-slots 1)
            run "dc-$algo-$cfg" "$B/tools/incmoe-perf" --switch {switch} --rank {rank} \
                -N {nranks} --link-mbps {mbps} -n 1 -w 1 --op dc --algo "$algo" -E 64 -k 8 \
                --tokens 2048 --hidden 1024 --route "$route" "${extra[@]}"
        done
    done
    [ -n "$LAYER" ] || continue
    for cfg in uniform zipf zipf-rep1; do
        route=zipf:1 extra=()
        [ "$cfg" = uniform ] && route=uniform
        [ "$cfg" = zipf-rep1 ] && extra=(--extra-slots 1)
        run "layer-$cfg" env OPENBLAS_NUM_THREADS=1 "$B/tools/incmoe-moe-bench" --switch {switch} \
            --rank {rank} -N {nranks} -t 1024 -E 64 -k 8 --algo inc --routing masked \
            --mode pipelined --link-mbps {mbps} -n 3 -w 1 --route "$route" "${extra[@]}"
    done
done
tools/testbed --id "$ID" down > /dev/null
