#!/bin/bash
# run.sh TBID [ROW...]: the TTFT table of issue 27 item 4 (BENCHMARKS.md, "Time to
# first token of a Hugging Face model"), one testbed per row.
#
# For each row: tools/testbed --id TBID up (N ranks, RATE per rank link), the prefill
# bench over every variant (agrs,ring,baseline,pipelined,masked,a2a,auto) on it, its
# output (rank 0's, then the testbed's own report on stderr: CPU taken by others,
# retransmissions) into <row>.txt beside this script, then down.  Rows (all rows
# without ROW arguments; `run.sh --list` lists them):
#
#   n4-100          N=4, 100 Mbit/s, I=256 (the bench size's)
#   n4-300          N=4, 300 Mbit/s
#   n4-600          N=4, 600 Mbit/s
#   n4-100-i1024    N=4, 100 Mbit/s, --intermediate 1024
#   n4-100-i2048    N=4, 100 Mbit/s, --intermediate 2048
#   n8-100          N=8, 100 Mbit/s
#   bf16-n4-100     N=4, 100 Mbit/s, --dtype bfloat16 (agrs in bf16 too)
#   bf16-n4-100-i2048
#
# Environment: INCMOE_BUILD_DIR (default <checkout>/build: its incmoe-switchd and
# libraries), ITERS (timed prefills per variant, default 3), WARMUP (default 1),
# VARIANTS (default the seven above), OUT (default this script's directory), TIMEOUT
# (seconds a row's run may take, default 1800: seven variants at I=2048 on a loaded
# machine passed the testbed's own 600).
# torch and OpenBLAS run one thread per rank, as in issue 19's table.  The testbed
# is brought down when a row ends, fails or the script is interrupted.  summary.py
# prints the table from the files.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../../.." && pwd)
ROWS=(n4-100 n4-300 n4-600 n4-100-i1024 n4-100-i2048 n8-100 bf16-n4-100 bf16-n4-100-i2048)

die() { echo "run.sh: $*" >&2; exit 2; }

# row NAME: sets N, RATE and EXTRA (more prefill arguments) for a row.
row() {
    EXTRA=()
    case $1 in
    n4-100) N=4 RATE=100 ;;
    n4-300) N=4 RATE=300 ;;
    n4-600) N=4 RATE=600 ;;
    n4-100-i1024) N=4 RATE=100 EXTRA=(--intermediate 1024) ;;
    n4-100-i2048) N=4 RATE=100 EXTRA=(--intermediate 2048) ;;
    n8-100) N=8 RATE=100 ;;
    bf16-n4-100) N=4 RATE=100 EXTRA=(--dtype bfloat16) ;;
    bf16-n4-100-i2048) N=4 RATE=100 EXTRA=(--dtype bfloat16 --intermediate 2048) ;;
    *) die "unknown row '$1' (expected one of ${ROWS[*]})" ;;
    esac
}

[ $# -ge 1 ] || die "usage: run.sh TBID [ROW...] | run.sh --list"
if [ "$1" = --list ]; then
    printf '%s\n' "${ROWS[@]}"
    exit 0
fi
ID=$1
shift
[[ $ID =~ ^[0-9]+$ ]] || die "TBID '$ID': expected a testbed id (a number)"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("${ROWS[@]}")
for r in "${rows[@]}"; do row "$r"; done # every name checked before anything starts

export INCMOE_BUILD_DIR=${INCMOE_BUILD_DIR:-$top/build}
[ -x "$INCMOE_BUILD_DIR/switch/incmoe-switchd" ] ||
    die "no incmoe-switchd in $INCMOE_BUILD_DIR/switch: build first (tools/quickstart build)"
OUT=${OUT:-$here}
mkdir -p "$OUT"
testbed=("$top/tools/testbed" --id "$ID")
trap '"${testbed[@]}" down >/dev/null 2>&1 || true' EXIT

for r in "${rows[@]}"; do
    row "$r"
    t0=$(date +%s)
    "${testbed[@]}" up -N "$N" --rate "${RATE}mbit" >/dev/null
    # The command line goes first in the raw file, so it says how it was made.
    cmd=(env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH="$top/bindings/python"
        python3 -m incmoe.bench.prefill --rank {rank} -N {nranks} --switch {switch}
        --master "10.213.$ID.1:29500" --model olmoe -B 4 -L 128 -n "${ITERS:-3}"
        -w "${WARMUP:-1}" --generate 0
        --variants "${VARIANTS:-agrs,ring,baseline,pipelined,masked,a2a,auto}" "${EXTRA[@]}")
    st=0
    {
        echo "# run.sh $ID $r: tools/testbed --id $ID up -N $N --rate ${RATE}mbit; tools/testbed --id $ID run -- ${cmd[*]}"
        "${testbed[@]}" run --timeout "${TIMEOUT:-1800}" -- "${cmd[@]}" 2>&1
    } >"$OUT/$r.txt" || st=$?
    "${testbed[@]}" down >/dev/null
    echo "$r: $(($(date +%s) - t0)) s, exit $st, $OUT/$r.txt"
    [ $st -eq 0 ] || die "row $r failed (exit $st): see $OUT/$r.txt"
done
