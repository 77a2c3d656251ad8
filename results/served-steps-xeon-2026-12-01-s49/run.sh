#!/bin/bash
# The own engine's served steps, each priced at its shape by `tokenmill sim --replay` (the bench keeps them in
# engine_steps.jsonl): calibrate, then an Offline run and Server runs at 1 and 2.4 QPS of 128/128-token queries
# (each in a fresh process), each replayed; then a check of the profile. About 15 minutes on a 2-core Xeon:
#   bash results/served-steps-xeon-2026-12-01-s49/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
W="--workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots"
$TM sim calibrate > $R/calibrate.txt 2>&1
$TM bench --scenario offline $W --min-query-count 256 --output-dir $R/offline > $R/offline.txt 2>&1
$TM bench --scenario server --target-qps 1 $W --min-duration 60 --min-query-count 240 \
  --output-dir $R/server-qps1 > $R/server-qps1.txt 2>&1
$TM bench --scenario server --target-qps 2.4 $W --min-duration 60 --min-query-count 460 \
  --output-dir $R/server-qps2.4 > $R/server-qps2.4.txt 2>&1
rm -f $(find $R -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
for RUN in offline server-qps1 server-qps2.4; do
  $TM sim $SIM --replay $R/$RUN/*/results.json > $R/replay-$RUN.txt 2>&1
  $TM sim $SIM --replay $R/$RUN/*/results.json --json > $R/replay-$RUN.json 2>/dev/null
done
$TM sim calibrate --check > $R/check.txt 2>&1
echo done > $R/DONE
