#!/bin/bash
# Who takes the two cores while two one-thread Ray workers serve (the kv run of run.sh again, with the CPU
# seconds of every process over the bench, grouped; docs/SIMULATOR.md "Steps over long contexts"). About
# 8 minutes on a 2-core Xeon:
#   PATH=.venv/bin:$PATH bash results/kvroute-xeon-2026-12-01-s46/cpu.sh OUT
set -x
OUT=${1:?usage: cpu.sh OUT}
mkdir -p "$OUT"
HERE=$(dirname "$0")
tokenmill serve --port 8807 --workers 2 --worker-num-cpus 1 --router kv --num-kv-blocks 800 --max-num-seqs 4 \
  > $OUT/serve-kv-cpu.txt 2>&1 &
SERVER=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8807/health > /dev/null && break; sleep 2; done
python $HERE/cpu_by_process.py snap $OUT/cpu-before.json
tokenmill bench --url http://127.0.0.1:8807 --scenario server --workload shared-prefix --prefix-len 1024 \
  --num-prefixes 16 --questions-per-prefix 32 --output-len 32 --min-duration 1 --no-progress --target-qps 1.5 \
  --min-query-count 512 --output-dir $OUT/bench-kv-cpu > $OUT/bench-kv-cpu.txt 2>&1
python $HERE/cpu_by_process.py snap $OUT/cpu-after.json
python $HERE/cpu_by_process.py diff $OUT/cpu-before.json $OUT/cpu-after.json | tee $OUT/cpu-by-process.md
kill $SERVER; wait $SERVER
ray stop --force > /dev/null 2>&1
