"""The cost of the Ray hop: one engine worker on Ray vs the in-process engine.

Same model, same torch thread count, no HTTP on either side: tokenmill bench's
engine backend drives the in-process AsyncEngine and a ClusterEngine with one
EngineWorker actor (the frontend tokenizes, routes, sends msgpack, long-polls
every step's token ids back and detokenizes). Offline (the synthetic workload)
and SingleStream (one query at a time) through LoadGen, the two systems
alternating --repeats times, one system alive at a time; prints the median
of each figure and the ratio cluster / in-process.

    python -m benchmarks.cluster_overhead --threads 2 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import replace

from tokenmill.bench.runner import Target, run_benchmark
from tokenmill.bench.settings import BenchSettings
from tokenmill.bench.workloads.synthetic import SyntheticSpec, build_synthetic
from tokenmill.config import EngineConfig

SYSTEMS = ("in-process", "1 Ray worker")


def start(system: str, config: EngineConfig):
    if system == "in-process":
        from tokenmill.engine.async_engine import AsyncEngine
        return AsyncEngine.from_config(config)
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers, start_ray
    from tokenmill.cluster.router import Router, RouterConfig

    started = start_ray(None)
    actors = launch_workers(config, 1, num_cpus=config.num_threads, num_gpus=0, scheduling_strategy=None)
    return ClusterEngine(actors, Router(RouterConfig(policy="round-robin", block_size=config.block_size)),
                         started_ray=started)


def measure(engine, workload, scenarios: dict[str, BenchSettings]) -> dict[str, dict[str, float]]:
    from tokenmill.bench.engine_backend import EngineBackend

    target = Target("engine", "engine", lambda: EngineBackend(engine))
    figures = {}
    for name, settings in scenarios.items():
        with tempfile.TemporaryDirectory() as run_dir:
            m = run_benchmark(target, workload, settings, run_dir, progress=False, plots=False).metrics
        if m.num_errors:
            raise RuntimeError(f"{name}: {m.num_errors} queries failed")
        figures[name] = {"tok/s": m.tokens_per_s, "TTFT p50 ms": m.ttft_ms.p50, "TPOT p50 ms": m.tpot_ms.p50}
    return figures


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the engine on both sides")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--num-samples", type=int, default=128, help="synthetic prompts (Offline runs them all)")
    ap.add_argument("--singlestream-queries", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    config = replace(EngineConfig(dtype=args.dtype), num_threads=args.threads)
    scenarios = {
        "offline": BenchSettings(scenario="offline", min_duration_s=1.0, min_query_count=args.num_samples),
        "singlestream": BenchSettings(scenario="singlestream", min_duration_s=5.0,
                                      min_query_count=args.singlestream_queries),
    }
    runs = {system: [] for system in SYSTEMS}
    workload = None
    for repeat in range(args.repeats):
        for system in SYSTEMS:
            engine = start(system, config)
            try:
                if workload is None:
                    workload = build_synthetic(engine.tokenizer, SyntheticSpec(num_samples=args.num_samples),
                                               engine.max_model_len)
                runs[system].append(measure(engine, workload, scenarios))
            finally:
                engine.shutdown()
            print(f"repeat {repeat + 1}, {system}: {runs[system][-1]}", flush=True)
    print(f"\n{args.threads} torch threads, dtype {args.dtype}, median of {args.repeats}")
    print(f"{'figure':28} {SYSTEMS[0]:>12} {SYSTEMS[1]:>14} {'ratio':>7}")
    for scenario in scenarios:
        for figure in ("tok/s", "TTFT p50 ms", "TPOT p50 ms"):
            a, b = (statistics.median(r[scenario][figure] for r in runs[s]) for s in SYSTEMS)
            print(f"{scenario + ' ' + figure:28} {a:12,.1f} {b:14,.1f} {b / a:6.2f}x")


if __name__ == "__main__":
    main()
