#!/bin/bash
# Own-engine sim check on this machine: calibrate, then measure Offline / SingleStream, then simulate.
# Usage: [PREC=fp32] bash results/sim-own-xeon/run.sh [OUTPUT_DIR]   (default results/sim-own-xeon)
set -x
cd /work/main
R=${1:-results/sim-own-xeon}
mkdir -p $R
TM=.venv/bin/tokenmill
PREC=${PREC:-bf16}  # the engine's dtype on this CPU (fp32 where it has no bf16, e.g. AMD Zen 3)
$TM sim calibrate > $R/calibrate.txt 2>&1
COMMON="--workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots"
$TM bench $COMMON --scenario offline --num-samples 256 --output-dir $R/offline > $R/offline.txt 2>&1
$TM bench $COMMON --scenario singlestream --min-duration 60 --min-query-count 10 --output-dir $R/single > $R/single.txt 2>&1
SIM="--hardware this-machine --model smollm2-135m --precision $PREC --isl 128 --osl 128 --max-num-seqs 128 --max-num-batched-tokens 1024"
$TM sim $SIM --scenario offline --num-requests 256 > $R/sim-offline.txt 2>&1
$TM sim $SIM --scenario singlestream > $R/sim-single.txt 2>&1
$TM sim --replay $R/offline/offline-tokenmill-engine/results.json --hardware this-machine --model smollm2-135m --precision $PREC --max-num-seqs 128 --max-num-batched-tokens 1024 > $R/replay-offline.txt 2>&1
echo done > $R/DONE
