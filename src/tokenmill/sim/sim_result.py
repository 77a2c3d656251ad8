"""What a run of the serving simulation (sim/serving.py) returns: each request's times,
and the figures read from them as the benchmark and LoadGen read a real run's."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tokenmill.bench.results import Percentiles


@dataclass
class SimResult:
    """Per-request arrays are in the order the requests were given; times in seconds."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    """When its last token was emitted (end of that step)."""
    output_tokens: np.ndarray
    """Tokens each request generated (its ``output_tokens`` once it finished)."""
    steps: int
    preemptions: int
    scheduled_seqs: int
    """Sequences scheduled, summed over steps."""
    scheduled_tokens: int
    """Rows computed, summed over steps."""
    busy_s: float
    """Time spent in steps (the rest of the duration the engine sat idle)."""
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0
    """Prompt tokens found cached and looked up at admissions, as the engine's counters count them
    (KVCacheManager.count_lookup: once per admission, a recompute's too)."""
    prefill_steps: int = 0
    prefill_busy_s: float = 0.0
    """Of ``steps`` and ``busy_s``, the steps that computed prompt tokens (a chunk, beside any
    decodes), as the engine's step counters split them (engine/step_stats.py)."""

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_hit_tokens / self.prefix_query_tokens if self.prefix_query_tokens else 0.0

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """(last token - first token) / (tokens - 1); NaN for one-token requests."""
        with np.errstate(invalid="ignore", divide="ignore"):
            t = (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
        return np.where(self.output_tokens > 1, t, np.nan)

    @property
    def duration_s(self) -> float:
        """First arrival to last finish (as bench/metrics.py measures a run)."""
        return max(float(self.finish_s.max() - self.arrival_s.min()), 1e-12)

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.output_tokens.sum()) / self.duration_s

    @property
    def completed_tokens_per_s(self) -> float:
        """LoadGen's Server figure ("Completed tokens per second", loadgen/results.cc): every
        request's tokens over the time from the first arrival to the finish of the last one to
        arrive. Requests still running then (long outputs issued earlier) count but their drain
        does not, so a long run measures the sustained rate, not the slowest request."""
        last = int(np.argmax(self.arrival_s))
        span = float(self.finish_s[last] - self.arrival_s.min())
        return float(self.output_tokens.sum()) / max(span, 1e-12)

    @property
    def requests_per_s(self) -> float:
        return len(self.output_tokens) / self.duration_s

    @property
    def mean_batch_size(self) -> float:
        return self.scheduled_seqs / max(self.steps, 1)

    @property
    def mean_tokens_per_step(self) -> float:
        return self.scheduled_tokens / max(self.steps, 1)

    @cached_property
    def ttft_ms(self) -> Percentiles:
        """Same percentile rule and units as the benchmark's Metrics.ttft_ms."""
        return Percentiles.of(self.ttft_s.tolist())

    @cached_property
    def tpot_ms(self) -> Percentiles | None:
        tpot = self.tpot_s
        return Percentiles.of(tpot[~np.isnan(tpot)].tolist())

    def meets(self, ttft_p99_s: float, tpot_p99_s: float) -> bool:
        """MLPerf Server validity: p99 TTFT and p99 TPOT within the limits."""
        tpot_ok = self.tpot_ms is None or self.tpot_ms.p99 <= tpot_p99_s * 1e3
        return self.ttft_ms.p99 <= ttft_p99_s * 1e3 and tpot_ok
