#!/bin/bash
# The I=2048 TTFT rows, before (BEFORE: a build of main) and after (this branch's build)
# alternating, into before/ and after2/ beside this script (run as: after bf16, before fp32,
# after fp32, before bf16); the files directly here are a first pass of this branch with
# ring too (VARIANTS=agrs,ring,baseline,pipelined,masked,auto, OUT=this directory).
set -eu
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../../../.." && pwd)
BEFORE=${BEFORE:-/work/main/build}; AFTER=${AFTER:-$top/build}
export VARIANTS=agrs,baseline,pipelined,masked,auto
for row in bf16-n4-100-i2048 n4-100-i2048; do
  OUT=$here/before INCMOE_BUILD_DIR=$BEFORE "$top/bench/data/issue27/ttft/run.sh" 77 $row
  OUT=$here/after2 INCMOE_BUILD_DIR=$AFTER "$top/bench/data/issue27/ttft/run.sh" 77 $row
done
python3 "$top/bench/data/issue27/ttft/summary.py" "$here"/before/*.txt "$here"/after2/*.txt
