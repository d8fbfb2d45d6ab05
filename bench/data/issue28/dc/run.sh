#!/bin/bash
# Decode-sized dispatch || combine on the testbed (issue 28): the low-latency form beside
# today's bulk form, a2a's low-latency form and OpenMPI's two MPI_Ialltoallv (tools/mpi_dc),
# three rounds, every configuration alternating within a round on one testbed.
#   bench/data/issue28/dc/run.sh BUILD N TOKENS HIDDEN TESTBED_ID OUTDIR
# e.g. run.sh $PWD/build 4 4 512 76 out   and   run.sh $PWD/build 8 16 1024 76 out
set -u
B=$1 N=$2 T=$3 H=$4 ID=$5 OUT=$6
mkdir -p "$OUT"
tools/testbed --id "$ID" up -N "$N" --rate 100mbit --cc cubic > /dev/null
for r in 1 2 3; do
    for cfg in inc-ll a2a-ll inc a2a; do
        algo=${cfg%-ll} ll=
        [ "$cfg" != "$algo" ] && ll=--low-latency
        nice -n -10 tools/testbed --id "$ID" run --switchd "$B/switch/incmoe-switchd" -- \
            "$B/tools/incmoe-perf" --switch {switch} --rank {rank} -N {nranks} --link-mbps {mbps} \
            --op dc --algo "$algo" -E 64 -k 8 --tokens "$T" --hidden "$H" -n 20 -w 5 $ll \
            > "$OUT/n$N-$cfg-r$r.txt" 2>&1
    done
    nice -n -10 tools/mpi-reference --id "$ID" --program "$B/tools/mpi_dc" -- \
        -E 64 -k 8 --tokens "$T" --hidden "$H" -n 20 -w 5 > "$OUT/n$N-mpi-r$r.txt" 2>&1
done
tools/testbed --id "$ID" down > /dev/null
