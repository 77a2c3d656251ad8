"""The MLPerf LLM benchmarks' datasets as published (sample counts, output means and caps) and
their Server / Interactive latency limits: what sim/published.py's MLPerf rows run against.
Per-sample input lengths: sim/mlperf_lengths.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetLengths:
    benchmark: str
    samples: int | None
    isl_mean: float | None
    osl_mean: float | None
    isl_max: int | None
    osl_max: int | None
    source: str
    osl_observed: float | None = None  # tokens/s over samples/s of one published Offline run
    note: str = ""


_INF = "github.com/mlcommons/inference @b66003e"

DATASETS: tuple[DatasetLengths, ...] = (
    DatasetLengths(
        "deepseek-r1", 4388, None, 3886.2274, 3136, 20000,
        f"{_INF}: loadgen/mlperf.conf performance_sample_count 4388; language/deepseek-r1/README.md reference "
        "eval mean-output-tok-len 3886.2274 over 4388 samples; utils/backend_registry.py MAX_ISL=3136, MAX_OSL=20000",
        osl_observed=647076 / 172.442,
        note="osl_observed: v6.0 NVIDIA GB300x72 Offline log (647,076 tok/s, 172.442 samples/s)",
    ),
    DatasetLengths(
        "llama3.1-405b", 8313, None, 684.68, None, 2000,
        f"{_INF}: mlperf.conf 8313 samples; language/llama3.1-405b/README.md FP16 reference tokens_per_sample "
        "684.68; SUT_VLLM.py max_tokens=2000 (reference generation cap, not a dataset statistic)",
        osl_observed=19511.7 / 30.5416,
        note="osl_observed: v6.0 NVIDIA GB300x72 Offline log (19,511.7 tok/s, 30.5416 samples/s)",
    ),
    DatasetLengths(
        "llama2-70b", 24576, None, 294.45, 1023, 1024,
        f"{_INF}: mlperf.conf 24576 samples; language/llama2-70b/README.md FP16 reference 'Tokens per sample: "
        "294.45'; processorca.py keeps input and reference-output lengths < 1024; SUT.py max_new_tokens=1024",
        osl_observed=1126850 / 4126.88,
        note="osl_observed: v6.0 NVIDIA GB300x72 Offline log (1.12685e6 tok/s, 4126.88 samples/s)",
    ),
    DatasetLengths(
        "llama3.1-8b", 13368, None, None, None, 128,
        f"{_INF}: mlperf.conf 13368 samples (5000 for llama3_1-8b-edge); SUT_VLLM.py max_tokens=128",
        osl_observed=160403 / 1243.49,
        note="README's gen_len 8167644 over 13368 samples counts characters (evaluation.py: len of decoded "
        "text), so no token mean is stated; osl_observed: v6.0 Lambda B200x8 Offline log (160,403 tok/s, "
        "1243.49 samples/s), one above the max_output_len 128 of NVIDIA's v6.0 "
        "code/llama3_1-8b/tensorrt/generation_config.json",
    ),
    DatasetLengths(
        "gpt-oss-120b", 6396, None, 1278.20, None, 10240,
        f"{_INF}: mlperf.conf performance_sample_count 6396 (accuracy set 4395); language/gpt-oss-120b/README.md "
        "performance config max_output_len=10240, reasoning_effort=low; TEST09 reference mean output 1278.20",
        osl_observed=1042980 / 797.384,
        note="osl_observed: v6.0 NVIDIA GB300x72 Offline log (1.04298e6 tok/s, 797.384 samples/s)",
    ),
)
"""No file in the MLCommons inference repository states a mean or median input length for any of
these benchmarks, so isl_mean is None throughout. The per-sample input lengths are public
elsewhere: sim/mlperf_lengths.py holds their distributions (DeepSeek-R1, Llama-3.1-405B and -8B,
Llama-2-70B; not gpt-oss-120b) with the source."""

MLPERF_LATENCY_LIMITS: dict[str, dict[str, tuple[float, float]]] = {
    "llama2-70b": {"server": (2000, 200), "interactive": (450, 40)},
    "llama3.1-405b": {"server": (6000, 175), "interactive": (4500, 80)},
    "llama3.1-8b": {"server": (2000, 100), "interactive": (500, 30)},
    "deepseek-r1": {"server": (2000, 80), "interactive": (1500, 15)},
    "gpt-oss-120b": {"server": (3000, 80), "interactive": (2000, 15)},
}
"""(ttft_ms, tpot_ms) at the 99th percentile (*.Server.target_latency_percentile = 99), from
github.com/mlcommons/inference @b66003e loadgen/mlperf.conf (mlperf.conf at the root links to it)."""
