"""Decode steps (batch 1, or ``--batch``) of several engine configurations in one
process, their requests alternated round by round (this VM's speed drifts by tens
of percent within minutes, so configurations timed one after another are not comparable).
Each configuration is ``QUANTIZATION[:INT4_ACTIVATIONS][:eager][:HEAD]``
with QUANTIZATION one of bf16 (none: the ``--dtype``), int8, int4; ``eager``: the Python layer
loop (``enforce_eager``) instead of the C++ one (kernels/native_decoder.py); HEAD
(A/B switches only): ``torchhead``, a quantized model's int8 LM head on torch's
``_weight_int8pack_mm`` instead of the C++ int8_linear; ``onednnhead``, a float32
mixed-linear model's LM head on oneDNN alone (the default before 2026-11-29)
instead of on panels up to 128 rows (kernels/mixed_linear.py).

    python -m benchmarks.step_ab int4:int8 int4:float bf16
    python -m benchmarks.step_ab bf16 bf16::eager
    python -m benchmarks.step_ab int4:int8 int4:int8::torchhead
    python -m benchmarks.step_ab bf16:::onednnhead bf16 --dtype float32 --batch 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.mixed_linear import MixedLinear
from tokenmill.kernels.packed_linear import PackedLinear
from tokenmill.sampling_params import SamplingParams


def _engine(spec: str, dtype: str) -> LLMEngine:
    quantization, activations, eager, head = (spec.split(":") + ["", "", ""])[:4]
    engine = LLMEngine(EngineConfig(dtype=dtype, quantization=None if quantization == "bf16" else quantization,
                                    int4_activations=activations or "float", kv_cache_memory_gib=0.3,
                                    enforce_eager=eager == "eager"))
    lm_head = engine.core.model.lm_head
    if head == "torchhead":
        if not hasattr(lm_head, "_int8_linear"):
            raise SystemExit(f"{spec}: torchhead needs a quantized model (an int8 LM head)")
        lm_head._int8_linear = None
    elif head == "onednnhead":
        if not isinstance(lm_head, MixedLinear):
            raise SystemExit(f"{spec}: onednnhead needs a mixed LM head (float32, --linear-backend mixed)")
        plain = nn.Linear(lm_head.in_features, lm_head.out_features, bias=lm_head.bias is not None)
        plain.weight, plain.bias = lm_head.weight, lm_head.bias
        engine.core.model.lm_head = PackedLinear(plain, keep_weight=True)
    return engine


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", help="e.g. int4:int8 int4:float bf16")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30, help="timed decode steps per round")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1, help="requests decoding together (distinct prompts)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    engines = {spec: _engine(spec, args.dtype) for spec in args.configs}
    prompts = [list(range(200 + i, 200 + i + args.prompt_len)) for i in range(args.batch)]
    times: dict[str, list[float]] = {spec: [] for spec in engines}
    for _ in range(args.rounds):
        for spec, engine in engines.items():
            budget = engine.core.config.max_num_batched_tokens
            prompt_steps = -(-args.batch * args.prompt_len // budget) + 1  # every prompt prefilled, chunks included
            for prompt in prompts:
                engine.add_request(None, prompt, SamplingParams(max_tokens=args.steps + prompt_steps + 2,
                                                                temperature=0.0, ignore_eos=True))
            for _ in range(prompt_steps):
                engine.step()
            for _ in range(args.steps):
                start = time.perf_counter()
                engine.step()
                times[spec].append(time.perf_counter() - start)
            while engine.has_unfinished_requests():
                engine.step()
    base = statistics.median(times[args.configs[-1]])
    for spec, ts in times.items():
        step = statistics.median(ts)
        print(f"{spec:16} batch-{args.batch} decode step {step * 1e3:6.2f} ms (median of {len(ts)}), "
              f"{args.batch / step:6.1f} tok/s, {base / step:.2f}x {args.configs[-1]}")


if __name__ == "__main__":
    main()
