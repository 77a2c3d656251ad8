#!/bin/bash
# What LoadGen and the bench client in the engine's process cost its steps: `tokenmill bench --scenario server`
# at 2 QPS (300 queries of 128/128 tokens), then the same queries at the same times on a fresh in-process
# engine with neither (no_loadgen.py), twice, alternated (A B A B), each run's steps priced at their shapes on
# one calibration (`tokenmill sim --replay` for the bench's), with a `calibrate --check` before and after.
# About 14 minutes on a 2-core Xeon:
#   bash results/loadgen-cost-xeon-2026-12-01-s49/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
HERE=$(dirname $(readlink -f $0))
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
$TM sim calibrate > $R/calibrate.txt 2>&1
for I in 1 2; do
  $TM bench --scenario server --target-qps 2 --workload synthetic --input-len 128 --output-len 128 \
    --length-dist fixed --min-duration 60 --min-query-count 300 --no-progress --no-plots \
    --output-dir $R/bench$I > $R/bench$I.txt 2>&1
  rm -f $(find $R/bench$I -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
  PYTHONPATH=/work/main/src /work/main/.venv/bin/python $HERE/no_loadgen.py $R/bench$I/server-tokenmill-engine \
    $R/no-loadgen$I > $R/no-loadgen$I.txt 2>&1
  $TM sim $SIM --replay $R/bench$I/server-tokenmill-engine > $R/replay-bench$I.txt 2>&1
done
$TM sim calibrate --check > $R/check.txt 2>&1
echo done > $R/DONE
