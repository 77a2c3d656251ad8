#!/bin/bash
# The same as run.sh with the cluster's default rule (`--disagg-min-prefill-tokens 256`: these 128-token prompts
# are all computed on the decode worker, and the prefill worker idles), replayed with the simulator's rule at
# 256 and, for comparison, with every prompt sent. About 8 minutes on a 2-core machine:
#   bash results/disagg-steps-xeon-2026-12-01-s50/run-default-rule.sh OUT
set -x
R=${1:?usage: run-default-rule.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
PORT=8125
$TM sim calibrate --num-threads 1 --profile worker-1t > $R/calibrate.txt 2>&1
$TM serve --prefill-workers 1 --decode-workers 1 --port $PORT \
  --step-log $R/steps.jsonl > $R/serve.log 2>&1 &
SERVER=$!
until curl -sf http://127.0.0.1:$PORT/health > /dev/null; do sleep 1; done
curl -s http://127.0.0.1:$PORT/metrics | grep -E "^tokenmill:disagg" > $R/metrics-before.txt
$TM bench --url http://127.0.0.1:$PORT --api completions --scenario server --target-qps 1 --workload synthetic \
  --input-len 128 --output-len 128 --length-dist fixed --min-duration 60 --min-query-count 240 --no-progress \
  --no-plots --output-dir $R/run > $R/run.txt 2>&1
curl -s http://127.0.0.1:$PORT/metrics | grep -E "^tokenmill:disagg" > $R/metrics-after.txt
kill -TERM $SERVER; wait $SERVER
rm -f $(find $R -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
SIM="--hardware worker-1t --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
$TM sim $SIM --disagg 1:1 --disagg-min-prefill-tokens 256 --replay $R/run/server-127.0.0.1_$PORT \
  --step-log $R/steps.jsonl.prefill-0 $R/steps.jsonl.decode-0 > $R/replay.txt 2>&1
$TM sim $SIM --disagg 1:1 --disagg-min-prefill-tokens 256 --json --replay $R/run/server-127.0.0.1_$PORT \
  --step-log $R/steps.jsonl.prefill-0 $R/steps.jsonl.decode-0 > $R/replay.json 2>&1
$TM sim $SIM --disagg 1:1 --replay $R/run/server-127.0.0.1_$PORT \
  --step-log $R/steps.jsonl.prefill-0 $R/steps.jsonl.decode-0 > $R/replay-sent.txt 2>&1
cp ~/.cache/tokenmill/sim/worker-1t.json $R/
$TM sim calibrate --check --num-threads 1 --profile worker-1t > $R/check.txt 2>&1
echo done > $R/DONE
