#!/bin/bash
# The out-counters run replayed on its own profile (kept beside it) with every prompt sent to the prefill pool,
# and with the cluster's rule (--disagg-min-prefill-tokens 0: the run's own flag; repeats its decode worker
# caches whole stay there). Seconds:
#   bash results/disagg-steps-xeon-2026-12-01-s50/replay-rule.sh OUT
set -x
OUT=${1:?usage: replay-rule.sh OUT}
R=results/disagg-steps-xeon-2026-12-01-s50/out-counters
mkdir -p $OUT/cache/sim && cp $R/worker-1t.json $OUT/cache/sim/
SIM="--hardware worker-1t --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024
     --disagg 1:1 --replay $R/run/server-127.0.0.1_8125 --step-log $R/steps.jsonl.prefill-0 $R/steps.jsonl.decode-0"
TOKENMILL_CACHE=$OUT/cache .venv/bin/tokenmill sim $SIM > $OUT/replay-sent.txt 2>&1
TOKENMILL_CACHE=$OUT/cache .venv/bin/tokenmill sim $SIM --disagg-min-prefill-tokens 0 > $OUT/replay-rule.txt 2>&1
