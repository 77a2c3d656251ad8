#!/bin/bash
# The own-engine Server TTFT p99 against `tokenmill sim --draws`: calibrate, five measured `tokenmill bench
# --scenario server` runs at 1 QPS under LoadGen seeds 0-4 (each as results/sim-own-xeon/server-seeds.sh runs
# it), then the simulator's spread over 40 Poisson draws of the same workload (queries drawn from the bench's
# 256 samples), its one-draw figure, and a check of the profile. About 25 minutes on a 2-core Xeon:
#   bash results/sim-draws-xeon-2026-12-01-s48/run.sh OUT
set -x
R=${1:?usage: run.sh OUT}
mkdir -p $R
TM=/work/main/.venv/bin/tokenmill
$TM sim calibrate > $R/calibrate.txt 2>&1
for SEED in 0 1 2 3 4; do
  $TM bench --scenario server --target-qps 1 --workload synthetic --input-len 128 --output-len 128 \
    --length-dist fixed --min-duration 200 --min-query-count 240 --no-progress --no-plots --loadgen-seed $SEED \
    --output-dir $R/server-seed$SEED > $R/server-seed$SEED.txt 2>&1
  rm -f $(find $R/server-seed$SEED -name mlperf_log_trace.json -o -name mlperf_log_accuracy.json)
done
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
W="--scenario server --target-qps 1 --isl 128 --osl 128 --num-requests 240 --num-samples 256"
( time $TM sim $SIM $W --draws 40 --jobs 2 --json ) > $R/sim-draws40.json 2> $R/sim-draws40.time
$TM sim $SIM $W --draws 40 --jobs 2 > $R/sim-draws40.txt 2>/dev/null
$TM sim $SIM $W > $R/sim-one-draw.txt 2>&1
$TM sim calibrate --check > $R/check.txt 2>&1
echo done > $R/DONE
