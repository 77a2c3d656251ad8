"""Latency limits per model, as MLPerf Inference v6.0 sets them for its Server
and Interactive scenarios, plus defaults scaled for the embedded model on CPU.

LoadGen judges token latencies at the 99th percentile: a run meets its limits
when p99 TTFT <= ttft_ms and p99 TPOT <= tpot_ms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyLimits:
    ttft_ms: float
    """Time to first token, p99 bound."""
    tpot_ms: float
    """Time per output token after the first, p99 bound."""


@dataclass(frozen=True)
class Preset:
    name: str
    server: LatencyLimits
    interactive: LatencyLimits
    offline_min_query_count: int
    """MLPerf's Offline min_query_count for the model (used with --official)."""
    note: str


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("llama3.1-8b", LatencyLimits(2000, 100), LatencyLimits(500, 30), 13368, "MLPerf v6.0"),
    Preset("deepseek-r1", LatencyLimits(2000, 80), LatencyLimits(1500, 15), 4388, "MLPerf v6.0"),
    Preset("gpt-oss-120b", LatencyLimits(3000, 80), LatencyLimits(2000, 15), 6396, "MLPerf v6.0"),
    Preset("llama2-70b", LatencyLimits(2000, 200), LatencyLimits(450, 40), 24576, "MLPerf v6.0"),
    Preset("llama3.1-405b", LatencyLimits(6000, 175), LatencyLimits(4500, 80), 8313, "MLPerf v6.0"),
    # SmolLM2-135M on a 2-core CPU: one engine step over a full batch of decodes
    # takes tens of ms and a 128-token prefill ~0.1-0.3 s, so the GPU presets'
    # bounds would measure nothing but the CPU. These keep MLPerf's shape
    # (interactive ~4x tighter on TPOT, tighter on TTFT) at CPU scale.
    Preset("smollm2-cpu", LatencyLimits(2000, 200), LatencyLimits(1000, 50), 1024,
           "tokenmill default for the embedded model on CPU"),
)}
DEFAULT_PRESET = "smollm2-cpu"

# MLPerf's run-length rules (mlperf.conf): every scenario runs >= 10 minutes.
OFFICIAL_MIN_DURATION_S = 600.0
# SingleStream judges the 90th percentile of latency, Server the 99th.
SINGLESTREAM_PERCENTILE = 0.9
SERVER_PERCENTILE = 0.99


def limits_for(preset: str, scenario: str) -> LatencyLimits:
    """The preset's limits for 'server' or 'interactive' (other scenarios use the
    server limits for goodput only; LoadGen does not judge them)."""
    try:
        p = PRESETS[preset]
    except KeyError:
        raise ValueError(f"preset: unknown {preset!r}; choose from {', '.join(PRESETS)}") from None
    return p.interactive if scenario == "interactive" else p.server
