#!/bin/bash
# Device call 2 (H200): every engine step of the Offline and 30-QPS Server runs of device_run.sh kept
# (benchmarks.served_steps) and priced by call 1's calibrated profile (run1/r/this-machine.json).
set -u
G=results/gpu/sim_h200_s38
DEV=${DEV:-cuda}; SMALL=${SMALL:-0}; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
if [ -d .whl ] && [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 TOKENMILL_CACHE=/tmp/tmcache2
mkdir -p $TOKENMILL_CACHE/sim && cp $G/run1/r/this-machine.json $TOKENMILL_CACHE/sim/
PY=${PY:-python3}
R=/tmp/r2; rm -rf $R; mkdir -p $R
T0=$(date +%s)
pack() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a $R/steps.txt; tar czf $OUT/r2.tgz -C /tmp r2; }
ENG="--model dummy:smollm2-135m --tokenizer $G/tok --device $DEV --dtype bfloat16 --workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots"
if [ "$SMALL" = 1 ]; then OFF="--num-samples 16 --min-duration 1"; SV="--target-qps 1 --min-duration 5 --min-query-count 5"
else OFF="--num-samples 1024 --target-qps 100 --min-duration 10"; SV="--target-qps 30 --min-duration 30 --min-query-count 900"; fi
timeout 150 $PY -m benchmarks.served_steps --precision bf16 --steps-json $R/offline_steps.json -- $ENG --scenario offline $OFF \
  --output-dir $R/offline > $R/offline.txt 2>&1; pack offline $?
timeout 150 $PY -m benchmarks.served_steps --precision bf16 --steps-json $R/server30_steps.json -- $ENG --scenario server $SV \
  --output-dir $R/server30 > $R/server30.txt 2>&1; pack server30 $?
