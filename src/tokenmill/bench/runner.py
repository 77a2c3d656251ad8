"""One benchmark run, start to saved results: LoadGen test -> LoadGen's
verdict -> client-side metrics -> (accuracy scores) -> results.json + plots."""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tokenmill.bench.backend import Backend
from tokenmill.bench.driver import LoadGenDriver
from tokenmill.bench.loadgen_log import read_summary
from tokenmill.bench.metrics import compute_metrics
from tokenmill.bench.results import BenchResult, Verdict
from tokenmill.bench.server_metrics import rates_between, read_counters
from tokenmill.bench.settings import BenchSettings
from tokenmill.bench.workload import Workload
from tokenmill.engine.gc_heap import GcPauseLog
from tokenmill.engine.step_log import STEPS_FILE, LoggedStep, save_steps

log = logging.getLogger(__name__)


@dataclass
class Target:
    """A system under test and how to reach it."""

    label: str
    kind: str
    """'engine' (in-process) or 'openai' (an HTTP endpoint)."""
    make_backend: Callable[[], Backend]
    """A fresh backend per run (HTTP clients are bound to the run's event loop)."""
    url: str | None = None
    api: str = "chat"
    """'chat' | 'completions' for URL targets; the engine takes token ids."""

    def describe(self, model: str) -> dict:
        return {"label": self.label, "kind": self.kind, "url": self.url, "api": self.api, "model": model}


GC_STALL_MS = 1.0
"""Collections at least this long are listed one by one in results.json (``gc_stalls``)."""


def run_benchmark(target: Target, workload: Workload, settings: BenchSettings, run_dir: str | Path,
                  progress: bool = True, plots: bool = True) -> BenchResult:
    run_dir = Path(run_dir)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    backend = target.make_backend()
    counters = _counter_reader(target, backend)
    before = counters()
    steps = _StepRecorder(target, backend)
    cpu_start = time.process_time()
    with GcPauseLog() as gc_log:
        run = LoadGenDriver(backend, workload, settings, run_dir, progress=progress).run()
    client_cpu_s = time.process_time() - cpu_start
    after = counters()
    logged = steps.finish()
    verdict, figures = read_summary(run_dir)
    if settings.mode == "accuracy":
        verdict = Verdict("ACCURACY", verdict.checks, [])
    errors = [r for r in run.records if r.error]
    if errors:
        # LoadGen cannot tell a failed query from a fast one; a run with
        # failures is not a valid measurement whatever LoadGen says.
        first = errors[0].error
        verdict = Verdict("INVALID", verdict.checks,
                          [f"{len(errors)} of {len(run.records)} queries failed (first: {first})"] + verdict.reasons)
    result = BenchResult(
        target=target.describe(backend.model),
        scenario=settings.scenario,
        mode=settings.mode,
        settings=settings.describe(len(workload.samples)),
        workload={"name": workload.name, "description": workload.description, "params": workload.params,
                  **workload.stats()},
        verdict=verdict,
        metrics=compute_metrics(run.records, settings, figures),
        queries=run.records,
        log_dir=str(run_dir),
        created=created,
        t0_unix=run.t0_unix,
    )
    rates = rates_between(before, after)
    result.metrics.prefix_cache_hit_rate = rates["prefix_cache_hit_rate"]
    result.metrics.spec_acceptance_rate = rates["spec_acceptance_rate"]
    result.metrics.spec_tokens_per_verification = rates["spec_tokens_per_verification"]
    for name in ("engine_steps", "engine_busy_s", "engine_prefill_steps", "engine_prefill_busy_s",
                 "engine_busy_cpu_s", "engine_workers"):
        setattr(result.metrics, name, rates[name])
    result.metrics.client_cpu_s, result.metrics.host_cpus = client_cpu_s, os.cpu_count()
    result.metrics.gc_pauses = gc_log.summary()
    result.gc_stalls = gc_log.stalls(since_unix=run.t0_unix, min_ms=GC_STALL_MS)
    if settings.mode == "accuracy":
        from tokenmill.bench.accuracy import score_accuracy
        result.accuracy = score_accuracy(run_dir, workload)
    if logged is not None:
        result.engine_steps_file = save_steps(run_dir / STEPS_FILE, logged, run.t0_unix).name
    result.save(run_dir)
    if plots and settings.mode == "performance":
        from tokenmill.bench.plots import plot_engine_steps, plot_latency_distributions
        plot_latency_distributions(result, run_dir / "latency.png")
        if logged:  # each start on the queries' clock, as engine_steps.jsonl has it
            plot_engine_steps([s._replace(start=s.start - run.t0_unix) for s in logged], run_dir / "engine_steps.png")
    return result


class _StepRecorder:
    """The in-process engine's steps during one run (its ``step_log``; engine/step_log.py). A log
    someone else keeps (benchmarks/serving_stalls.py, over a whole sweep) is read, not replaced."""

    def __init__(self, target: Target, backend) -> None:
        engine = getattr(backend, "engine", None) if target.kind == "engine" else None
        self.engine = engine if hasattr(engine, "step_log") else None  # an AsyncEngine (a cluster has none)
        if self.engine is None:
            return
        self.owned = self.engine.step_log is None
        if self.owned:
            self.engine.step_log = []
        self.log, self.first = self.engine.step_log, len(self.engine.step_log)

    def finish(self) -> list[LoggedStep] | None:
        """The run's steps (None without an in-process engine); stops a log this recorder started."""
        if self.engine is None:
            return None
        if self.owned:
            self.engine.step_log = None
        return self.log[self.first:]


def _counter_reader(target: Target, backend) -> Callable[[], dict[str, float] | None]:
    """The target's prefix-cache, speculative-decoding and step counters (bench/server_metrics.py
    COUNTERS): an HTTP server's /metrics, the in-process engine's stats."""
    if target.kind != "openai":
        def engine_counters():
            s = backend.engine.stats()
            return {"prefix_hits": float(s.prefix_cache_hits), "prefix_queries": float(s.prefix_cache_queries),
                    "spec_drafts": float(s.spec_draft_tokens), "spec_accepted": float(s.spec_accepted_tokens),
                    "spec_verifications": float(s.spec_verifications),
                    "engine_steps": float(sum(s.engine_steps.values())),
                    "engine_step_seconds": sum(s.engine_step_seconds.values()),
                    "engine_prefill_steps": float(s.engine_steps.get("prefill", 0)),
                    "engine_prefill_step_seconds": s.engine_step_seconds.get("prefill", 0.0),
                    "engine_step_cpu_seconds": sum(s.engine_step_cpu_seconds.values())}
        return engine_counters
    headers = {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else None
    return lambda: read_counters(backend.label, headers)


def slug(text: str) -> str:
    """A folder-safe name for a target label or URL."""
    text = re.sub(r"^https?://", "", text)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "target"
