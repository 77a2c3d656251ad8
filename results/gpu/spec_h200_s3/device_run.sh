# device call 2: the GGUF whole, then Interactive at 15 QPS: ngram, plain, ngram without the GC freeze
set -u
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
M=${M:-/tmp/m}; DEV=${DEV:-cuda}; N=${N:-1500}; QPS=${QPS:-15}; OUT=${OUT:-/tmp/out}; T=${T:-200}
cat $M/gguf.part00 .gpu/b/gguf.part01 > $M/smollm2.gguf
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M/smollm2.gguf" | sha256sum -c || exit 1
COMMON="--model $M/smollm2.gguf --device $DEV --dtype bfloat16 --scenario interactive --workload jsonl --dataset $M/grounded.jsonl --tpot-ms 2.8 --ttft-ms 200 --min-duration 5 --min-query-count $N --target-qps $QPS --no-plots --no-progress"
NG='{"method": "ngram", "num_speculative_tokens": 4}'
run() {
  name=$1; shift
  timeout $T ${PY:-python3} -m benchmarks.serving_stalls --json $OUT/$name.json "$@" > /tmp/$name.full.log 2>&1
  echo "$name rc=$?"
  tr '\r' '\n' < /tmp/$name.full.log | grep -v -E "Loading|Capturing|Compiling" | tail -90 > $OUT/$name.log
  grep -E "TPOT Early|percentile time to output|Result is|GC pauses|steps, median" $OUT/$name.log | head -20
}
run ngram -- $COMMON --output-dir /tmp/r/ngram --speculative-config "$NG"
run plain -- $COMMON --output-dir /tmp/r/plain
run ngram_nofreeze --no-gc-freeze -- $COMMON --output-dir /tmp/r/ngram_nf --speculative-config "$NG"
