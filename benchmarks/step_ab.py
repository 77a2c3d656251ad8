"""Batch-1 decode steps of several engine configurations in one process, their
requests alternated round by round (this VM's speed drifts by tens of percent
within minutes, so configurations timed one after another are not comparable).
Each configuration is ``QUANTIZATION[:INT4_ACTIVATIONS][:eager][:torchhead]``
with QUANTIZATION one of bf16 (none), int8, int4; ``eager``: the Python layer
loop (``enforce_eager``) instead of the C++ one (kernels/native_decoder.py);
``torchhead``: a quantized model's int8 LM head on torch's
``_weight_int8pack_mm`` instead of the C++ int8_linear (an A/B switch only).

    python -m benchmarks.step_ab int4:int8 int4:float bf16
    python -m benchmarks.step_ab bf16 bf16::eager
    python -m benchmarks.step_ab int4:int8 int4:int8::torchhead
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def _engine(spec: str, dtype: str) -> LLMEngine:
    quantization, activations, eager, head = (spec.split(":") + ["", "", ""])[:4]
    engine = LLMEngine(EngineConfig(dtype=dtype, quantization=None if quantization == "bf16" else quantization,
                                    int4_activations=activations or "float", kv_cache_memory_gib=0.3,
                                    enforce_eager=eager == "eager"))
    if head == "torchhead":
        lm_head = engine.core.model.lm_head
        if not hasattr(lm_head, "_int8_linear"):
            raise SystemExit(f"{spec}: torchhead needs a quantized model (an int8 LM head)")
        lm_head._int8_linear = None
    return engine


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", help="e.g. int4:int8 int4:float bf16")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30, help="timed decode steps per round")
    ap.add_argument("--prompt-len", type=int, default=128)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    engines = {spec: _engine(spec, args.dtype) for spec in args.configs}
    prompt = list(range(200, 200 + args.prompt_len))
    times: dict[str, list[float]] = {spec: [] for spec in engines}
    for _ in range(args.rounds):
        for spec, engine in engines.items():
            engine.add_request(None, prompt, SamplingParams(max_tokens=args.steps + 2, temperature=0.0,
                                                            ignore_eos=True))
            engine.step()  # the prompt
            for _ in range(args.steps):
                start = time.perf_counter()
                engine.step()
                times[spec].append(time.perf_counter() - start)
            while engine.has_unfinished_requests():
                engine.step()
    base = statistics.median(times[args.configs[-1]])
    for spec, ts in times.items():
        step = statistics.median(ts)
        print(f"{spec:12} batch-1 decode step {step * 1e3:6.2f} ms (median of {len(ts)}), "
              f"{1 / step:5.1f} tok/s, {base / step:.2f}x {args.configs[-1]}")


if __name__ == "__main__":
    main()
