#!/bin/bash
# alternated A/B: old tree (dd09f15) vs new, decode_step
cd /work/main
for round in 1 2; do
 for tree in old new; do
  if [ $tree = old ]; then P=/tmp/old/src:/tmp/old; else P=/work/main/src:/work/main; fi
  for cfg in "1 int8" "1 int4" "4 int8" "4 int4" "32 int8" "32 int4"; do
   set -- $cfg
   r=$(PYTHONPATH=$P .venv/bin/python -m benchmarks.decode_step --threads 2 --batch $1 --quantization $2 2>&1 | tail -1 | tr '\r' '\n' | tail -1 | grep -o "step [0-9.]* ms")
   echo "round $round $tree batch $1 $2: $r"
  done
 done
done
