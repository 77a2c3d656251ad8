"""Published MLPerf Server runs' latencies at their own rates: what ``sim validate --latency`` checks.

A Server run's log states, beside its throughput, the rate LoadGen scheduled and what the engine
served at that rate: TTFT and TPOT percentiles. The throughput rows (sim/published.py) check the
rate a deployment sustains; these check the step underneath it. By Little's law a run held
(completed tokens/s x mean TPOT) sequences in flight, each decoding one token per step, so the
published pair (sequences in flight, TPOT) is one point of the engine's step time against its batch.
Submitters choose their rates below the limits too (CoreWeave's 8 x GB300 run at 12.03 QPS,
Nebius's at 17.41, on the same per-GPU config), which gives several points per hardware kind.

The check simulates one instance of the run's deployment (its published layout, batch per GPU and
per-rank token budget) fed its share of the run's rate (Poisson: a random share of a Poisson stream
is one), as many queries as its share of the log's count, and compares TPOT p50, TTFT p99 and the
sequences in flight (both sides by Little's law). A simulated step that is a little fast holds fewer
sequences at the same rate and so runs faster still; ``step_at_published_batch`` takes that feedback
out: the cost model's step with the published run's own sequences in flight, against its mean TPOT.

The DeepSeek-R1 records are from the MLPerf Inference v6.0 results repository
(mirrored at gbeezybez/inference_results_v6.0 @232fbf9): ``closed/<org>/results/<system>/deepseek-r1/
Server/performance/run_1/mlperf_log_summary.txt`` for the figures, ``closed/<org>/configs/<system
without _TRT>/Server/deepseek-r1.py`` for the batch (``gpu_batch_size``) and the token budget
(``max_num_tokens``; the build flags' where the runtime flags name a larger one, as in the GB300
racks' 4,608 against 3,456) and the attention-DP prompt balancing (``adp_balancing_*``); every one of
these configs runs TP8 EP8 attention DP per 8-GPU instance with ``adp_balancing_enable: True`` and
``enable_chunked_context: False``, under NVIDIA's harness, which leaves TensorRT-LLM's overlap
scheduler on (``PublishedResult.overlap_scheduler``), and the simulation runs them so. The B300 systems' seven
runs (NVIDIA's, Nebius's, Cisco's, Dell's two, GigaComputing's and Quanta's) all run NVIDIA's B300 config
(batch 640, 4,608 tokens, ``stream_interval`` 20) at rates of 9.52-16.29 QPS.

``DEEPSEEK_RUNS_V51`` are the MLPerf v5.1 DeepSeek-R1 Server runs with logs, read the same way from
mlcommons/inference_results_v5.1 @965182b; they ran TensorRT-LLM of August 2025 and are simulated at
that kernel generation (sim/kernels.py, whose scale they and the v6.0 records give).

The dense records (``DENSE_RUNS``: Llama-3.1-8B, Llama-2-70B and Llama-3.1-405B, the Server rows of
sim/published.py with logs, a modelled layout and a published config, and the Interactive runs of Dell's
Llama-2-70B and GigaComputing's Llama-2-70B and Llama-3.1-8B, Server runs under tighter limits) are read the
same way from the v6.0 repository,
mlcommons/inference_results_v5.1 @965182b and mlcommons/inference_results_v4.1 @198fc46 (its configs:
``closed/NVIDIA/configs/llama2-70b/``). Each runs one TensorRT-LLM instance per TP group (TP1; TP2 on
the H100; Llama-3.1-405B TP2 on GB300 and B300, TP4 on B200, its all-reduces fused), no attention DP; the
v5.1 and v6.0 configs chunk prompts (``enable_chunked_context: True``), v4.1's do not name it
(TensorRT-LLM's default: off). The v4.1 and v5.1 runs ran the C++ executor, without the overlap
scheduler (sim/published_harness.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.hardware import Hardware, get_hardware
from tokenmill.sim.host_rates import host_seq_seconds
from tokenmill.sim.jobs import run_all
from tokenmill.sim.kernels import step_scale
from tokenmill.sim.mlperf_lengths import dataset_means, length_draws
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import PRECISION_BYTES_KV, Deployment, Workload, predict
from tokenmill.sim.published_harness import runs_overlap_scheduler
from tokenmill.sim.scenarios import MLPERF_MIN_DURATION_S
from tokenmill.sim.shapes import PrefillChunk, StepShape


@dataclass(frozen=True)
class ServedRun:
    """One published Server run: its deployment, its rate and what it served."""

    org: str
    system: str
    hardware: str
    num_gpus: int
    qps: float
    """LoadGen's "Scheduled samples per second", the whole system's."""
    completed_qps: float
    """Its "Completed samples per second" (below ``qps`` where the run ended with queries in flight)."""
    queries: int
    """The log's min_query_count, the whole system's."""
    tokens_per_s: float
    """"Completed tokens per second", the whole system's."""
    tpot_mean_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    ttft_p99_ms: float
    batch_per_rank: int
    """The config's gpu_batch_size: TensorRT-LLM's max_batch_size per attention-DP rank (per instance
    without attention DP)."""
    max_num_tokens: int
    """The config's per-rank step budget."""
    adp_balance: tuple[int, int] | None = (3, 9)
    """The config's attention-DP prompt balancing (``adp_balancing_batching_wait_iters``,
    ``adp_balancing_timeout_iters``; sim/adp_balance.py); None without attention DP."""
    model: str = "deepseek-r1"
    instance_gpus: int = 8
    parallel: Parallel = Parallel(tp=8, ep=8, attention_dp=True)
    precision: str = "fp4"
    chunked_prefill: bool = False
    """The config's ``enable_chunked_context``."""
    round: str = "v6.0"
    kv_free_fraction: float = 0.9
    """The config's ``kvcache_free_gpu_mem_frac`` (sim/published_kv.py): the KV cache's share of the
    memory the weights and the runtime's buffers leave free."""
    kernels: str = "v6.0"
    """The TensorRT-LLM generation its steps are priced at (sim/kernels.py)."""
    fused_allreduce: bool = False
    """The config fuses the tensor-parallel all-reduces into the GEMMs (the Llama-3.1-405B runs'
    ``gemm_allreduce_plugin``; sim/published.py ``PublishedResult.fused_allreduce``)."""
    stream_interval: int = 1
    """The config's ``stream_interval`` (NVIDIA's harness default: 1, every token streamed)."""
    host_stream_rate: float | None = None
    """Responses/s of the instance's host (sim/host_path.py); None: not modelled (the records leave it
    out: benchmarks/host_rate_fit.py reads each run's from its TTFT)."""

    @property
    def host_seq_s(self) -> float | None:
        """The host's seconds per sequence of a step (predict.py ``Deployment.host_seq_s``): a Llama run's,
        from the DeepSeek-R1 runs' response rates (sim/host_rates.py ``host_seq_seconds``); None for
        DeepSeek-R1, whose host is its response stream (``host_stream_rate``)."""
        if not self.model.startswith("llama"):
            return None
        return host_seq_seconds(self.round, self.org, self.system, self.hardware)

    @property
    def overlap_scheduler(self) -> bool:
        """TensorRT-LLM's overlap scheduler: on but in the executor-core runs (sim/published_harness.py)."""
        return runs_overlap_scheduler(self.round, self.model)

    @property
    def max_num_seqs(self) -> int:
        """The instance's batch limit: ``batch_per_rank`` on each attention-DP rank."""
        return self.batch_per_rank * (self.parallel.tp if self.parallel.attention_dp else 1)

    @property
    def instances(self) -> int:
        return self.num_gpus // self.instance_gpus

    @property
    def output_mean(self) -> float:
        """Tokens per completed query, as this run's log counts them. Answers end at the model's own
        end of text, so a run's mean differs from the dataset's (Llama-2-70B: 274 in FP4, 290-294 in FP8)."""
        return self.tokens_per_s / self.completed_qps

    @property
    def in_flight(self) -> float:
        """Sequences per instance by Little's law: tokens/s x mean TPOT (one token per step each)."""
        return self.tokens_per_s / self.instances * self.tpot_mean_ms / 1e3


_GB300 = "GB300-NVL72_GB300-288GB_aarch64"
_GB200 = "GB200-NVL72_GB200-186GB_aarch64"

# (org, system, hardware, GPUs; scheduled and completed QPS, queries, completed tokens/s, TPOT mean / p50 /
# p99 ms, TTFT p99 ms, batch per rank, per-rank max_num_tokens[, prompt balancing where not 3 / 9]; the
# KV cache's free-memory fraction where the config sets 0.95, not 0.9; the stream interval where the
# config sets one: these runs' GB300 configs 100, their B200 ones 20, the GB200 racks' none, so 1)
_F95 = dict(kv_free_fraction=0.95)
_S100, _S20 = dict(stream_interval=100), dict(stream_interval=20)
DEEPSEEK_RUNS: tuple[ServedRun, ...] = (
    ServedRun("Nebius", f"{_GB300}x8_TRT", "gb300", 8,
              17.41, 17.18, 105_312, 64_509.99, 72.42, 76.02, 77.71, 1_427.7, 640, 4608, **_F95, **_S100),
    ServedRun("CoreWeave", f"{_GB300}x8_TRT", "gb300", 8,
              12.03, 11.88, 105_312, 44_589.69, 57.01, 58.10, 59.67, 776.3, 640, 4608, **_F95, **_S100),
    ServedRun("Nebius", f"{_GB300}x72_TRT", "gb300", 72,
              165.04, 153.33, 219_400, 575_579.74, 62.55, 63.00, 77.88, 1_014.8, 640, 3456, **_F95, **_S100),
    ServedRun("NVIDIA", f"{_GB300}x72_TRT", "gb300", 72,
              110.02, 106.66, 219_400, 400_436.77, 56.15, 57.68, 76.06, 1_001.9, 640, 3456, **_F95, **_S100),
    ServedRun("NVIDIA", f"{_GB300}x288_TRT", "gb300", 288,
              429.73, 414.63, 1_053_120, 1_555_108.58, 61.51, 55.53, 60.64, 742.5, 640, 3456, **_F95, **_S100),
    ServedRun("NVIDIA", f"{_GB200}x72_TRT", "gb200", 72,
              110.06, 89.59, 210_624, 336_106.48, 58.31, 59.96, 79.34, 1_158.9, 512, 3456),
    ServedRun("CoreWeave", f"{_GB200}x64_TRT", "gb200", 64,
              96.05, 83.08, 210_624, 311_531.04, 56.62, 59.32, 67.51, 974.5, 512, 3456),
    ServedRun("Google", f"{_GB200}x72_TRT", "gb200", 72,
              45.02, 42.45, 210_624, 156_781.10, 51.11, 53.59, 60.06, 920.5, 512, 3456),
    ServedRun("Nebius", "nebius_b200_n1", "b200", 8,
              14.03, 13.81, 105_312, 51_692.89, 71.86, 73.83, 76.62, 1_195.0, 640, 4608, **_F95, **_S20),
    ServedRun("Dell", "XE9780_x86_B200-SXM-180GBx8_TRT", "b200", 8,
              11.10, 10.95, 26_382, 40_949.45, 60.14, 63.59, 66.82, 877.2, 512, 3456, (2, 6), **_S20),
    ServedRun("Google", "B200-SXM-180GBx8_TRT", "b200", 8,
              11.10, 10.96, 26_382, 41_027.93, 53.62, 57.13, 59.18, 563.9, 512, 3456, (2, 6), **_S20),
    ServedRun("NVIDIA", "B300-SXM-270GBx8_TRT", "b300", 8,
              11.53, 11.39, 105_312, 42_721.39, 59.39, 60.68, 61.66, 806.0, 640, 4608, **_F95, **_S20),
    ServedRun("Nebius", "nebius_b300_n1", "b300", 8,
              16.29, 16.05, 57_044, 60_413.44, 69.31, 74.49, 79.65, 1_171.4, 640, 4608, **_F95, **_S20),
    ServedRun("Cisco", "C880A_M8_B300_288GBx8_TRT", "b300", 8,
              16.04, 15.60, 105_312, 58_553.28, 73.87, 78.15, 79.74, 1_197.6, 640, 4608, **_F95, **_S20),
    ServedRun("Dell", "XE9780L-B300-SXM-270GBx8_TRT", "b300", 8,
              12.53, 12.37, 105_312, 46_510.56, 57.58, 58.86, 60.20, 750.2, 640, 4608, **_F95, **_S20),
    ServedRun("Dell", "XE9780_x86_B300-SXM-270GBx8_TRT", "b300", 8,
              12.53, 12.37, 105_312, 46_513.06, 56.05, 57.35, 58.40, 724.4, 640, 4608, **_F95, **_S20),
    ServedRun("GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "b300", 8,
              9.52, 9.46, 105_312, 35_552.55, 52.60, 53.06, 54.44, 736.8, 640, 4608, **_F95, **_S20),
    ServedRun("Quanta_Cloud_Technology", "D75H-10U_B300-270GBx8_TRT", "b300", 8,
              9.52, 9.46, 105_312, 35_435.70, 43.53, 43.94, 44.72, 554.1, 640, 4608, **_F95, **_S20),
)

# MLPerf v5.1 (mlcommons/inference_results_v5.1 @965182b, the same files; the CoreWeave system's
# config directory is GB300-NVL8-CoreWeave): every DeepSeek-R1 Server run with a log on a profiled GPU.
_V51 = dict(round="v5.1", kernels="v5.1")
DEEPSEEK_RUNS_V51: tuple[ServedRun, ...] = (
    ServedRun("NVIDIA", f"{_GB300}x72_TRT", "gb300", 72,
              60.08, 56.95, 219_400, 209_327.68, 63.72, 66.14, 70.85, 1_939.7, 512, 3456, (2, 6), **_V51),
    ServedRun("CoreWeave", "GB300-NVL8-CoreWeave_TRT", "gb300", 8,
              6.34, 6.13, 43_880, 22_545.12, 63.59, 65.34, 67.34, 1_210.2, 1536, 3456, (2, 6), **_V51, **_F95),
    ServedRun("NVIDIA", f"{_GB200}x72_TRT", "gb200", 72,
              45.06, 44.76, 210_624, 167_578.06, 69.57, 61.29, 64.45, 1_246.0, 512, 3456, **_V51),
    ServedRun("NVIDIA", "B200-SXM-180GBx8_TRT", "b200", 8,
              5.02, 4.96, 26_328, 18_592.24, 66.46, 69.90, 72.18, 1_695.9, 512, 3456, **_V51),
    ServedRun("Dell", "XE9680L_B200_SXM_180GBx8_TRT", "b200", 8,
              3.81, 3.78, 26_328, 13_913.33, 61.00, 61.99, 64.87, 1_631.1, 512, 3456, (2, 6), **_V51),
    ServedRun("Dell", "XE9685L_B200_SXM_180GBx8_TRT", "b200", 8,
              3.81, 3.79, 26_328, 13_963.01, 59.93, 60.88, 63.38, 1_834.6, 512, 3456, **_V51),
    ServedRun("GigaComputing", "G894-SD1_B200-SXM-180GBx8_TRT", "b200", 8,
              4.31, 4.28, 26_328, 15_977.87, 58.45, 59.33, 61.74, 1_773.8, 768, 3456, chunked_prefill=True, **_V51),
    ServedRun("Google", "B200-SXM-180GBx8_TRT", "b200", 8,
              4.01, 3.98, 26_328, 14_630.74, 61.27, 62.25, 65.04, 1_803.0, 512, 3456, **_V51),
)

_TP1, _TP2, _TP4 = Parallel(tp=1), Parallel(tp=2), Parallel(tp=4)
_8B = dict(model="llama3.1-8b", instance_gpus=1, parallel=_TP1, adp_balance=None, chunked_prefill=True)
_70B = dict(model="llama2-70b", instance_gpus=1, parallel=_TP1, adp_balance=None, chunked_prefill=True)
_405B = dict(model="llama3.1-405b", adp_balance=None, chunked_prefill=True, fused_allreduce=True, round="v5.1", **_F95)

# The same fields; queries: sim/published.py's count for the row (the log's min_query_count).
DENSE_RUNS: tuple[ServedRun, ...] = (
    ServedRun("Lambda_SIT", "B200-SXM-180GBx8_TRT", "b200", 8,
              1009.39, 1007.85, 614_928, 130_007.69, 16.97, 17.17, 23.48, 966.4, 6000, 12000, **_8B),
    ServedRun("NVIDIA", "B200-SXM-180GBx8_TRT", "b200", 8,
              999.47, 996.53, 601_560, 128_540.95, 28.48, 29.42, 42.11, 1_749.4, 6000, 12000, **_8B, round="v5.1"),
    ServedRun("HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "h200", 8,
              504.93, 503.21, 307_464, 64_914.57, 74.64, 75.40, 90.35, 371.1, 2048, 12000, **_8B, precision="fp8",
              round="v5.1", kv_free_fraction=0.99),
    ServedRun("NVIDIA", "B200-SXM-180GBx8_TRT", "b200", 8,
              363.79, 361.30, 884_736, 99_123.04, 123.32, 126.10, 132.37, 436.3, 2048, 3584, **_70B, round="v5.1",
              **_F95),
    ServedRun("Nebius", "H200-SXM-141GBx8_TRT", "h200", 8,
              116.59, 115.59, 294_912, 34_029.38, 184.20, 188.13, 195.58, 1_717.3, 2048, 1536, **_70B,
              precision="fp8", round="v5.1"),
    ServedRun("NVIDIA", "H200-SXM-141GBx8_TRT", "h200", 8,
              101.25, 100.35, 245_760, 29_228.22, 123.26, 124.29, 146.04, 452.7, 896, 4096,
              **{**_70B, "chunked_prefill": False}, precision="fp8", round="v4.1"),
    ServedRun("NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "h100", 8,
              75.10, 74.42, 196_608, 21_605.79, 154.96, 156.42, 175.35, 461.3, 1024, 4096,
              **{**_70B, "instance_gpus": 2, "parallel": _TP2, "chunked_prefill": False}, precision="fp8",
              round="v4.1"),
    # Dell's H200 NVL cards (v6.0; configs closed/Dell/configs/XE7740_H200_NVL_141GBx8/): Llama-3.1-8B and
    # Llama-2-70B Server, and Llama-2-70B's Interactive run (a Server run under tighter limits: batch 256,
    # 256-token budget).
    ServedRun("Dell", "XE7740_H200_NVL_141GBx8_TRT", "h200-nvl", 8,
              350.15, 349.43, 213_888, 45_075.81, 16.29, 16.60, 24.65, 1_709.7, 2048, 1536, **_8B, precision="fp8",
              kv_free_fraction=0.95),
    ServedRun("Dell", "XE7740_H200_NVL_141GBx8_TRT", "h200-nvl", 8,
              99.90, 98.81, 245_760, 29_084.87, 153.90, 157.14, 167.20, 620.7, 2048, 1536, **_70B, precision="fp8"),
    ServedRun("Dell", "XE7740_H200_NVL_141GBx8_TRT", "h200-nvl", 8,
              56.22, 56.01, 73_728, 16_343.77, 35.19, 35.66, 38.11, 278.6, 256, 256, **_70B, precision="fp8"),
    # NVIDIA's B300 node (v6.0; closed/NVIDIA/configs/B300-SXM-270GBx1 and x2): Llama-2-70B TP1 (batch 3,072,
    # 4,608 tokens), Llama-3.1-405B TP2 (batch 2,048, 1,024 tokens, all-reduces fused); its Llama-3.1-8B
    # config, whose batch the record needs, is not published.
    ServedRun("NVIDIA", "B300-SXM-270GBx8_TRT", "b300", 8,
              399.62, 393.11, 737_280, 107_317.80, 123.94, 118.74, 154.88, 471.9, 3072, 4608, **_70B, **_F95),
    ServedRun("NVIDIA", "B300-SXM-270GBx8_TRT", "b300", 8,
              2.31, 2.29, 8_313, 1_460.25, 118.82, 119.86, 128.00, 4_454.5, 2048, 1024,
              **{**_405B, "round": "v6.0"}, instance_gpus=2, parallel=_TP2),
    # GigaComputing's B300 Interactive runs (v6.0; configs closed/GigaComputing/configs/G894-SD3-AAX7_B300-SXM-
    # 270GBx8/Interactive/): Llama-2-70B TP1 (batch 768, 768 tokens), Llama-3.1-8B TP1 (batch 6,000, 12,000).
    ServedRun("GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "b300", 8,
              240.11, 238.01, 294_912, 65_464.82, 29.31, 29.18, 33.18, 117.4, 768, 768, **_70B, **_F95),
    ServedRun("GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "b300", 8,
              999.39, 997.15, 601_560, 128_632.63, 19.33, 19.44, 22.04, 54.9, 6000, 12000, **_8B),
    # Llama-3.1-405B, v5.1: the three runs with a layout the simulator models, on one C++ executor per
    # TP group (configs: NVIDIA's GB300 rack TP2, its GB200 rack and B200 node TP4; batch 2048, 256 and
    # 256, budgets 1,536, 2,048 and 2,048 tokens; sim/published_harness.py). Nebius's H200 run (TP8) is
    # left out: its 8,313 queries arrive over 5 hours at 0.45 QPS (its row's peak search ran over an hour).
    ServedRun("NVIDIA", f"{_GB300}x72_TRT", "gb300", 72,
              19.55, 19.46, 99_756, 12_248.42, 75.74, 75.50, 100.14, 4_745.8, 2048, 1536,
              **_405B, instance_gpus=2, parallel=_TP2),
    ServedRun("NVIDIA", f"{_GB200}x72_TRT", "gb200", 72,
              17.73, 17.72, 33_252, 11_614.28, 104.26, 104.77, 128.01, 4_358.8, 256, 2048,
              **_405B, instance_gpus=4, parallel=_TP4),
    ServedRun("NVIDIA", "B200-SXM-180GBx8_TRT", "b200", 8,
              1.90, 1.90, 8_313, 1_240.42, 101.34, 100.80, 138.24, 5_134.2, 256, 2048,
              **_405B, instance_gpus=4, parallel=_TP4),
)

RUNS: tuple[ServedRun, ...] = DEEPSEEK_RUNS + DEEPSEEK_RUNS_V51 + DENSE_RUNS


@dataclass(frozen=True)
class LatencyCheck:
    run: ServedRun
    tpot_p50_ms: float
    tpot_p99_ms: float
    ttft_p99_ms: float
    in_flight: float
    """The simulated instance's sequences in flight, by the same rule as ``ServedRun.in_flight``
    (its tokens/s x mean TPOT): the mean running batch per step would weigh the short steps of the
    ramp-up and drain more than their time."""
    step_at_published_ms: float
    """The cost model's mean step with the published run's own sequences in flight
    (``step_at_published_batch``): the step without the scheduler's feedback."""

    @property
    def tpot_ratio(self) -> float:
        return self.tpot_p50_ms / self.run.tpot_p50_ms

    @property
    def step_ratio(self) -> float:
        """Simulated step at the published batch / the published mean TPOT (one token per step)."""
        return self.step_at_published_ms / self.run.tpot_mean_ms


def check_run(run: ServedRun, duration_s: float = MLPERF_MIN_DURATION_S) -> LatencyCheck:
    """One instance of ``run`` at its share of the published rate and count."""
    isl, _, osl_max = dataset_means(run.model)
    osl = run.output_mean
    d = Deployment(run.instance_gpus, run.parallel, run.precision, max_num_seqs=run.max_num_seqs,
                   max_num_batched_tokens=run.max_num_tokens, chunked_prefill=run.chunked_prefill,
                   adp_balance=run.adp_balance, overlap_scheduler=run.overlap_scheduler, kernels=run.kernels,
                   fused_allreduce=run.fused_allreduce,
                   kv_free_fraction=run.kv_free_fraction, host_stream_rate=run.host_stream_rate,
                   stream_interval=run.stream_interval, host_seq_s=run.host_seq_s)
    w = Workload("server", isl, osl, preset=run.model, dataset=run.model, osl_max=osl_max, duration_s=duration_s,
                 target_qps=run.qps / run.instances, min_queries=-(-run.queries // run.instances))
    f = predict(get_model(run.model), get_hardware(run.hardware), d, w)
    tpot = f["tpot_ms"]
    return LatencyCheck(run, tpot["p50"], tpot["p99"], f["ttft_ms"]["p99"], f["tokens_per_s"] * tpot["mean"] / 1e3,
                        step_at_published_batch(run))


def step_at_published_batch(run: ServedRun, steps: int = 200, seed: int = 0,
                             hardware: Hardware | None = None) -> float:
    """The cost model's mean step (ms) on one instance of ``run`` holding the run's own sequences
    in flight (``ServedRun.in_flight``), as the published mean TPOT is the run's mean step, and at least
    the host's time for its sequences (``ServedRun.host_seq_s``); at the run's kernel generation
    (sim/kernels.py: ``replace(run, kernels="v6.0")`` for the bare model's).

    Each step draws its decodes' contexts as a moment of the run sees them: a request picked in
    proportion to its output length (a long answer is in flight longer), at a uniform point of
    that answer, on its prompt (the dataset's draws, sim/mlperf_lengths.py); and its prompts as
    Poisson arrivals at the run's completed rate per instance over one published mean TPOT: whole
    (the DeepSeek-R1 configs do not chunk prompts), or, where the config chunks them, in first-come
    first-served chunks filling what the step's decodes leave of its budget (``_fill_budget``; the
    Llama-3.1-8B and Llama-2-70B budgets hold a step's mean arrivals whole, Llama-3.1-405B's 1,536-2,048
    tokens a sixth of its mean prompt), over enough steps for 200 arrivals at least. ``hardware``: a
    profile in place of the run's (benchmarks/sim_tile_steps.py prices the steps without the tile rule)."""
    arch, hw = get_model(run.model), hardware or get_hardware(run.hardware)
    _, _, osl_max = dataset_means(run.model)
    prompt, output = length_draws(run.model, run.output_mean, osl_max)
    rng = np.random.default_rng(seed)
    batch = max(1, round(run.in_flight))
    pool = 20 * batch  # requests to pick the in-flight ones from
    isl = np.array([prompt(rng) for _ in range(pool)])
    out = np.array([output(rng) for _ in range(pool)])
    arrivals = run.completed_qps / run.instances * run.tpot_mean_ms / 1e3
    kv_bytes, host_seq_s = PRECISION_BYTES_KV[run.precision], run.host_seq_s or 0.0
    if run.chunked_prefill:
        steps = max(steps, int(np.ceil(200 / arrivals)))
    waiting: list[list[int]] = []  # [prompt tokens, tokens done] of the prompts not yet prefilled, oldest first
    total = 0.0
    for _ in range(steps):
        pick = rng.choice(pool, size=batch, p=out / out.sum())
        contexts = isl[pick] + rng.integers(0, out[pick])
        waiting += [[prompt(rng), 0] for _ in range(rng.poisson(arrivals))]
        if run.chunked_prefill:
            prefills = _fill_budget(waiting, run.max_num_tokens - batch)
            waiting = [w for w in waiting if w[1] < w[0]]
        else:  # whole prompts, each in the step it arrives
            prefills, waiting = tuple(PrefillChunk(p, 0) for p, _ in waiting), []
        cost = step_cost(arch, StepShape(contexts, prefills), run.parallel, run.precision, kv_bytes)
        device = step_time(cost, hw, run.precision, run.fused_allreduce).total_s * step_scale(run.kernels)
        total += max(device, host_seq_s * (batch + len(prefills)))
    return total / steps * 1e3


def _fill_budget(waiting: list[list[int]], budget: int) -> tuple[PrefillChunk, ...]:
    """First-come first-served chunks of the ``waiting`` prompts ([tokens, done], advanced in
    place) up to ``budget`` tokens: TensorRT-LLM's FIRST_COME_FIRST_SERVED context chunking."""
    chunks = []
    for w in waiting:
        if budget <= 0:
            break
        take = min(w[0] - w[1], budget)
        chunks.append(PrefillChunk(take, w[1]))
        w[1] += take
        budget -= take
    return tuple(chunks)


def check_runs(runs: tuple[ServedRun, ...] = RUNS, jobs: int = 1, progress=None) -> list[LatencyCheck]:
    """``check_run`` over ``runs`` (``jobs`` processes), in their order; ``progress(1)`` after each."""
    return run_all(check_run, [(r,) for r in runs], jobs, on_done=(lambda i, c: progress(1)) if progress else None)


def latency_table(checks: list[LatencyCheck]) -> str:
    lines = ["| model | system | round | GPUs | QPS per instance | in flight, published / simulated | "
             "TPOT p50 ms, published / simulated | sim / published | "
             "step at the published batch: TPOT mean ms, published / simulated | "
             "sim / published | TTFT p99 ms, published / simulated |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        r = c.run
        lines.append(f"| {r.model} | {r.org} {r.system} ({r.hardware}) | {r.round} | {r.num_gpus} | "
                     f"{r.qps / r.instances:.2f} | "
                     f"{r.in_flight:,.0f} / {c.in_flight:,.0f} | {r.tpot_p50_ms:.1f} / {c.tpot_p50_ms:.1f} | "
                     f"{c.tpot_ratio:.2f} | {r.tpot_mean_ms:.1f} / {c.step_at_published_ms:.1f} | "
                     f"{c.step_ratio:.2f} | {r.ttft_p99_ms:,.0f} / {c.ttft_p99_ms:,.0f} |")
    return "\n".join(lines)
