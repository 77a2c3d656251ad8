"""Summary metrics of a run from its per-query records.

Goodput counts the requests that met both latency limits (MLPerf's p99 bounds
applied per request): TTFT <= ttft_ms and TPOT <= tpot_ms. Offline runs have no
latency bounds (every query is issued at t=0), so there every successful
request counts.
"""

from __future__ import annotations

from tokenmill.bench.results import Metrics, Percentiles, QueryRecord
from tokenmill.bench.settings import BenchSettings


def compute_metrics(records: list[QueryRecord], settings: BenchSettings,
                    loadgen_figures: dict[str, str] | None = None) -> Metrics:
    ok = [r for r in records if r.ok]
    start = min((r.issued_s for r in records), default=0.0)
    end = max((r.finished_s for r in records if r.finished_s is not None), default=start)
    duration = max(end - start, 1e-9)
    tokens = sum(r.output_tokens for r in ok)
    good = [r for r in ok if _meets_limits(r, settings)]
    tokens_per_s = tokens / duration
    cost = None
    if settings.price_per_hour is not None and tokens_per_s > 0:
        # USD per hour for the whole target / million tokens it makes per hour.
        cost = settings.price_per_hour * settings.devices / (tokens_per_s * 3600 / 1e6)
    return Metrics(
        duration_s=duration,
        num_queries=len(records),
        num_errors=len(records) - len(ok),
        output_tokens=tokens,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_device=tokens_per_s / settings.devices,
        requests_per_s=len(ok) / duration,
        ttft_ms=Percentiles.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=Percentiles.of([r.tpot_s for r in ok if r.tpot_s is not None]),
        latency_ms=Percentiles.of([r.latency_s for r in ok if r.latency_s is not None]),
        goodput_rps=len(good) / duration,
        good_fraction=len(good) / len(records) if records else 0.0,
        cost_per_million_tokens=cost,
        usage_mismatches=sum(1 for r in ok if r.usage_output_tokens is not None
                             and r.usage_output_tokens != r.output_tokens),
        usage_output_tokens=(sum(r.usage_output_tokens for r in ok)
                             if ok and all(r.usage_output_tokens is not None for r in ok) else None),
        loadgen=dict(loadgen_figures or {}),
    )


def _meets_limits(r: QueryRecord, settings: BenchSettings) -> bool:
    if settings.scenario == "offline":
        return True
    limits = settings.limits
    ttft, tpot = r.ttft_s, r.tpot_s
    return (ttft is not None and ttft * 1e3 <= limits.ttft_ms
            and (tpot is None or tpot * 1e3 <= limits.tpot_ms))
