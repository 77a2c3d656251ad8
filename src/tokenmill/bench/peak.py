"""Peak search and sweeps: many LoadGen runs of one scenario.

find_peak: the highest target QPS whose Server/Interactive run LoadGen judges
VALID (limits met, enough queries and time). Doubles (or halves) from the
start rate until the verdict flips, then bisects the bracket until it is
narrower than ``tolerance`` of its top or the run budget is spent. Assumes the
verdict is monotone in QPS, which holds up to run-to-run noise near the peak.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tokenmill.bench.results import BenchResult


@dataclass
class PeakSearch:
    peak_qps: float | None
    """Highest QPS that passed; None when none did."""
    best: BenchResult | None
    """The run at peak_qps."""
    lowest_failing_qps: float | None
    runs: list[tuple[float, BenchResult]] = field(default_factory=list)
    """Every run, in order: (target QPS, result)."""

    def summary(self) -> dict:
        return {"peak_qps": self.peak_qps, "lowest_failing_qps": self.lowest_failing_qps,
                "runs": [{"target_qps": q, "verdict": r.verdict.result, "reasons": r.verdict.reasons,
                          "tokens_per_s": r.metrics.tokens_per_s, "log_dir": r.log_dir} for q, r in self.runs]}


def find_peak(run_at: Callable[[float], BenchResult], start_qps: float, max_runs: int = 8,
              tolerance: float = 0.05, min_qps: float = 0.01) -> PeakSearch:
    if start_qps <= 0:
        raise ValueError(f"target_qps: the search must start above 0, got {start_qps}")
    if max_runs < 2:
        raise ValueError(f"peak_max_runs: need at least 2 runs to bracket a peak, got {max_runs}")
    search = PeakSearch(None, None, None)
    passed: dict[float, BenchResult] = {}

    def attempt(qps: float) -> bool:
        result = run_at(qps)
        search.runs.append((qps, result))
        if result.verdict.valid:
            passed[qps] = result
            return True
        return False

    lo, hi = None, None  # highest passing, lowest failing
    qps = start_qps
    while len(search.runs) < max_runs and (lo is None or hi is None):
        if attempt(qps):
            lo = qps
            if hi is None:
                qps *= 2
        else:
            hi = qps
            if lo is None:
                if qps / 2 < min_qps:
                    break
                qps /= 2
    while lo is not None and hi is not None and len(search.runs) < max_runs and (hi - lo) > tolerance * hi:
        mid = (lo + hi) / 2
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    search.peak_qps, search.lowest_failing_qps = lo, hi
    search.best = passed.get(lo) if lo is not None else None
    return search


def run_sweep(run_point: Callable[[float], BenchResult], points: list[float]) -> list[BenchResult]:
    """One run per point (target QPS or concurrency), in the given order."""
    if not points:
        raise ValueError("sweep: give at least one point")
    return [run_point(p) for p in points]


def save_summary(folder: str | Path, name: str, data: dict) -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(data, indent=1))
    return path
