#!/bin/bash
# A 1-thread calibration for the simulator, then kv vs round-robin routing over two 1-thread workers whose
# caches hold about half of 16 prefixes (docs/PERFORMANCE.md "kv routing where it matters"), then the
# simulator replaying both runs. About 14 minutes on a 2-core Xeon:
#   bash results/kvroute-xeon-2026-12-01/run.sh OUT
set -x
# run from the repository root
OUT=${1:?usage: run.sh OUT}
mkdir -p "$OUT"
T=tokenmill
date
TOKENMILL_CACHE=$OUT $T sim calibrate --num-threads 1 --profile worker-1t > $OUT/calibrate-1t.txt 2>&1
for pair in "round-robin 8803" "kv 8804"; do
  set -- $pair
  $T serve --port $2 --workers 2 --worker-num-cpus 1 --num-kv-blocks 800 --max-num-seqs 4 --router $1 > $OUT/serve-$1.txt 2>&1 &
  SERVER=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$2/health > /dev/null && break; sleep 2; done
  $T bench --url http://127.0.0.1:$2 --scenario server --target-qps 1.5 --workload shared-prefix --prefix-len 1024 \
     --num-prefixes 16 --questions-per-prefix 32 --output-len 32 --min-query-count 512 --min-duration 1 \
     --output-dir $OUT/bench-$1 --no-progress > $OUT/bench-$1.txt 2>&1
  echo "bench rc=$?"
  kill $SERVER; wait $SERVER
  ray stop --force > /dev/null 2>&1
  date
done
# The simulator on the same runs (docs/SIMULATOR.md "KV-aware routing on shared prefixes"):
for r in round-robin kv; do
  TOKENMILL_CACHE=$OUT $T sim --hardware worker-1t --model smollm2-135m --precision bf16 --num-gpus 2 --router $r \
     --replay $(find $OUT/bench-$r -name results.json) --max-num-seqs 4 --max-num-batched-tokens 1024 \
     --kv-cache-memory-gib 0.274658203125 | tee $OUT/replay-$r.md
done
