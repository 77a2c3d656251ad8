#!/bin/bash
# Calibration with and without a 1,024-token prefill, against the live uplift set and the three own-engine
# figures, all in one run (docs/SIMULATOR.md "A 1,024-token prefill in the calibration"):
#   bash results/calib-1k-xeon-2026-12-01/run.sh OUT      (about 50 minutes on a 2-core Xeon)
# p2/ holds the profiles timed on prefills of 64 and 256 tokens, p3/ those with 1,024 too; live/ the
# `tokenmill bench --uplift` runs, own/ the Offline, SingleStream and Server runs; sim-*/compare-* the simulations.
set -ex
OUT=${1:?usage: run.sh OUT}
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/src:$PWD"
mkdir -p "$OUT/live" "$OUT/own"
for set in p2:64,256 p3:64,256,1024; do
    name=${set%%:*} lengths=${set#*:}
    export TOKENMILL_CACHE="$OUT/$name"
    mkdir -p "$TOKENMILL_CACHE"
    tokenmill sim calibrate --prefill-tokens "$lengths" > "$OUT/$name/calibrate-full.txt" 2>&1
    tokenmill sim calibrate --prefill-tokens "$lengths" --profile kernels-eager --enforce-eager \
        > "$OUT/$name/calibrate-kernels.txt" 2>&1
    tokenmill sim calibrate --prefill-tokens "$lengths" --profile torch-eager --attention-backend torch \
        --fused-ops torch --linear-backend torch --enforce-eager > "$OUT/$name/calibrate-torch.txt" 2>&1
done
unset TOKENMILL_CACHE
tokenmill bench --uplift --scenario offline --workload shared-prefix --min-duration 1 --min-query-count 128 \
    --output-dir "$OUT/live" --no-progress > "$OUT/live/offline.txt" 2>&1
tokenmill bench --uplift --scenario singlestream --workload shared-prefix --min-duration 1 --min-query-count 64 \
    --output-dir "$OUT/live" --no-progress > "$OUT/live/singlestream.txt" 2>&1
COMMON="--workload synthetic --input-len 128 --output-len 128 --length-dist fixed --no-progress --no-plots"
tokenmill bench $COMMON --scenario offline --num-samples 256 --output-dir "$OUT/own/offline" > "$OUT/own/offline.txt" 2>&1
tokenmill bench $COMMON --scenario singlestream --min-duration 60 --min-query-count 10 --output-dir "$OUT/own/single" \
    > "$OUT/own/single.txt" 2>&1
tokenmill bench $COMMON --scenario server --target-qps 1 --min-duration 200 --min-query-count 240 \
    --output-dir "$OUT/own/server" > "$OUT/own/server.txt" 2>&1
SERVER=$(find "$OUT/own/server" -name results.json | head -1)
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
for name in p2 p3; do
    export TOKENMILL_CACHE="$OUT/$name"
    for s in offline singlestream; do
        python -m benchmarks.sim_uplift_live "$OUT/live/uplift-$s" --json "$OUT/$name/compare-$s.json" \
            > "$OUT/$name/compare-$s.md"
    done
    tokenmill sim $SIM --isl 128 --osl 128 --scenario offline --num-requests 256 > "$OUT/$name/sim-offline.txt" 2>&1
    tokenmill sim $SIM --isl 128 --osl 128 --scenario singlestream > "$OUT/$name/sim-single.txt" 2>&1
    tokenmill sim $SIM --isl 128 --osl 128 --scenario server --target-qps 1 --num-requests 240 \
        > "$OUT/$name/sim-server-poisson.txt" 2>&1
    tokenmill sim $SIM --replay "$SERVER" > "$OUT/$name/sim-server-replay.txt" 2>&1
done
echo done > "$OUT/DONE"
