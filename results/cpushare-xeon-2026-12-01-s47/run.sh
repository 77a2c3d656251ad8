#!/bin/bash
# The forty-sixth session's routing runs (results/kvroute-xeon-2026-12-01-s46/run.sh: a one-thread calibration,
# kv and round-robin over two one-thread Ray workers, one one-thread engine in the server's process, each
# replayed), again with the steps' CPU counter (engine_step_cpu_seconds_total) and the client's CPU seconds,
# which the bench now records: how much of each step the stepping thread spent on a core, and what the
# LoadGen client took. About 25 minutes on a 2-core Xeon:
#   PATH=.venv/bin:$PATH bash results/cpushare-xeon-2026-12-01-s47/run.sh OUT
set -x
OUT=${1:?usage: run.sh OUT}
bash $(dirname "$0")/../kvroute-xeon-2026-12-01-s46/run.sh "$OUT"
for r in round-robin kv inproc; do
  grep -E "engine steps|client CPU|output tokens/s" "$OUT/bench-$r.txt"
done
