"""``tokenmill sim calibrate``: this machine's hardware profile, fitted to our own engine.

Two kinds of measurement, both on this machine:
1. microbenchmarks: memory read bandwidth (summing a 512 MiB tensor) and dense
   GEMM rate (1024^3 matmuls) in the engine's dtype: the profile's peaks;
2. our engine's own step times on the embedded model: decode steps at several
   batch sizes and a prefill chunk, each the median of repeated steps.

The profile's efficiency factors (memory, GEMM, per-step overhead) are then the
ones under which the cost model (cost.py) best reproduces the measured steps:
a grid search minimising the largest relative error, which is reported. The
profile is written to ``~/.cache/tokenmill/sim/this-machine.json`` and read by
``--hardware this-machine``.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path

from tokenmill.sim.hardware import Efficiency, Hardware

PROFILE_PATH = Path(os.environ.get("TOKENMILL_CACHE", Path.home() / ".cache" / "tokenmill")) / "sim" / \
    "this-machine.json"
DECODE_BATCHES = (1, 8, 32)
PREFILL_TOKENS = 256
CONTEXT = 64  # prompt tokens of each decoding request
DEFAULT_PRICE_PER_HOUR = 0.10
"""USD per hour: a nominal small cloud VM; pass --price-per-gpu-hour to tokenmill sim for your own."""


def load_this_machine() -> Hardware:
    if not PROFILE_PATH.is_file():
        raise ValueError(f"--hardware: no this-machine profile at {PROFILE_PATH}; run `tokenmill sim calibrate` first")
    return Hardware.from_dict(json.loads(PROFILE_PATH.read_text()))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measure_peaks(dtype) -> tuple[float, float]:
    """(memory read bytes/s, GEMM FLOP/s in ``dtype``), best of several runs."""
    import torch

    big = torch.ones(1 << 27, dtype=torch.float32)  # 512 MiB
    best_bw = 0.0
    for _ in range(5):
        start = time.perf_counter()
        big.sum()
        best_bw = max(best_bw, big.numel() * 4 / (time.perf_counter() - start))
    a = torch.randn(1024, 1024, dtype=dtype)
    best_flops = 0.0
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(4):
            a @ a
        best_flops = max(best_flops, 4 * 2 * 1024 ** 3 / (time.perf_counter() - start))
    return best_bw, best_flops


def measure_engine_steps(engine, repeats: int = 12) -> list[tuple[tuple[int, int], float]]:
    """((decode batch, prefill tokens), median step seconds) of our engine."""
    from tokenmill.sampling_params import SamplingParams

    points = []
    for batch in DECODE_BATCHES:
        params = SamplingParams(max_tokens=repeats + 4, temperature=0.0, ignore_eos=True)
        for i in range(batch):
            engine.add_request(None, [100 + i + j for j in range(CONTEXT)], params)
        while any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.core.scheduler.requests.values()):
            engine.step()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - start)
        while engine.has_unfinished_requests():
            engine.step()
        points.append(((batch, 0), statistics.median(times)))
    times = []
    for i in range(max(3, repeats // 4)):
        engine.add_request(None, [200 + i + j for j in range(PREFILL_TOKENS)], SamplingParams(max_tokens=1))
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
        while engine.has_unfinished_requests():
            engine.step()
    points.append(((0, PREFILL_TOKENS), statistics.median(times)))
    return points


def fit_efficiency(arch, base: Hardware, precision: str,
                   points: list[tuple[tuple[int, int], float]]) -> tuple[Efficiency, float]:
    """The (memory, gemm, overhead) efficiency under which the cost model's step
    times best match ``points`` (smallest largest relative error); returns it and that error."""
    from tokenmill.sim.cost import Parallel, step_cost, step_time
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    kv_bytes = 4.0 if precision == "fp32" else 2.0
    shapes = [StepShape(decode_contexts=(CONTEXT,) * batch) if batch else
              StepShape(prefills=(PrefillChunk(tokens, 0),)) for (batch, tokens), _ in points]
    costs = [step_cost(arch, s, Parallel(), precision, kv_bytes) for s in shapes]
    best = (float("inf"), None)
    grid = [x / 20 for x in range(1, 21)]
    overheads = [x * 1e-3 for x in range(0, 41)]
    for mem, gemm in itertools.product(grid, grid):
        hw = replace(base, efficiency=Efficiency(gemm=gemm, memory=mem, attention=gemm, comm=1.0,
                                                 step_overhead_s=0.0, collective_latency_s=0.0))
        bare = [step_time(c, hw, precision).total_s for c in costs]
        for overhead in overheads:
            error = max(abs((b + overhead) / measured - 1) for b, (_, measured) in zip(bare, points))
            if error < best[0]:
                best = (error, Efficiency(gemm=gemm, memory=mem, attention=gemm, comm=1.0,
                                          step_overhead_s=overhead, collective_latency_s=0.0))
    return best[1], best[0]


def calibrate(dtype_name: str = "float32", num_threads: int | None = None) -> tuple[Hardware, list, float]:
    """Measure, fit, write the profile; returns (profile, measured points, fit error)."""
    import torch

    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine
    from tokenmill.model.embedded import EMBEDDED_NAME

    engine = LLMEngine(EngineConfig(dtype=dtype_name, num_threads=num_threads))
    dtype = engine.core.dtype
    precision = {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype)
    if precision is None:
        raise ValueError(f"--dtype: calibrate measures float32 or bfloat16, got {dtype}")
    bw, flops = measure_peaks(dtype)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    base = Hardware(name="this-machine", memory_bytes=float(memory), memory_bw=bw, flops={precision: flops},
                    interconnect_bw=bw, scale_up_size=1, scale_out_bw=1e9, default_precision=precision,
                    price_per_hour=DEFAULT_PRICE_PER_HOUR,
                    sources=(f"tokenmill sim calibrate, {time.strftime('%Y-%m-%d')}: {_cpu_name()}, "
                             f"{torch.get_num_threads()} threads, {EMBEDDED_NAME} in {precision}",))
    points = measure_engine_steps(engine)
    from tokenmill.sim.models import get_model
    efficiency, error = fit_efficiency(get_model("smollm2-135m"), base, precision, points)
    profile = replace(base, efficiency=efficiency)
    PROFILE_PATH.parent.mkdir(parents=True, exist_ok=True)
    PROFILE_PATH.write_text(json.dumps(profile.to_dict(), indent=2))
    return profile, points, error
