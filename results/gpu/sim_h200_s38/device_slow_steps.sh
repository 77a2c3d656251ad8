#!/bin/bash
# Device call 3 (H200): why some Offline steps with a prompt chunk take 100-230 ms (run2): the same Offline run
# (512 samples) with dynamo's recompiles logged, then with the fused ops uncompiled (--fused-ops torch).
set -u
G=results/gpu/sim_h200_s38
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 TOKENMILL_CACHE=/tmp/tmcache3
mkdir -p $TOKENMILL_CACHE/sim && cp $G/run1/r/this-machine.json $TOKENMILL_CACHE/sim/
R=/tmp/r3; rm -rf $R; mkdir -p $R
T0=$(date +%s)
pack() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a $R/steps.txt; tar czf $OUT/r3.tgz -C /tmp r3; }
ENG="--model dummy:smollm2-135m --tokenizer $G/tok --device cuda --dtype bfloat16 --workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots --scenario offline --num-samples 512 --target-qps 100 --min-duration 5"
TORCH_LOGS=recompiles,graph_breaks timeout 90 python3 -m benchmarks.served_steps --precision bf16 --steps-json $R/compiled_steps.json -- $ENG \
  --output-dir $R/compiled > $R/compiled.txt 2>&1; pack compiled $?
timeout 90 python3 -m benchmarks.served_steps --precision bf16 --steps-json $R/torchops_steps.json -- $ENG --fused-ops torch \
  --output-dir $R/torchops > $R/torchops.txt 2>&1; pack torchops $?
