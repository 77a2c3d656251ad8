#!/bin/bash
# The own-engine Server check over several LoadGen arrival draws: for each seed, a measured
# `tokenmill bench --scenario server` run (as server.sh, with --loadgen-seed) and the simulator on its
# arrivals replayed, without and with its prefix hits. Run after run.sh (it needs the calibrated profile).
# Usage: [PREC=fp32] bash results/sim-own-xeon/server-seeds.sh OUTPUT_DIR QPS SEED...
set -x
cd /work/main
R=$1; QPS=$2; shift 2
mkdir -p $R
TM=.venv/bin/tokenmill
PREC=${PREC:-bf16}
SIM="--hardware this-machine --model smollm2-135m --precision $PREC --max-num-seqs 128 --max-num-batched-tokens 1024"
for SEED in "$@"; do
  $TM bench --scenario server --target-qps $QPS --workload synthetic --input-len 128 --output-len 128 \
    --length-dist fixed --min-duration 200 --min-query-count 240 --no-progress --no-plots --loadgen-seed $SEED \
    --output-dir $R/server-seed$SEED > $R/server-seed$SEED.txt 2>&1
  RESULTS=$(find $R/server-seed$SEED -name results.json | head -1)
  $TM sim $SIM --replay $RESULTS --no-enable-prefix-caching > $R/sim-server-seed$SEED-replay-nocache.txt 2>&1
  $TM sim $SIM --replay $RESULTS > $R/sim-server-seed$SEED-replay.txt 2>&1
  rm -f $(dirname $RESULTS)/mlperf_log_trace.json $(dirname $RESULTS)/mlperf_log_accuracy.json
done
echo done > $R/SEEDS_DONE
