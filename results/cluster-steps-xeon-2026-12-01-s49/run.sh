#!/bin/bash
# Two one-thread Ray workers' own steps, each priced at its shape: a one-thread calibration, then `tokenmill
# serve --workers 2 --step-log` (kv router) with `tokenmill bench --url ... --api completions` at 1 QPS (240
# queries of 128/128 tokens), replayed with both workers' step files, and the profile checked after. About 9
# minutes on a 2-core Xeon:
#   bash results/cluster-steps-xeon-2026-12-01-s49/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
PORT=8124
$TM sim calibrate --num-threads 1 --profile worker-1t > $R/calibrate.txt 2>&1
$TM serve --workers 2 --port $PORT --step-log $R/steps.jsonl > $R/serve.log 2>&1 &
SERVER=$!
until curl -sf http://127.0.0.1:$PORT/health > /dev/null; do sleep 1; done
$TM bench --url http://127.0.0.1:$PORT --api completions --scenario server --target-qps 1 --workload synthetic \
  --input-len 128 --output-len 128 --length-dist fixed --min-duration 60 --min-query-count 240 --no-progress \
  --no-plots --output-dir $R/run > $R/run.txt 2>&1
kill -TERM $SERVER; wait $SERVER
rm -f $(find $R -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
$TM sim --hardware worker-1t --num-gpus 2 --router kv --model smollm2-135m --precision bf16 --max-num-seqs 128 \
  --max-num-batched-tokens 1024 --replay $R/run/server-127.0.0.1_$PORT --step-log $R/steps.jsonl.worker-* \
  > $R/replay.txt 2>&1
$TM sim calibrate --check --num-threads 1 --profile worker-1t > $R/check.txt 2>&1
echo done > $R/DONE
