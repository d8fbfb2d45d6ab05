#!/bin/bash
# ms per output token of the OLMoE-shaped HF model on the testbed (issue 28): agrs (vLLM's
# AgRs path over gloo) beside incmoe's in-network and a2a paths, the decode step forced
# (inc-decode, a2a-decode) and the layer's own choice (inc-auto, a2a-auto), at B = 1, 4, 16
# prompts per rank, 16 decode steps each, N=4 @100 Mbit/s.  VARIANTS overrides the list.
#   bench/data/issue28/hf/run.sh BUILD TESTBED_ID OUT.txt
set -u
B=$1 ID=$2 OUT=$3
top=$(cd "$(dirname "$0")/../../../.." && pwd)
export INCMOE_BUILD_DIR=$B
tools/testbed --id "$ID" up -N 4 --rate 100mbit --cc cubic > /dev/null
cmd=(env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH="$top/bindings/python"
    python3 -m incmoe.bench.prefill --rank {rank} -N {nranks} --switch {switch}
    --master "10.213.$ID.1:29500" --model olmoe -B 4 -L 32 -n 1 -w 1 --generate 16
    --decode-batches 1,4,16 --variants "${VARIANTS:-agrs,inc-decode,a2a-decode,inc-auto,a2a-auto}")
{
    echo "# tools/testbed --id $ID up -N 4 --rate 100mbit; tools/testbed --id $ID run -- ${cmd[*]}"
    nice -n -10 tools/testbed --id "$ID" run --timeout 1500 -- "${cmd[@]}" 2>&1
} > "$OUT"
tools/testbed --id "$ID" down > /dev/null
