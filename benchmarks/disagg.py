"""Disaggregated vs aggregated serving on this machine, same workload, same run.

    python -m benchmarks.disagg --qps 0.2,0.4,0.6 --tpot-ms 100 --ttft-ms 20000

1. Writes a mixed workload (JSON Lines of completions requests): short prompts
   (``--short-len`` tokens) with some long ones (``--long-len``) mixed in, all
   asking for ``--output-len`` tokens: long prefills arriving into a decoding load.
2. Starts ``tokenmill serve --workers 2`` (aggregated: each worker prefills in
   chunks of ``--max-num-batched-tokens`` between its decode steps), runs a
   Server-scenario sweep over ``--qps`` with ``tokenmill bench``, stops it.
3. Starts ``tokenmill serve --prefill-workers 1 --decode-workers 1`` and runs
   the same sweep; reads its KV-transfer figures from /v1/workers. The system
   ``disaggregated-nice`` is the same server with its prefill worker at
   ``--prefill-worker-nice`` (decode steps and the server take a shared core first).
   One server at a time; every worker gets one core (``--worker-num-cpus 1``);
   prefix caching off on both unless ``--prefix-caching``.
4. Measures this machine's memory copy rate (numpy, a 256 MiB copy) for the
   transfer bandwidth to be read against.
5. Prints one table (offered QPS -> p99 TPOT, p99 TTFT, LoadGen's verdict for
   each) and each system's peak VALID QPS (the highest swept QPS LoadGen judged
   VALID), and writes them with the raw figures to ``--output-dir``/summary.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.peers_servers import Launch, console_script, running_server
from tokenmill.bench.results import load_result

SYSTEMS = ("aggregated", "disaggregated", "disaggregated-nice")
DEFAULT_SYSTEMS = "aggregated,disaggregated"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qps", default="0.2,0.4,0.6", help="offered loads of the Server sweep, comma-separated")
    ap.add_argument("--tpot-ms", type=float, default=100.0, help="p99 TPOT limit LoadGen judges against")
    ap.add_argument("--ttft-ms", type=float, default=20000.0, help="p99 TTFT limit LoadGen judges against")
    ap.add_argument("--num-samples", type=int, default=64, help="requests in the workload")
    ap.add_argument("--long-fraction", type=float, default=0.25, help="share of long prompts")
    ap.add_argument("--short-len", type=int, default=64, help="short prompts' tokens (+-25%%)")
    ap.add_argument("--long-len", type=int, default=1024, help="long prompts' tokens (+-25%%)")
    ap.add_argument("--output-len", type=int, default=64, help="max_tokens of every request")
    ap.add_argument("--min-duration", type=float, default=60.0, help="seconds each LoadGen run lasts at least")
    ap.add_argument("--min-query-count", type=int, default=24, help="queries each LoadGen run issues at least")
    ap.add_argument("--max-num-batched-tokens", type=int, default=256,
                    help="every worker's step token budget (the aggregated workers' prefill chunk)")
    ap.add_argument("--disagg-min-prefill-tokens", type=int, default=256,
                    help="the disaggregated server's rule: shorter uncached prompts stay on the decode worker")
    ap.add_argument("--disagg-max-prefill-queue", type=int, default=4,
                    help="the disaggregated server's rule: prefills in flight per prefill worker at which new "
                         "prompts stay on the decode worker")
    ap.add_argument("--prefix-caching", action="store_true",
                    help="leave prefix caching on (default off on both servers: LoadGen repeats samples within "
                         "and across runs, and a repeated long prompt served from cache is not the long "
                         "prefill this benchmark is about)")
    ap.add_argument("--prefill-worker-nice", type=int, default=19,
                    help="the nice value of the disaggregated-nice system's prefill worker")
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS,
                    help=f"which servers to run, in order, from {', '.join(SYSTEMS)}")
    ap.add_argument("--output-dir", default="bench-results/disagg", help="workload, logs, results, summary")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def write_workload(path: Path, opts: argparse.Namespace) -> dict:
    """The mixed JSONL workload; returns its shape (counts and mean lengths in tokens)."""
    from tokenmill.bench.workloads.synthetic import SyntheticSpec, build_synthetic
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(embedded_gguf_path()))
    n_long = round(opts.num_samples * opts.long_fraction)
    n_short = opts.num_samples - n_long
    kinds = []
    for n, mean, seed in ((n_short, opts.short_len, opts.seed), (n_long, opts.long_len, opts.seed + 1)):
        if n:
            spec = SyntheticSpec(num_samples=n, input_len=mean, output_len=opts.output_len, length_dist="uniform",
                                 range_ratio=0.25, seed=seed)
            kinds.append(build_synthetic(tokenizer, spec, 8192).samples)
    samples = [s for group in kinds for s in group]
    random.Random(opts.seed).shuffle(samples)  # long prompts spread through the queue
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps({"prompt": s.prompt, "max_tokens": opts.output_len}) + "\n")
    lengths = [len(s.prompt_token_ids) for s in samples]
    return {"requests": len(samples), "long": n_long, "short": n_short,
            "mean_prompt_tokens": round(statistics.mean(lengths), 1), "max_prompt_tokens": max(lengths),
            "output_tokens": opts.output_len}


def launch(system: str, opts: argparse.Namespace) -> Launch:
    common = ["--host", "127.0.0.1", "--port", "{port}", "--worker-num-cpus", "1", "--max-model-len", "2048",
              "--max-num-batched-tokens", str(opts.max_num_batched_tokens)]
    if not opts.prefix_caching:
        common.append("--no-enable-prefix-caching")
    roles = (["--workers", "2"] if system == "aggregated" else
             ["--prefill-workers", "1", "--decode-workers", "1",
              "--disagg-min-prefill-tokens", str(opts.disagg_min_prefill_tokens),
              "--disagg-max-prefill-queue", str(opts.disagg_max_prefill_queue)])
    if system == "disaggregated-nice":
        roles += ["--prefill-worker-nice", str(opts.prefill_worker_nice)]
    return Launch([str(console_script("tokenmill")), "serve", *common, *roles])


def run_sweep(system: str, url: str, workload: Path, out: Path, opts: argparse.Namespace) -> list[dict]:
    cmd = [str(console_script("tokenmill")), "bench", "--url", url, "--api", "completions", "--workload", "jsonl",
           "--dataset", str(workload), "--scenario", "server", "--sweep-qps", opts.qps,
           "--tpot-ms", str(opts.tpot_ms), "--ttft-ms", str(opts.ttft_ms), "--min-duration", str(opts.min_duration),
           "--min-query-count", str(opts.min_query_count), "--output-dir", str(out), "--no-plots", "--no-progress"]
    print(f"[{system}] {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)
    points = []
    for path in sorted(out.rglob("results.json")):
        r = load_result(path)
        m = r.metrics
        tpots = [q.tpot_s * 1e3 for q in r.queries if q.ok and q.tpot_s is not None]
        points.append({"qps": r.settings.get("target_qps"), "valid": r.verdict.result == "VALID",
                       "reasons": r.verdict.reasons,
                       "tpot_p99_ms": m.tpot_ms.p99, "tpot_p50_ms": m.tpot_ms.p50, "tpot_max_ms": m.tpot_ms.max,
                       "over_tpot_limit": sum(t > opts.tpot_ms for t in tpots),
                       "ttft_p99_ms": m.ttft_ms.p99, "ttft_p50_ms": m.ttft_ms.p50,
                       "output_tok_s": m.tokens_per_s, "queries": m.num_queries, "errors": m.num_errors,
                       "dir": str(path.parent)})
    return sorted(points, key=lambda p: p["qps"] or 0)


def disaggregation(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/v1/workers", timeout=10) as r:
        return json.loads(r.read()).get("disaggregation", {})


def memcpy_gb_s(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Best-of copy rate of one large array into another (read + write counted once, as bytes moved)."""
    src, dst = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def format_table(results: dict[str, list[dict]]) -> str:
    rows = ["| offered QPS | system | TPOT p99 (ms) | TPOT p50 (ms) | TPOT max (ms) | queries over the TPOT limit "
            "| TTFT p99 (ms) | output tok/s | LoadGen |",
            "|---|---|---|---|---|---|---|---|---|"]
    qps = sorted({p["qps"] for points in results.values() for p in points})
    for q in qps:
        for system, points in results.items():
            p = next((p for p in points if p["qps"] == q), None)
            if p is None:
                continue
            rows.append(f"| {q:g} | {system} | {p['tpot_p99_ms']:.1f} | {p['tpot_p50_ms']:.1f} | "
                        f"{p['tpot_max_ms']:.1f} | {p['over_tpot_limit']} of {p['queries']} | "
                        f"{p['ttft_p99_ms']:.0f} | {p['output_tok_s']:.1f} | "
                        f"{'VALID' if p['valid'] else 'INVALID'} |")
    return "\n".join(rows)


def peak_valid_qps(points: list[dict]) -> float | None:
    """The highest offered QPS LoadGen judged VALID in one system's sweep (None: no point was)."""
    return max((p["qps"] for p in points if p["valid"]), default=None)


def main(argv=None) -> int:
    ap = build_parser()
    opts = ap.parse_args(argv)
    unknown = set(opts.systems.split(",")) - set(SYSTEMS)
    if unknown:
        ap.error(f"--systems: unknown {', '.join(sorted(unknown))} (choose from {', '.join(SYSTEMS)})")
    out = Path(opts.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    workload = out / "mixed.jsonl"
    shape = write_workload(workload, opts)
    print(f"workload: {json.dumps(shape)}", flush=True)
    results, transfer = {}, {}
    for system in opts.systems.split(","):
        with running_server(system, launch(system, opts), out / f"{system}-serve.log", timeout_s=600) as url:
            results[system] = run_sweep(system, url, workload, out / system, opts)
            if system != "aggregated":
                transfer[system] = disaggregation(url)
    copy_rate = memcpy_gb_s()
    summary = {"workload": shape, "tpot_limit_ms": opts.tpot_ms, "ttft_limit_ms": opts.ttft_ms,
               "max_num_batched_tokens": opts.max_num_batched_tokens, "prefix_caching": opts.prefix_caching,
               "results": results, "peak_valid_qps": {system: peak_valid_qps(p) for system, p in results.items()},
               "kv_transfer": transfer, "memcpy_gb_s": round(copy_rate, 2)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(format_table(results))
    for system, qps in summary["peak_valid_qps"].items():
        print(f"peak VALID QPS, {system}: {'none of the sweep' if qps is None else f'{qps:g}'}")
    for system, t in transfer.items():
        bw = t.get("bandwidth_bytes_per_s", 0) / 1e9
        print(f"KV transfers, {system}: {t.get('transfers')} ({t.get('transfer_bytes', 0) / 1e6:.1f} MB, "
              f"{t.get('blocks_skipped')} blocks skipped), {bw:.2f} GB/s end to end vs memcpy "
              f"{copy_rate:.2f} GB/s on this machine; decisions {t.get('decisions')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
