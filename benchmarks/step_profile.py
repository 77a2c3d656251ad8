"""Where one decode step's time goes: wall time per step, and on CUDA the GPU's
busy time and the number of kernel launches (eager PyTorch launches every op
from Python; a step far longer than its GPU time is launch-bound).

    python -m benchmarks.step_profile --model dummy:smollm2-135m --device cuda --batch-sizes 1,32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def decode_steps(engine: LLMEngine, batch: int, steps: int) -> list[float]:
    """Wall seconds of ``steps`` decode steps of ``batch`` running requests."""
    params = SamplingParams(max_tokens=steps + 8, temperature=0.0, ignore_eos=True)
    for i in range(batch):
        engine.add_request(None, list(range(100 + i, 132 + i)), params)
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.core.scheduler.requests.values()):
        engine.step()  # prefill
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    while engine.has_unfinished_requests():
        engine.step()
    return times


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", default="1,32")
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args(argv)
    engine = LLMEngine(EngineConfig(model=args.model, load_format="dummy" if args.model.startswith("dummy:") else
                                    "auto", device=args.device, dtype=args.dtype))
    cuda = engine.core.device.type == "cuda"
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        decode_steps(engine, batch, 5)  # warm-up
        wall = statistics.median(decode_steps(engine, batch, args.steps))
        line = f"batch {batch:>3}: {wall * 1e3:7.2f} ms per decode step (median of {args.steps})"
        if cuda:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                decode_steps(engine, batch, 10)
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            gpu_ms = sum(e.device_time for e in kernels) / 1e3 / 10
            line += f"; GPU busy {gpu_ms:.2f} ms, {len(kernels) / 10:.0f} kernels per step (profiled, incl. prefill)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
