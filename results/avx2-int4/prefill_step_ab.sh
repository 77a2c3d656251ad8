cd /work/main
for round in 1 2; do
 for tree in old new; do
  if [ $tree = old ]; then P=/tmp/old/src:/tmp/old; else P=/work/main/src:/work/main; fi
  for q in "" "--quantization int8" "--quantization int4"; do
   r=$(PYTHONPATH=$P .venv/bin/python -m benchmarks.prefill_step --tokens 512 $q 2>&1 | tail -1 | tr '\r' '\n' | tail -1)
   echo "round $round $tree [$q]: $r"
  done
 done
done
