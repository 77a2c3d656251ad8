"""Fault run: SIGKILL one engine worker half-way through a LoadGen run against a cluster server.

    tokenmill serve --port 8802 --workers 2 --router kv &
    python -m benchmarks.cluster_fault --url http://127.0.0.1:8802 --output-dir /tmp/fault -- \\
        --scenario server --target-qps 2 --workload synthetic --num-samples 256 --min-query-count 256

Runs ``tokenmill bench --url URL --output-dir DIR <bench args after -->`` and
watches the server: once ``--kill-after`` requests have completed (the
server's e2e-latency histogram count; default half of --min-query-count), it
SIGKILLs the worker with the most running requests (its pid from GET
/v1/workers; the worker must run on this machine). Then it prints LoadGen's
verdict, the errors, the server's migration count, and TTFT/TPOT of the
queries that were in flight at the kill (the migrated ones are among them)
next to the others'. The server's own log names each migrated request
("moved to worker-N after K tokens").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tokenmill.bench.results import load_result


def completed_requests(url: str) -> float:
    """Generation requests the server has finished (its e2e-latency histogram count)."""
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("tokenmill:e2e_request_latency_seconds_count"):
            return float(line.rpartition(" ")[2])
    raise RuntimeError(f"{url}/metrics has no tokenmill:e2e_request_latency_seconds_count")


def migrations(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("tokenmill:migrations_total"):
            return float(line.rpartition(" ")[2])
    return 0.0


def busiest_worker(url: str) -> dict:
    workers = [w for w in httpx.get(f"{url}/v1/workers", timeout=10).json()["data"] if w["alive"]]
    if len(workers) < 2:
        raise RuntimeError(f"{url} has {len(workers)} live workers: a fault run needs at least 2")
    return max(workers, key=lambda w: (w["load"] or {}).get("running", 0))


def kill_when(url: str, after: int, stop: threading.Event, killed: dict) -> None:
    base = completed_requests(url)
    while not stop.wait(0.1):
        if completed_requests(url) - base >= after:
            victim = busiest_worker(url)
            os.kill(victim["pid"], signal.SIGKILL)
            killed.update(victim, t_unix=time.time())
            print(f"killed {victim['id']} (pid {victim['pid']}, {victim['load']}) after {after} requests",
                  flush=True)
            return


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
    return f"p50 {statistics.median(values) * 1e3:,.0f} ms, p99 {p99 * 1e3:,.0f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the cluster server (tokenmill serve --workers N)")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--kill-after", type=int, default=None,
                    help="completed requests before the kill (default: half of --min-query-count)")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then tokenmill bench arguments")
    args = ap.parse_args(argv)
    bench_args = [a for a in args.bench_args if a != "--"]
    after = args.kill_after
    if after is None:
        if "--min-query-count" not in bench_args:
            ap.error("give --kill-after, or --min-query-count among the bench arguments")
        after = int(bench_args[bench_args.index("--min-query-count") + 1]) // 2
    migrations_before = migrations(args.url)
    stop, killed = threading.Event(), {}
    watcher = threading.Thread(target=kill_when, args=(args.url, after, stop, killed), daemon=True)
    watcher.start()
    command = [sys.executable, "-m", "tokenmill.cli", "bench", "--url", args.url, "--output-dir", args.output_dir,
               "--no-progress", *bench_args]
    rc = subprocess.call(command)
    stop.set()
    watcher.join()
    if rc != 0:
        print(f"tokenmill bench exited with {rc}", file=sys.stderr)
        return rc
    if not killed:
        print(f"no worker was killed: fewer than {after} requests completed", file=sys.stderr)
        return 1
    result = load_result(next(Path(args.output_dir).glob("*/results.json")))
    kill_s = killed["t_unix"] - result.t0_unix
    ok = [q for q in result.queries if q.ok]
    in_flight = [q for q in ok if q.issued_s <= kill_s < q.finished_s]
    others = [q for q in ok if not q.issued_s <= kill_s < q.finished_s]
    summary = {
        "verdict": result.verdict.result,
        "queries": len(result.queries),
        "errors": result.metrics.num_errors,
        "migrations": migrations(args.url) - migrations_before,
        "killed": {"worker": killed["id"], "pid": killed["pid"], "at_s": round(kill_s, 2)},
        "in_flight_at_kill": {"n": len(in_flight), "ttft": ms([q.ttft_s for q in in_flight]),
                              "tpot": ms([q.tpot_s for q in in_flight if q.tpot_s is not None])},
        "others": {"n": len(others), "ttft": ms([q.ttft_s for q in others]),
                   "tpot": ms([q.tpot_s for q in others if q.tpot_s is not None])},
        "tokens_per_s": round(result.metrics.tokens_per_s, 1),
    }
    print(json.dumps(summary, indent=1))
    Path(args.output_dir, "fault.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
