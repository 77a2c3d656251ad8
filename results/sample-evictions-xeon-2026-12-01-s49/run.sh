#!/bin/bash
# A repeated sample's prompt hit up front and never evicted (the code before the change: OLD_SRC, the src/ of a
# checkout of 8b7e0e0) against what the simulated cache still holds of it (this checkout), on the profile kept
# here (profile/sim/this-machine.json: the session's second calibration, 20:14): the session's four measured
# Server runs replayed, and 20 Poisson draws at 2.4 QPS of 460 queries over 256 samples. About 15 seconds:
#   bash results/sample-evictions-xeon-2026-12-01-s49/run.sh OLD_SRC OUT
set -x
OLD=${1:?usage: run.sh OLD_SRC OUT}
R=${2:?usage: run.sh OLD_SRC OUT}
HERE=$(dirname $(readlink -f $0))
mkdir -p $R
PY=/work/main/.venv/bin/python
export TOKENMILL_CACHE=$HERE/profile
SIM="--hardware this-machine --model smollm2-135m --precision bf16 --max-num-seqs 128 --max-num-batched-tokens 1024"
S49=/work/main/results
RUNS="$S49/served-steps-xeon-2026-12-01-s49/out/server-qps1 $S49/served-steps-xeon-2026-12-01-s49/out/server-qps2.4
      $S49/loadgen-cost-xeon-2026-12-01-s49/out/bench1 $S49/loadgen-cost-xeon-2026-12-01-s49/out/bench2"
for V in old new; do
  SRC=$([ $V = old ] && echo $OLD || echo /work/main/src)
  for RUN in $RUNS; do
    NAME=$(basename $RUN)
    PYTHONPATH=$SRC $PY -m tokenmill.cli sim $SIM --replay $RUN/server-tokenmill-engine > $R/replay-$NAME-$V.txt 2>/dev/null
  done
  PYTHONPATH=$SRC $PY -m tokenmill.cli sim $SIM --scenario server --isl 128 --osl 128 --num-samples 256 \
    --preset smollm2-cpu --target-qps 2.4 --num-requests 460 --draws 20 --jobs 2 > $R/draws-qps2.4-$V.txt 2>/dev/null
done
echo done > $R/DONE
