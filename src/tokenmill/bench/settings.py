"""How one benchmark run is configured, and its translation into LoadGen's
TestSettings. Scenario names are MLPerf's; 'interactive' is LoadGen's Server
scenario with the preset's tighter latency limits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tokenmill.bench.presets import (DEFAULT_PRESET, OFFICIAL_MIN_DURATION_S, PRESETS, SERVER_PERCENTILE,
                                     SINGLESTREAM_PERCENTILE, limits_for)

SCENARIOS = ("offline", "server", "interactive", "singlestream")
MODES = ("performance", "accuracy")
# LoadGen's early-stopping test for a p99 bound needs this many queries (all
# within the limits) before it can pass; fewer and a Server run is INVALID
# whatever its latencies. SingleStream's p90 needs 64.
SERVER_EARLY_STOPPING_MIN_QUERIES = 460
SINGLESTREAM_EARLY_STOPPING_MIN_QUERIES = 64
# Short enough for a 2-core CPU; --official sets MLPerf's 600 s.
DEFAULT_MIN_DURATION_S = 20.0


@dataclass(frozen=True)
class BenchSettings:
    scenario: str = "offline"
    """offline | server | interactive | singlestream."""
    mode: str = "performance"
    """performance (timed, judged) | accuracy (every sample once, outputs logged)."""
    preset: str = DEFAULT_PRESET
    """Source of the TTFT/TPOT limits (see presets.PRESETS)."""
    ttft_ms: float | None = None
    """p99 TTFT limit; None: the preset's for this scenario."""
    tpot_ms: float | None = None
    """p99 TPOT limit; None: the preset's for this scenario."""
    target_qps: float | None = None
    """Server/interactive: Poisson arrival rate. Offline: LoadGen's expected QPS
    (sizes the one big query). Required for server and interactive."""
    min_duration_s: float | None = None
    """None: DEFAULT_MIN_DURATION_S, or MLPerf's 600 s with ``official``."""
    min_query_count: int | None = None
    """None: offline the whole workload; server/interactive 460 and
    singlestream 64 (the least LoadGen's early stopping can accept)."""
    max_duration_s: float | None = None
    """Stop issuing after this long (None: no cap)."""
    official: bool = False
    """MLPerf's run-length rules: 600 s minimum, the preset model's Offline query count."""
    max_concurrency: int | None = None
    """Cap on queries in flight inside the SUT (a concurrency sweep point);
    queries above it wait, and the wait counts in their TTFT."""
    devices: int = 1
    """Accelerators (or machines) the target uses, for per-device figures and cost."""
    price_per_hour: float | None = None
    """USD per device-hour, for cost per million tokens (None: not reported)."""
    seed: int = 0
    """LoadGen's sample-order and arrival-schedule seed."""

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario: must be one of {SCENARIOS}, got {self.scenario!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, got {self.mode!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset: unknown {self.preset!r}; choose from {', '.join(PRESETS)}")
        for name in ("ttft_ms", "tpot_ms", "target_qps", "min_duration_s", "max_duration_s", "price_per_hour"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
        for name in ("min_query_count", "max_concurrency", "devices"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if self.scenario in ("server", "interactive") and self.target_qps is None and self.mode == "performance":
            raise ValueError(f"target_qps: the {self.scenario} scenario needs a target QPS "
                             "(--target-qps, or --find-peak to search for it)")

    @property
    def limits(self):
        base = limits_for(self.preset, self.scenario)
        return type(base)(self.ttft_ms or base.ttft_ms, self.tpot_ms or base.tpot_ms)

    @property
    def judged_on_latency(self) -> bool:
        """Whether LoadGen holds the run to the TTFT/TPOT limits."""
        return self.scenario in ("server", "interactive")

    def effective_min_duration_s(self) -> float:
        if self.min_duration_s is not None:
            return self.min_duration_s
        return OFFICIAL_MIN_DURATION_S if self.official else DEFAULT_MIN_DURATION_S

    def effective_min_query_count(self, num_samples: int) -> int:
        if self.min_query_count is not None:
            return self.min_query_count
        if self.scenario == "offline":
            return PRESETS[self.preset].offline_min_query_count if self.official else num_samples
        if self.scenario == "singlestream":
            return SINGLESTREAM_EARLY_STOPPING_MIN_QUERIES
        return SERVER_EARLY_STOPPING_MIN_QUERIES

    def describe(self, num_samples: int) -> dict:
        """Everything the run used, resolved, for the results file."""
        d = asdict(self)
        limits = self.limits
        d.update(ttft_ms=limits.ttft_ms, tpot_ms=limits.tpot_ms,
                 min_duration_s=self.effective_min_duration_s(),
                 min_query_count=self.effective_min_query_count(num_samples),
                 preset_note=PRESETS[self.preset].note)
        return d


def to_test_settings(s: BenchSettings, num_samples: int):
    """LoadGen TestSettings for this run (token latencies on)."""
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    ts.scenario = {"offline": lg.TestScenario.Offline, "singlestream": lg.TestScenario.SingleStream}.get(
        s.scenario, lg.TestScenario.Server)
    ts.mode = lg.TestMode.AccuracyOnly if s.mode == "accuracy" else lg.TestMode.PerformanceOnly
    ts.use_token_latencies = True
    limits = s.limits
    ts.ttft_latency = int(limits.ttft_ms * 1e6)  # ns
    ts.tpot_latency = int(limits.tpot_ms * 1e6)
    ts.server_target_latency_percentile = SERVER_PERCENTILE
    ts.single_stream_target_latency_percentile = SINGLESTREAM_PERCENTILE
    ts.min_duration_ms = int(s.effective_min_duration_s() * 1e3)
    ts.max_duration_ms = int(s.max_duration_s * 1e3) if s.max_duration_s else 0
    ts.min_query_count = s.effective_min_query_count(num_samples)
    if s.target_qps is not None:
        ts.server_target_qps = s.target_qps
        ts.offline_expected_qps = s.target_qps
    else:
        # Offline without a hint: LoadGen sizes its one query as
        # max(min_query_count, expected_qps x min_duration x 1.1); a tiny hint
        # makes that query exactly min_query_count samples (the workload).
        ts.offline_expected_qps = 0.01
    ts.single_stream_expected_latency_ns = int(1e9)
    ts.performance_sample_count_override = num_samples
    ts.qsl_rng_seed = ts.sample_index_rng_seed = ts.schedule_rng_seed = s.seed
    return ts
