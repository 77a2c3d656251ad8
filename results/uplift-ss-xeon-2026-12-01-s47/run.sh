#!/bin/bash
# The live SingleStream uplift again, between calibrations and checks (docs/SIMULATOR.md "The steps' time on a
# core"): the three engines calibrated, `tokenmill bench --uplift --scenario singlestream`, then each profile
# checked (`sim calibrate --check`) and the variants simulated. About 25 minutes on a 2-core Xeon:
#   bash results/uplift-ss-xeon-2026-12-01-s47/run.sh OUT
set -ex
OUT=${1:?usage: run.sh OUT}
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/src:$PWD"
mkdir -p "$OUT/live"
export TOKENMILL_CACHE="$OUT"
KERNELS="--enforce-eager"
TORCH="--attention-backend torch --fused-ops torch --linear-backend torch --enforce-eager"
tokenmill sim calibrate > "$OUT/calibrate-full.txt" 2>&1
tokenmill sim calibrate --profile kernels-eager $KERNELS > "$OUT/calibrate-kernels.txt" 2>&1
tokenmill sim calibrate --profile torch-eager $TORCH > "$OUT/calibrate-torch.txt" 2>&1
date
tokenmill bench --uplift --scenario singlestream --workload shared-prefix --min-duration 1 --min-query-count 64 \
    --output-dir "$OUT/live" --no-progress > "$OUT/live/singlestream.txt" 2>&1
date
tokenmill sim calibrate --check > "$OUT/check-full.txt" 2>&1
tokenmill sim calibrate --check --profile kernels-eager $KERNELS > "$OUT/check-kernels.txt" 2>&1
tokenmill sim calibrate --check --profile torch-eager $TORCH > "$OUT/check-torch.txt" 2>&1
python -m benchmarks.sim_uplift_live "$OUT/live/uplift-singlestream" --json "$OUT/compare-singlestream.json" \
    > "$OUT/compare-singlestream.md"
echo done > "$OUT/DONE"
