#!/bin/bash
# The own engine's Server figures across rates, measured and simulated: calibrate, then one `tokenmill bench
# --scenario server` run per target QPS (each in a fresh process, so no run finds the samples an earlier one
# cached; 460 queries, enough for LoadGen's early stopping to judge a p99), then `tokenmill sim --draws 20` at
# each rate and the simulator's own peak search over 10 draws, and a check of the profile. About 16 minutes on a
# 2-core Xeon:
#   bash results/sim-peak-xeon-2026-12-01-s48/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
QPS="2.4 2.7 3.0 3.3"
$TM sim calibrate > $R/calibrate.txt 2>&1
for Q in $QPS; do
  $TM bench --scenario server --target-qps $Q --workload synthetic --input-len 128 --output-len 128 \
    --length-dist fixed --min-duration 60 --min-query-count 460 --no-progress --no-plots \
    --output-dir $R/server-qps$Q > $R/server-qps$Q.txt 2>&1
  rm -f $(find $R/server-qps$Q -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
done
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
W="--scenario server --isl 128 --osl 128 --num-samples 256 --preset smollm2-cpu"
for Q in $QPS; do
  $TM sim $SIM $W --target-qps $Q --num-requests 460 --draws 20 --jobs 2 --json > $R/sim-qps$Q.json 2>/dev/null
done
$TM sim $SIM $W --duration 60 --min-query-count 460 --draws 10 --jobs 2 --json > $R/sim-peak.json 2>/dev/null
$TM sim calibrate --check > $R/check.txt 2>&1
echo done > $R/DONE
