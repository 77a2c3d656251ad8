#!/bin/bash
# Served decode steps of 4 sequences over ~1,024-1,088 tokens against sim calibrate's LONG_DECODE (4 over 1,024):
# served_decode.py against a one-thread server (4 requests, none waiting, and 16, up to 12 waiting; plain and
# streamed), then core_decode.py on the engine alone (4, 16, 16 with sorted blocks, twice). About 20 minutes on a
# 2-core Xeon:
#   PATH=.venv/bin:$PATH bash results/cpushare-xeon-2026-12-01-s47/decode_steps.sh OUT
set -x
OUT=${1:?usage: decode_steps.sh OUT}
HERE=$(dirname "$0")
mkdir -p "$OUT"
tokenmill serve --port 8810 --num-threads 1 --num-kv-blocks 800 --max-num-seqs 4 > $OUT/serve.txt 2>&1 &
SERVER=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8810/health > /dev/null && break; sleep 2; done
for n in 4 16; do for mode in plain stream; do
  echo "== served, $n requests, $mode"; python $HERE/served_decode.py http://127.0.0.1:8810 $n $mode
done; done | tee $OUT/served-decode.txt
kill $SERVER; wait $SERVER
for args in 4 16 "16 sorted" 16 "16 sorted"; do
  echo "== engine alone, $args"; PYTHONPATH=src python $HERE/core_decode.py $args 2>&1 | tr '\r' '\n' | grep requests
done | tee $OUT/core-decode.txt
