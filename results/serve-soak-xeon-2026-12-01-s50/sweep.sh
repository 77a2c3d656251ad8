#!/bin/bash
# Each serving configuration under a LoadGen Server run with sample repeats (1.5 QPS, 90 queries); report
# failed queries. About 20 minutes on a 2-core Xeon (fiftieth session, after the empty-payload fix):
#   bash results/serve-soak-xeon-2026-12-01-s50/sweep.sh; bash results/serve-soak-xeon-2026-12-01-s50/sweep2.sh
# Three runs here stopped on flags refused with a clear error (--num-samples with the shared-prefix and
# multi-turn workloads; --deterministic with int4); sweep2.sh runs them again with flags that apply.
TM=/work/main/.venv/bin/tokenmill
PORT=8131
OUT=${OUT:-/tmp/soak/out}
mkdir -p $OUT
run() {
  NAME=$1; shift; SERVE="$1"; shift; BENCH="$*"
  mkdir -p $OUT/$NAME
  $TM serve --port $PORT $SERVE > $OUT/$NAME/serve.log 2>&1 &
  S=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; sleep 1; done
  timeout 600 $TM bench --url http://127.0.0.1:$PORT --scenario server --target-qps 1.5 --min-duration 30 \
    --min-query-count 90 --no-progress --no-plots --output-dir $OUT/$NAME/run $BENCH > $OUT/$NAME/bench.txt 2>&1
  curl -s http://127.0.0.1:$PORT/v1/workers > $OUT/$NAME/workers.json 2>/dev/null
  kill -TERM $S; wait $S
  /work/main/.venv/bin/ray stop --force > /dev/null 2>&1
  echo "$NAME: $(tr '\r' '\n' < $OUT/$NAME/bench.txt | grep -E '^  queries|^  errors' | tr -s ' ' | tr '\n' ' ')"
}
SYN="--workload synthetic --input-len 96 --output-len 48 --length-dist uniform --num-samples 64"
run ngram-chat "--speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4}" $SYN
run selfint4-compl "--speculative-config {\"method\":\"self-int4\",\"num_speculative_tokens\":3}" --api completions $SYN
run disagg-default-chat "--prefill-workers 1 --decode-workers 1" $SYN
run disagg-all-remote-compl "--prefill-workers 1 --decode-workers 1 --disagg-min-prefill-tokens 0 --disagg-max-prefill-queue 64" --api completions --workload shared-prefix --num-samples 64
run workers2-ngram "--workers 2 --speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4}" $SYN
run deterministic-int4 "--deterministic --quantization int4" $SYN
run disagg-ngram "--prefill-workers 1 --decode-workers 1 --disagg-min-prefill-tokens 0 --speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4}" --api completions $SYN
run multiturn-workers2 "--workers 2 --router kv" --workload multi-turn --num-samples 64
echo ALLDONE
