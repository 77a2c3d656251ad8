#!/bin/bash
# The live uplift set beside the simulated one (docs/SIMULATOR.md "The uplift on our own engine, variant by
# variant"): calibrate the three engines, run the live Offline and SingleStream uplift, compare.
#   bash results/uplift-sim-xeon-2026-12-01/run.sh OUT      (about 25 minutes on a 2-core Xeon)
# Only the comparison, on the profiles and runs kept here:
#   TOKENMILL_CACHE=results/uplift-sim-xeon-2026-12-01 python -m benchmarks.sim_uplift_live \
#       results/uplift-sim-xeon-2026-12-01/uplift-offline
set -e
OUT=${1:?usage: run.sh OUT}
mkdir -p "$OUT"
export TOKENMILL_CACHE="$OUT"
T=tokenmill
$T sim calibrate > "$OUT/calibrate-full.txt" 2>&1
$T sim calibrate --profile kernels-eager --enforce-eager > "$OUT/calibrate-kernels.txt" 2>&1
$T sim calibrate --profile torch-eager --attention-backend torch --fused-ops torch --linear-backend torch \
    --enforce-eager > "$OUT/calibrate-torch.txt" 2>&1
$T bench --uplift --scenario offline --workload shared-prefix --min-duration 1 --min-query-count 128 \
    --output-dir "$OUT" --no-progress > "$OUT/offline.txt" 2>&1
$T bench --uplift --scenario singlestream --workload shared-prefix --min-duration 1 --min-query-count 64 \
    --output-dir "$OUT" --no-progress > "$OUT/singlestream.txt" 2>&1
for s in offline singlestream; do
    python -m benchmarks.sim_uplift_live "$OUT/uplift-$s" --json "$OUT/compare-$s.json" | tee "$OUT/compare-$s.md"
done
