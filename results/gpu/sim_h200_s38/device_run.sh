#!/bin/bash
# One device call (H200): FP8 GEMMs per shape, then the own-engine check of `tokenmill sim` on random weights
# in SmolLM2-135M's shape (calibrate, then Offline / SingleStream / Server measured with `tokenmill bench`; the
# simulations run afterwards on any machine, from the profile and results.json files packed into $OUT/r.tgz).
# Usage (repo root, wheels in .whl): bash results/gpu/sim_h200_s38/device_run.sh   [DEV=cpu SMALL=1 for a dry run]
set -u
G=results/gpu/sim_h200_s38
DEV=${DEV:-cuda}; SMALL=${SMALL:-0}; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
if [ -d .whl ] && [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 TOKENMILL_CACHE=/tmp/tmcache
PY=${PY:-python3}; TM="$PY -m tokenmill.cli"
R=/tmp/r; rm -rf $R; mkdir -p $R
T0=$(date +%s)
pack() { echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a $R/steps.txt; tar czf $OUT/r.tgz -C /tmp r; }
{ nvidia-smi -L; nproc; lscpu | grep "Model name"
  $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"; } > $R/machine.txt 2>&1
pack setup 0
timeout 240 $TM sim calibrate --device $DEV --dtype bfloat16 --model dummy:smollm2-135m > $R/calibrate.txt 2>&1
pack calibrate $?
cp $TOKENMILL_CACHE/sim/this-machine.json $R/
ENG="--model dummy:smollm2-135m --tokenizer $G/tok --device $DEV --dtype bfloat16 --workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots"
if [ "$SMALL" = 1 ]; then
  OFF="--num-samples 16 --min-duration 1"; SS="--min-duration 1 --min-query-count 3"; SV="--target-qps 1 --min-duration 5 --min-query-count 5"; SV2=""
else
  OFF="--num-samples 1024 --target-qps 100 --min-duration 10"; SS="--min-duration 10 --min-query-count 64"
  SV="--target-qps 30 --min-duration 30 --min-query-count 900"; SV2="--target-qps 100 --min-duration 20 --min-query-count 2000"
fi
timeout 150 $TM bench $ENG --scenario offline $OFF --output-dir $R/offline > $R/offline.txt 2>&1; pack offline $?
timeout 120 $TM bench $ENG --scenario singlestream $SS --output-dir $R/single > $R/single.txt 2>&1; pack single $?
timeout 150 $TM bench $ENG --scenario server $SV --output-dir $R/server30 > $R/server30.txt 2>&1; pack server30 $?
if [ "$DEV" = cuda ]; then
  timeout 120 $PY -m benchmarks.gpu_gemm_shapes --measure --json $R/gemms.json > $R/gemms.txt 2>&1; pack gemms $?
fi
if [ -n "$SV2" ]; then
  timeout 120 $TM bench $ENG --scenario server $SV2 --output-dir $R/server100 > $R/server100.txt 2>&1; pack server100 $?
fi
if [ "$DEV" = cuda ]; then
  TOKENMILL_TEST_TOKENIZER=$G/tok timeout 200 $PY -m pytest -q -x tests/test_cuda.py -p no:cacheprovider > $R/pytest_cuda.txt 2>&1; pack pytest_cuda $?
fi
