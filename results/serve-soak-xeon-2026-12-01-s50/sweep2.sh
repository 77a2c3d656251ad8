#!/bin/bash
source <(sed -n "6,23p" results/serve-soak-xeon-2026-12-01-s50/sweep.sh)
run disagg-all-remote-sp "--prefill-workers 1 --decode-workers 1 --disagg-min-prefill-tokens 0 --disagg-max-prefill-queue 64" --api completions --workload shared-prefix
run multiturn-workers2 "--workers 2 --router kv" --workload multi-turn
run deterministic-chat "--deterministic" --workload synthetic --input-len 96 --output-len 48 --length-dist uniform --num-samples 64
echo ALLDONE
