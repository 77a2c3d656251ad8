"""Side-by-side comparison of one workload run against several targets (or
several saved runs): one column per target, and each target's figures as a
ratio of the first target's, so "2.31x" reads "2.31 times the first".

A comparison is only fair on the same scenario, workload and load; when the
results differ there, the table carries a WARNING line naming the difference
rather than refusing (comparing across loads can be deliberate).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenmill.bench.report import MISSING, fmt_cost, fmt_num, fmt_rate, format_columns, unique_labels
from tokenmill.bench.results import BenchResult, load_result

# (row name, the figure, how to print it). The figure is what the ratio divides.
_Row = tuple[str, Callable[[BenchResult], float | None], Callable[[float | None], str]]
_ROWS: list[_Row] = [
    ("output tokens/s", lambda r: r.metrics.tokens_per_s, fmt_num),
    ("requests/s", lambda r: r.metrics.requests_per_s, lambda v: fmt_num(v, 2)),
    ("TTFT p50 (ms)", lambda r: _pct(r.metrics.ttft_ms, "p50"), fmt_num),
    ("TTFT p90 (ms)", lambda r: _pct(r.metrics.ttft_ms, "p90"), fmt_num),
    ("TTFT p99 (ms)", lambda r: _pct(r.metrics.ttft_ms, "p99"), fmt_num),
    ("TPOT p50 (ms)", lambda r: _pct(r.metrics.tpot_ms, "p50"), fmt_num),
    ("TPOT p99 (ms)", lambda r: _pct(r.metrics.tpot_ms, "p99"), fmt_num),
    ("prefix-cache hit rate", lambda r: r.metrics.prefix_cache_hit_rate, fmt_rate),
    ("drafts accepted", lambda r: r.metrics.spec_acceptance_rate, fmt_rate),
    ("goodput (req/s)", lambda r: r.metrics.goodput_rps, lambda v: fmt_num(v, 2)),
    ("cost / M tokens", lambda r: r.metrics.cost_per_million_tokens, fmt_cost),
]


def _pct(p, key: str) -> float | None:
    return None if p is None else getattr(p, key)


def load_results(paths: list[str | Path]) -> list[BenchResult]:
    """Each path a results.json file or a run folder; ValueError names a bad one."""
    if not paths:
        raise ValueError("compare: no results files given")
    return [load_result(p) for p in paths]


def ratio(value: float | None, base: float | None) -> str:
    """value / base as '2.31x'; 'n/a' when either is missing or base is 0."""
    if value is None or base is None or base == 0:
        return "n/a"
    return f"{value / base:.2f}x"


def format_comparison(results: list[BenchResult]) -> str:
    """The comparison table, with WARNING lines above it when the runs differ
    in scenario, mode, workload or target QPS."""
    if len(results) < 2:
        raise ValueError(f"compare: need results from 2 or more targets, got {len(results)}")
    labels = unique_labels(results)
    base = labels[0]
    header = ["", *labels, *(f"{label} vs {base}" for label in labels[1:])]
    rows = []
    for name, figure, show in _ROWS:
        values = [figure(r) for r in results]
        rows.append([name, *(show(v) for v in values), *(ratio(v, values[0]) for v in values[1:])])
    rows.append(["LoadGen verdict", *(r.verdict.result for r in results), *([""] * (len(results) - 1))])
    rows.append(["errors", *(str(r.metrics.num_errors) for r in results), *([""] * (len(results) - 1))])

    first = results[0]
    lines = [f"Comparison: {first.scenario}, workload {(first.workload or {}).get('name', MISSING)}, "
             f"{len(results)} targets"]
    lines += [f"WARNING: {w}" for w in comparison_warnings(results, labels)]
    lines.append(format_columns(header, rows))
    lines.append(f"Ratios are each target's figure / {base}'s: above 1x is better for throughput, "
                 "goodput and hit rate, worse for latency and cost.")
    return "\n".join(lines) + "\n"


def comparison_warnings(results: list[BenchResult], labels: list[str] | None = None) -> list[str]:
    """One line per way the runs differ that makes their figures incomparable."""
    labels = labels or unique_labels(results)
    checks = [
        ("scenario", lambda r: r.scenario),
        ("mode", lambda r: r.mode),
        ("workload", lambda r: (r.workload or {}).get("name")),
        ("workload params", lambda r: (r.workload or {}).get("params") or {}),
        ("target QPS", lambda r: (r.settings or {}).get("target_qps")),
        ("max concurrency", lambda r: (r.settings or {}).get("max_concurrency")),
    ]
    warnings = []
    for what, get in checks:
        values = [get(r) for r in results]
        if any(v != values[0] for v in values[1:]):
            shown = ", ".join(f"{label}={_show(v)}" for label, v in zip(labels, values))
            warnings.append(f"results differ in {what} ({shown}); the figures are not like for like")
    return warnings


def _show(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"
    return str(value)
