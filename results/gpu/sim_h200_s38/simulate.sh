#!/bin/bash
# The simulator's side of the H200 own-engine check, on any machine: `tokenmill sim` on the H200 profile that
# device_run.sh's calibration wrote (run1/r/this-machine.json), for each measured run; writes sim-*.txt here.
# Usage (repo root): bash results/gpu/sim_h200_s38/simulate.sh
set -eu
G=results/gpu/sim_h200_s38
export TOKENMILL_CACHE=$(mktemp -d)
mkdir -p $TOKENMILL_CACHE/sim && cp $G/run1/r/this-machine.json $TOKENMILL_CACHE/sim/
TM=${TM:-.venv/bin/tokenmill}
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
$TM sim $SIM --isl 128 --osl 128 --scenario offline --num-requests 1100 > $G/sim-offline.txt
$TM sim $SIM --replay $G/run1/r/offline/offline-tokenmill-engine/results.json > $G/sim-offline-replay.txt
$TM sim $SIM --isl 128 --osl 128 --scenario singlestream > $G/sim-single.txt
$TM sim $SIM --isl 128 --osl 128 --scenario server --target-qps 30 --num-requests 900 --num-samples 256 > $G/sim-server30.txt
for run in run1/r run2/r2; do
  R=$G/$run/server30/server-tokenmill-engine/results.json; tag=$(dirname $run)
  $TM sim $SIM --replay $R --no-enable-prefix-caching > $G/sim-server30-$tag-replay-nocache.txt
  $TM sim $SIM --replay $R > $G/sim-server30-$tag-replay.txt
done
$TM sim $SIM --isl 128 --osl 128 --scenario server --target-qps 100 --num-requests 2000 --num-samples 256 > $G/sim-server100.txt
$TM sim $SIM --replay $G/run1/r/server100/server-tokenmill-engine/results.json > $G/sim-server100-replay.txt
# The project's earlier GPU runs that ran without drafts: the 2026-11-27 Interactive runs at 15 QPS (the embedded
# GGUF's weights, the engine of that day; results/gpu/spec_h200_s3), replayed on this profile, and their engine
# steps priced by it (benchmarks.served_steps --from-json).
for name in plain plain_rep; do
  PY=${PY:-.venv/bin/python}
  $PY -c "import gzip, json, sys; d = json.load(gzip.open(sys.argv[1])); json.dump(d['result'], open(sys.argv[2], 'w'));
json.dump([[s[2], s[3], s[1], s[0]] for s in d['steps']], open(sys.argv[3], 'w'))" \
    results/gpu/spec_h200_s3/$name.json.gz $TOKENMILL_CACHE/$name.json $TOKENMILL_CACHE/${name}_steps.json
  $TM sim $SIM --replay $TOKENMILL_CACHE/$name.json > $G/sim-interactive-s3-$name-replay.txt
  PYTHONPATH=src:. $PY -m benchmarks.served_steps --from-json $TOKENMILL_CACHE/${name}_steps.json --precision bf16 \
    --context 120 > $G/sim-interactive-s3-$name-steps.txt
done
rm -rf $TOKENMILL_CACHE
