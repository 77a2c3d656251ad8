#!/bin/bash
# The routing comparison again with the engine's step counters (steps and busy seconds, split into steps
# with a prompt and decode-only steps): a one-thread calibration (with its decode over 1,024-token
# contexts), kv vs round-robin over two one-thread Ray workers (1.5 QPS, 512 queries), one engine of one
# thread in the server's own process (0.75 QPS, 256 queries), then every run replayed on the profile.
# About 25 minutes on a 2-core Xeon:
#   PATH=.venv/bin:$PATH bash results/kvroute-xeon-2026-12-01-s46/run.sh OUT
set -x
OUT=${1:?usage: run.sh OUT}
mkdir -p "$OUT"
T=tokenmill
WORKLOAD="--scenario server --workload shared-prefix --prefix-len 1024 --num-prefixes 16 --questions-per-prefix 32 \
  --output-len 32 --min-duration 1 --no-progress"
date
TOKENMILL_CACHE=$OUT $T sim calibrate --num-threads 1 --profile worker-1t > $OUT/calibrate-1t.txt 2>&1
serve_and_bench() {  # NAME PORT QPS QUERIES serve-flags...
  local name=$1 port=$2 qps=$3 queries=$4; shift 4
  $T serve --port $port "$@" --num-kv-blocks 800 --max-num-seqs 4 > $OUT/serve-$name.txt 2>&1 &
  local server=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$port/health > /dev/null && break; sleep 2; done
  $T bench --url http://127.0.0.1:$port $WORKLOAD --target-qps $qps --min-query-count $queries \
     --output-dir $OUT/bench-$name > $OUT/bench-$name.txt 2>&1
  echo "bench $name rc=$?"
  kill $server; wait $server
  ray stop --force > /dev/null 2>&1
  date
}
serve_and_bench round-robin 8803 1.5 512 --workers 2 --worker-num-cpus 1 --router round-robin
serve_and_bench kv 8804 1.5 512 --workers 2 --worker-num-cpus 1 --router kv
serve_and_bench inproc 8805 0.75 256 --num-threads 1
# The simulator on the same runs (docs/SIMULATOR.md "Steps over long contexts"):
for r in round-robin kv; do
  TOKENMILL_CACHE=$OUT $T sim --hardware worker-1t --model smollm2-135m --precision bf16 --num-gpus 2 --router $r \
     --replay $(find $OUT/bench-$r -name results.json) --max-num-seqs 4 --max-num-batched-tokens 1024 \
     --kv-cache-memory-gib 0.274658203125 | tee $OUT/replay-$r.md
done
TOKENMILL_CACHE=$OUT $T sim --hardware worker-1t --model smollm2-135m --precision bf16 --num-gpus 1 \
   --replay $(find $OUT/bench-inproc -name results.json) --max-num-seqs 4 --max-num-batched-tokens 1024 \
   --kv-cache-memory-gib 0.274658203125 | tee $OUT/replay-inproc.md
