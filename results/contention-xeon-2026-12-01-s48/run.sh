#!/bin/bash
# contend.py at 2 threads beside 5%, 10% and 20% of a core in 1-ms slices, and 10% in 10-ms slices; at 1 thread
# beside 10% in 1-ms slices. About 6 minutes on a 2-core Xeon:
#   bash results/contention-xeon-2026-12-01-s48/run.sh OUT
R=${1:?usage: run.sh OUT}
HERE=$(dirname "$0")
mkdir -p $R
for args in "2 0.05 1" "2 0.1 1" "2 0.2 1" "2 0.1 10" "1 0.1 1"; do
  echo "== threads / duty / slice ms: $args"
  PYTHONPATH=/work/main/src /work/main/.venv/bin/python $HERE/contend.py $args 2>&1 | tr "\r" "\n" | grep "^threads"
done | tee $R/contend.txt
