#!/bin/bash
# What the HTTP frontend and a client in another process cost the engine's steps: `tokenmill serve
# --step-log` with `tokenmill bench --url ... --api completions` beside it (A), against `tokenmill bench` on the
# in-process engine (B), A B A B, each a Server run at 2 QPS of 300 queries of 128/128 tokens; every run's steps
# priced at their shapes on one calibration (`tokenmill sim --replay`, with --step-log for the served runs),
# and the profile checked after. About 14 minutes on a 2-core Xeon:
#   bash results/frontend-cost-xeon-2026-12-01-s49/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
PORT=8123
W="--scenario server --target-qps 2 --workload synthetic --input-len 128 --output-len 128 --length-dist fixed
   --min-duration 60 --min-query-count 300 --no-progress --no-plots"
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
$TM sim calibrate > $R/calibrate.txt 2>&1
for I in 1 2; do
  mkdir -p $R/served$I
  $TM serve --port $PORT --step-log $R/served$I/steps.jsonl > $R/served$I/serve.log 2>&1 &
  SERVER=$!
  until curl -sf http://127.0.0.1:$PORT/health > /dev/null; do sleep 1; done
  $TM bench --url http://127.0.0.1:$PORT --api completions $W --output-dir $R/served$I > $R/served$I.txt 2>&1
  kill -TERM $SERVER; wait $SERVER
  $TM bench $W --output-dir $R/inproc$I > $R/inproc$I.txt 2>&1
  rm -f $(find $R -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
  $TM sim $SIM --replay $R/served$I/server-127.0.0.1_$PORT --step-log $R/served$I/steps.jsonl \
    > $R/replay-served$I.txt 2>&1
  $TM sim $SIM --replay $R/inproc$I/server-tokenmill-engine > $R/replay-inproc$I.txt 2>&1
done
$TM sim calibrate --check > $R/check.txt 2>&1
echo done > $R/DONE
