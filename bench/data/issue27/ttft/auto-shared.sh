#!/bin/bash
# auto against the forced ring baseline, before (BEFORE_TREE: the branch's base, its own
# build) and after the layers of one communicator shared their choices (this tree), at 600
# and 100 Mbit/s (run.sh's rows n4-600 and n4-100, VARIANTS=ring,auto, ITERS=3), rounds
# alternating the trees; raw outputs in OUT/<tree>-<row>-r<round>.txt.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../../.." && pwd)
BEFORE_TREE=${BEFORE_TREE:-/tmp/auto2-before}; OUT=${OUT:-/tmp/auto2/ttft-ab}; ID=${ID:-66}
mkdir -p "$OUT"
for r in ${ROUNDS:-1 2 3}; do for row in n4-600 n4-100; do for t in before after; do
  tree=$top; [ $t = before ] && tree=$BEFORE_TREE
  INCMOE_BUILD_DIR=$tree/build VARIANTS=ring,auto ITERS=3 OUT=$OUT/tmp \
    "$tree/bench/data/issue27/ttft/run.sh" "$ID" "$row" >/dev/null 2>&1
  mv "$OUT/tmp/$row.txt" "$OUT/$t-$row-r$r.txt"
  echo "$t $row r=$r: $(grep -E '^# prefills' "$OUT/$t-$row-r$r.txt" | sed 's/coll_ms.*//' | tr '\n' ' ')"
done; done; done
