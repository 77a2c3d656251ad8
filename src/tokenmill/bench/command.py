"""``tokenmill bench``: build the targets and the workload, run LoadGen
(once, a sweep, or a peak search) per target, print and save the reports."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from tokenmill.bench.backend import BackendError
from tokenmill.bench.cli_args import ENGINE_TARGET
from tokenmill.bench.results import BenchResult
from tokenmill.bench.runner import Target, run_benchmark, slug
from tokenmill.bench.settings import BenchSettings
from tokenmill.engine.gc_heap import freeze_startup_heap, unfreeze_heap

EXIT_TARGET_ERROR = 1


def cmd_bench(args: argparse.Namespace) -> int:
    from tokenmill.bench import compare, report

    if args.compare:
        results = compare.load_results(args.compare)
        if len(results) == 1:  # nothing to compare against: show the one report
            print(report.format_result(results[0]))
            return 0
        print(compare.format_comparison(results))
        _plot(args, "plot_comparison", results, Path(args.output_dir) / "comparison.png")
        return 0
    check_bench_args(args)
    settings = settings_from_args(args)
    if args.uplift:
        return _run_uplift(args, settings)
    specs = args.url or [ENGINE_TARGET]
    engine = _start_engine(args) if ENGINE_TARGET in specs else None
    if engine is not None:
        freeze_startup_heap()  # no full collection walks the loaded engine mid-run (engine/gc_heap.py)
    try:
        tokenizer, max_len = _tokenizer_for(args, engine)
        from tokenmill.bench.workloads.args import build_workload
        workload = build_workload(args, tokenizer, max_model_len=max_len)
        print(f"workload: {workload.name}: {workload.description}", file=sys.stderr)
        results = []
        for spec in specs:
            target = make_target(spec, args, engine, tokenizer)
            folder = Path(args.output_dir) / f"{settings.scenario}-{slug(target.label)}"
            try:
                results.append(_run_target(args, target, workload, settings, folder, report))
            except BackendError as exc:
                print(f"tokenmill bench: {target.label}: {exc}", file=sys.stderr)
                return EXIT_TARGET_ERROR
        if len(results) > 1:
            print(compare.format_comparison(results))
            _plot(args, "plot_comparison", results, Path(args.output_dir) / "comparison.png")
        return 0
    finally:
        if engine is not None:
            engine.shutdown()
            unfreeze_heap()


def _run_target(args, target: Target, workload, settings: BenchSettings, folder: Path, report) -> BenchResult:
    progress, plots = not args.no_progress, not args.no_plots

    def run_with(point_settings: BenchSettings, sub: str | None) -> BenchResult:
        return run_benchmark(target, workload, point_settings, folder / sub if sub else folder,
                             progress=progress, plots=plots)

    if args.find_peak:
        from tokenmill.bench.peak import find_peak, save_summary
        search = find_peak(lambda q: _announce(run_with(replace(settings, target_qps=q), f"qps-{q:.4g}")),
                           settings.target_qps, max_runs=args.peak_max_runs, tolerance=args.peak_tolerance)
        results = [r for _, r in search.runs]
        print(report.format_sweep(results))
        save_summary(folder, "peak.json", search.summary())
        _plot(args, "plot_sweep", results, folder / "sweep.png")
        if search.peak_qps is None:
            print(f"peak: no target QPS down to {min(q for q, _ in search.runs):.4g} met the limits")
            return results[-1]
        print(f"peak: {search.peak_qps:.4g} QPS is the highest target that LoadGen judged VALID"
              + (f" ({search.lowest_failing_qps:.4g} failed)" if search.lowest_failing_qps else ""))
        return search.best
    if args.sweep_qps or args.sweep_concurrency:
        from tokenmill.bench.peak import run_sweep, save_summary
        if args.sweep_qps:
            results = run_sweep(lambda q: _announce(run_with(replace(settings, target_qps=q), f"qps-{q:.4g}")),
                                args.sweep_qps)
        else:
            results = run_sweep(lambda c: _announce(run_with(replace(settings, max_concurrency=int(c)),
                                                             f"concurrency-{int(c)}")), args.sweep_concurrency)
        print(report.format_sweep(results))
        save_summary(folder, "sweep.json", {"points": [r.log_dir for r in results]})
        _plot(args, "plot_sweep", results, folder / "sweep.png")
        return max(results, key=lambda r: r.metrics.tokens_per_s)
    return _announce(run_with(settings, None))


def _run_uplift(args, settings: BenchSettings) -> int:
    """--uplift: one in-process engine per configuration (bench/uplift.py), in
    turn, each shut down before the next starts; the same workload for all."""
    from tokenmill.bench import compare, report
    from tokenmill.bench.engine_backend import EngineBackend
    from tokenmill.bench.peak import save_summary
    from tokenmill.bench.uplift import uplift_configs, uplift_summary
    from tokenmill.bench.workloads.args import build_workload
    from tokenmill.cli_args import engine_config_from_args
    from tokenmill.engine.async_engine import AsyncEngine
    from tokenmill.engine.resolve import resolve_device

    config = engine_config_from_args(args)
    runs = uplift_configs(config, resolve_device(config.device).type)
    folder, results, workload = Path(args.output_dir) / f"uplift-{settings.scenario}", [], None
    for i, (label, run_config) in enumerate(runs):
        print(f"uplift: run {i + 1} of {len(runs)}: {label}", file=sys.stderr, flush=True)
        engine = AsyncEngine(run_config)
        freeze_startup_heap()
        try:
            if workload is None:
                workload = build_workload(args, engine.tokenizer, max_model_len=engine.max_model_len)
                print(f"workload: {workload.name}: {workload.description}", file=sys.stderr)
            target = Target(label=label, kind="engine", api="token ids",
                            make_backend=lambda engine=engine, label=label: EngineBackend(engine, label))
            results.append(_run_target(args, target, workload, settings, folder / slug(label), report))
        finally:
            engine.shutdown()
            unfreeze_heap()
    print(compare.format_comparison(results))
    save_summary(folder, "uplift.json", uplift_summary(results))
    _plot(args, "plot_comparison", results, folder / "uplift.png")
    return 0


def _announce(result: BenchResult) -> BenchResult:
    from tokenmill.bench.report import format_result
    print(format_result(result))
    print(f"results: {result.log_dir}/results.json\n", flush=True)
    return result


def check_bench_args(args: argparse.Namespace) -> None:
    if args.uplift and args.url:
        raise ValueError("uplift: compares configurations of the in-process engine; drop --url")
    modes = [name for name in ("find_peak", "sweep_qps", "sweep_concurrency") if getattr(args, name)]
    if len(modes) > 1:
        raise ValueError(f"{modes[0]}: cannot be combined with {modes[1]}")
    if (args.find_peak or args.sweep_qps) and args.scenario not in ("server", "interactive"):
        raise ValueError(f"{modes[0]}: needs --scenario server or interactive, got {args.scenario}")
    if modes and args.mode == "accuracy":
        raise ValueError(f"{modes[0]}: a peak search or sweep measures performance; drop --mode accuracy")
    if args.peak_tolerance <= 0:
        raise ValueError(f"peak_tolerance: must be > 0, got {args.peak_tolerance}")


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    qps = args.target_qps
    if qps is None and args.find_peak:
        qps = 1.0
    if qps is None and args.sweep_qps:
        qps = args.sweep_qps[0]
    return BenchSettings(
        scenario=args.scenario, mode=args.mode, preset=args.preset, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms,
        target_qps=qps, min_duration_s=args.min_duration, min_query_count=args.min_query_count,
        max_duration_s=args.max_duration, official=args.official, max_concurrency=args.max_concurrency,
        devices=args.devices, price_per_hour=args.price_per_hour, seed=args.loadgen_seed)


def make_target(spec: str, args: argparse.Namespace, engine, tokenizer) -> Target:
    if spec == ENGINE_TARGET:
        from tokenmill.bench.engine_backend import EngineBackend
        return Target(label="tokenmill-engine", kind="engine", api="token ids",
                      make_backend=lambda: EngineBackend(engine, "engine"))
    if not spec.startswith(("http://", "https://")):
        raise ValueError(f"url: expected http(s)://host:port or '{ENGINE_TARGET}', got {spec!r}")
    from tokenmill.bench.openai_backend import OpenAIBackend
    return Target(label=spec, kind="openai", url=spec, api=args.api, make_backend=lambda: OpenAIBackend(
        spec, api=args.api, model=args.served_model_name, api_key=args.api_key, tokenizer=tokenizer,
        timeout_s=args.request_timeout, max_connections=max(512, args.max_concurrency or 0),
        extra_body=args.extra_body))


def _start_engine(args):
    from tokenmill.cli_args import engine_config_from_args
    from tokenmill.engine.async_engine import AsyncEngine

    client = AsyncEngine(engine_config_from_args(args))  # built on its loop thread
    engine = client.engine
    print(f"engine: {engine.model_name} on {engine.core.device} ({str(engine.core.dtype).removeprefix('torch.')}), "
          f"{engine.config.num_kv_blocks} KV blocks x {engine.config.block_size} tokens", file=sys.stderr)
    return client


def _tokenizer_for(args, engine):
    """The tokenizer that makes the workload and counts HTTP targets' tokens:
    the engine's, else --tokenizer, else --model, else the embedded model's."""
    if engine is not None:
        return engine.tokenizer, engine.max_model_len
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer
    source = args.tokenizer or (args.model if args.model and not args.model.startswith("dummy") else None)
    return load_tokenizer(source or embedded_gguf_path()), args.max_model_len


def _plot(args, name: str, results, path: Path) -> None:
    if args.no_plots or not results:
        return
    from tokenmill.bench import plots
    path.parent.mkdir(parents=True, exist_ok=True)
    if getattr(plots, name)(results, path):
        print(f"plot: {path}")
