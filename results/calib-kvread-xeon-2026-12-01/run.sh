#!/bin/bash
# The K/V read rate against the live uplift set and the three own-engine figures, all in one run
# (docs/SIMULATOR.md "Steps over long contexts"): the three engines calibrated once (with the decode over
# 1,024-token contexts that fits Efficiency.kv_read), then every simulation twice: on those profiles (kv/)
# and on the same profiles with kv_read taken out, the K/V read at the memory rate as before (mem/).
#   bash results/calib-kvread-xeon-2026-12-01/run.sh OUT      (about 35 minutes on a 2-core Xeon)
# live/ holds the `tokenmill bench --uplift` runs, own/ the Offline, SingleStream and Server runs.
set -ex
OUT=${1:?usage: run.sh OUT}
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/src:$PWD"
mkdir -p "$OUT/live" "$OUT/own" "$OUT/kv/sim" "$OUT/mem/sim"
export TOKENMILL_CACHE="$OUT/kv"
tokenmill sim calibrate > "$OUT/kv/calibrate-full.txt" 2>&1
tokenmill sim calibrate --profile kernels-eager --enforce-eager > "$OUT/kv/calibrate-kernels.txt" 2>&1
tokenmill sim calibrate --profile torch-eager --attention-backend torch --fused-ops torch --linear-backend torch \
    --enforce-eager > "$OUT/kv/calibrate-torch.txt" 2>&1
for p in this-machine kernels-eager torch-eager; do
    python - "$OUT/kv/sim/$p.json" "$OUT/mem/sim/$p.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["efficiency"]["kv_read"] = None
json.dump(d, open(sys.argv[2], "w"), indent=2)
PY
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
for name in kv mem; do
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
