#!/bin/bash
# How far one session's calibrations agree: three more one-thread calibrations on the same machine, minutes
# after run.sh's, each pricing run.sh's three served runs (replayed as there). About 12 minutes on a 2-core Xeon:
#   PATH=.venv/bin:$PATH bash results/cpushare-xeon-2026-12-01-s47/repeat.sh RUN1 OUT
set -x
RUN=${1:?usage: repeat.sh RUN1 OUT}
OUT=${2:?usage: repeat.sh RUN1 OUT}
mkdir -p "$OUT"
for i in 1 2 3; do
  TOKENMILL_CACHE=$OUT tokenmill sim calibrate --num-threads 1 --profile worker-1t-$i > $OUT/calibrate-1t-$i.txt 2>&1
  for r in round-robin kv; do
    TOKENMILL_CACHE=$OUT tokenmill sim --hardware worker-1t-$i --model smollm2-135m --precision bf16 --num-gpus 2 \
       --router $r --replay $(find $RUN/bench-$r -name results.json) --max-num-seqs 4 --max-num-batched-tokens 1024 \
       --kv-cache-memory-gib 0.274658203125 > $OUT/replay-$r-$i.md
  done
  TOKENMILL_CACHE=$OUT tokenmill sim --hardware worker-1t-$i --model smollm2-135m --precision bf16 --num-gpus 1 \
     --replay $(find $RUN/bench-inproc -name results.json) --max-num-seqs 4 --max-num-batched-tokens 1024 \
     --kv-cache-memory-gib 0.274658203125 > $OUT/replay-inproc-$i.md
done
grep -H "engine busy\|mean step" $OUT/replay-*.md
grep -H "fitted\|batch 1:\|1024-token" $OUT/calibrate-1t-*.txt
