#!/bin/bash
# Own-engine Server-scenario check on this machine: a measured `tokenmill bench --scenario server`
# run (1 QPS unless a second argument says otherwise), then the simulator three ways (a Poisson draw;
# the run's own arrivals replayed without and with prefix hits). Run after run.sh (it needs the calibrated this-machine profile).
# Usage: [PREC=fp32] bash results/sim-own-xeon/server.sh [OUTPUT_DIR [QPS]]   (default results/sim-own-xeon, 1)
set -x
cd /work/main
R=${1:-results/sim-own-xeon}
QPS=${2:-1}
mkdir -p $R
TM=.venv/bin/tokenmill
PREC=${PREC:-bf16}  # the engine's dtype on this CPU (fp32 where it has no bf16, e.g. AMD Zen 3)
$TM bench --scenario server --target-qps $QPS --workload synthetic --input-len 128 --output-len 128 \
  --length-dist fixed --min-duration 200 --min-query-count 240 --no-progress --no-plots \
  --output-dir $R/server > $R/server.txt 2>&1
SIM="--hardware this-machine --model smollm2-135m --precision $PREC --max-num-seqs 128 --max-num-batched-tokens 1024"
RESULTS=$(find $R/server -name results.json | head -1)
$TM sim $SIM --scenario server --target-qps $QPS --isl 128 --osl 128 --num-requests 240 > $R/sim-server-poisson.txt 2>&1
$TM sim $SIM --replay $RESULTS --no-enable-prefix-caching > $R/sim-server-replay-nocache.txt 2>&1
$TM sim $SIM --replay $RESULTS > $R/sim-server-replay.txt 2>&1
echo done > $R/SERVER_DONE
