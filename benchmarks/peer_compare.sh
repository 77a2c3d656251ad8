#!/usr/bin/env bash
# tokenmill serve vs llama.cpp's llama-server vs HF `transformers serve`: the
# same `tokenmill bench` workloads against each server, one server at a time
# (the others stopped, so they do not share the CPU), then side-by-side tables.
#
#   LLAMA_SERVER=/path/to/llama-server LLAMA_GGUF=/path/to/smollm2-f16.gguf \
#   HF_SERVE=/path/to/hf-venv/bin/transformers HF_MODEL_DIR=/path/to/smollm2-hf \
#   benchmarks/peer_compare.sh OUT_DIR
#
# Peers are installed outside this repository (see docs/PERFORMANCE.md for how
# they were built); leave a variable empty to skip that peer. Knobs (env):
# THREADS (2), OFFLINE_SAMPLES (64), SERVER_OUTPUT_LEN (64), PEAK_RUNS (5),
# PEAK_START_QPS (2), LLAMA_NP (32: llama-server's parallel slots, 512 tokens of
# context each), SKIP_TOKENMILL (0), SKIP_PEAK_LLAMA (0), SKIP_PEAK_HF (1: HF's
# peak search would take hours here).
set -euo pipefail
OUT=${1:?usage: benchmarks/peer_compare.sh OUT_DIR}
THREADS=${THREADS:-2}
OFFLINE_SAMPLES=${OFFLINE_SAMPLES:-64}
SERVER_OUTPUT_LEN=${SERVER_OUTPUT_LEN:-64}
PEAK_RUNS=${PEAK_RUNS:-5}
PEAK_START_QPS=${PEAK_START_QPS:-2}
SKIP_PEAK_HF=${SKIP_PEAK_HF:-1}
SKIP_PEAK_LLAMA=${SKIP_PEAK_LLAMA:-0}
SKIP_TOKENMILL=${SKIP_TOKENMILL:-0}
LLAMA_NP=${LLAMA_NP:-32}
TOKENMILL=${TOKENMILL:-tokenmill}
mkdir -p "$OUT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_healthy() {  # url pid
    for _ in $(seq 1 240); do
        if curl -sf "$1/health" >/dev/null 2>&1; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "server exited" >&2; return 1; }
        sleep 0.5
    done
    echo "server at $1 did not come up" >&2
    return 1
}

bench_target() {  # name url peak(0|1) extra-args...
    local name=$1 url=$2 peak=$3
    shift 3
    "$TOKENMILL" bench --url "$url" --scenario offline --num-samples "$OFFLINE_SAMPLES" \
        --output-dir "$OUT/offline-$name" --no-progress "$@" | tee "$OUT/offline-$name.txt"
    if [ "$peak" = 1 ]; then
        "$TOKENMILL" bench --url "$url" --scenario server --find-peak --target-qps "$PEAK_START_QPS" \
            --peak-max-runs "$PEAK_RUNS" --peak-tolerance 0.1 --output-len "$SERVER_OUTPUT_LEN" \
            --output-dir "$OUT/server-$name" --no-progress "$@" | tee "$OUT/server-$name.txt"
    fi
}

run_server() {  # name peak log bench-extra-json -- command...
    local name=$1 peak=$2 extra=$3
    shift 4
    local port
    port=$(free_port)
    local cmd=("${@//\{PORT\}/$port}")
    "${cmd[@]}" >"$OUT/$name-server.log" 2>&1 &
    local pid=$!
    trap 'kill $pid 2>/dev/null || true' EXIT
    wait_healthy "http://127.0.0.1:$port" "$pid"
    if [ -n "$extra" ]; then
        bench_target "$name" "http://127.0.0.1:$port" "$peak" --extra-body "$extra" --served-model-name "$HF_MODEL_DIR"
    else
        bench_target "$name" "http://127.0.0.1:$port" "$peak"
    fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
    trap - EXIT
}

if [ "$SKIP_TOKENMILL" != 1 ]; then
    run_server tokenmill 1 "" -- "$TOKENMILL" serve --port "{PORT}" --num-threads "$THREADS"
fi
if [ -n "${LLAMA_SERVER:-}" ]; then
    llama_peak=$([ "$SKIP_PEAK_LLAMA" = 1 ] && echo 0 || echo 1)
    run_server llama.cpp "$llama_peak" "" -- "$LLAMA_SERVER" -m "$LLAMA_GGUF" --host 127.0.0.1 --port "{PORT}" \
        -t "$THREADS" -np "$LLAMA_NP" -c $((LLAMA_NP * 512))
fi
if [ -n "${HF_SERVE:-}" ]; then
    hf_peak=$([ "$SKIP_PEAK_HF" = 1 ] && echo 0 || echo 1)
    mkdir -p "$OUT/hf-cache"
    OMP_NUM_THREADS=$THREADS HF_HUB_OFFLINE=1 HF_HUB_CACHE="$OUT/hf-cache" \
        run_server transformers "$hf_peak" \
        '{"ignore_eos": null, "generation_config": "{\"eos_token_id\": -1}"}' -- \
        "$HF_SERVE" serve "$HF_MODEL_DIR" --continuous-batching --host 127.0.0.1 --port "{PORT}"
fi

offline=("$OUT"/offline-*/offline-*)
"$TOKENMILL" bench --compare "${offline[@]}" --output-dir "$OUT/compare-offline" | tee "$OUT/compare-offline.txt"
