"""Median engine decode-step time at a fixed batch (no peers; a quick probe).

    python -m benchmarks.decode_step --threads 2 --batch 32
    python -m benchmarks.decode_step --threads 2 --batch 1 --quantization int4

Adds BATCH requests with the same 128-token prompt (``--prompt-len``; with
``--distinct-prompts`` each its own, so that each reads its own KV blocks, as
in a served batch, not one shared prefix), runs their prefill, then times 30
decode steps and prints the median step and output tokens/s.
``--profile N`` then runs N more steps under torch.profiler and prints the
self CPU time by op (where a step's time goes):

    python -m benchmarks.decode_step --batch 256 --steps 5 --profile 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.config import LINEAR_BACKENDS, EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quantization", default=None, choices=["int8", "int4"])
    ap.add_argument("--int4-activations", default="float", choices=["float", "int8"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--attention-backend", default="auto", choices=["auto", "cpp", "torch"])
    ap.add_argument("--fused-ops", default="auto", choices=["auto", "cpp", "torch"])
    ap.add_argument("--linear-backend", default="auto", choices=LINEAR_BACKENDS)
    ap.add_argument("--deterministic", action="store_true", help="batch-invariant kernels (--deterministic)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--distinct-prompts", action="store_true",
                    help="a different prompt per request (else one shared prompt: its KV blocks are shared)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile N more steps and print the self CPU time by op")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    engine = LLMEngine(EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048, dtype=args.dtype,
                                    quantization=args.quantization, int4_activations=args.int4_activations,
                                    attention_backend=args.attention_backend,
                                    fused_ops=args.fused_ops, linear_backend=args.linear_backend,
                                    deterministic=args.deterministic))
    params = SamplingParams(max_tokens=args.steps + args.profile + 8, temperature=0.0, ignore_eos=True)
    for i in range(args.batch):
        start = i * args.prompt_len if args.distinct_prompts else 0
        engine.add_request(None, [100 + t % 40000 for t in range(start, start + args.prompt_len)], params)
    engine.step()
    while engine.core.scheduler.waiting:  # finish every prefill before timing decodes
        engine.step()
    kernel_s = time_attention(engine)  # time inside the C++ decode attention, when it is in use
    times, attention = [], []
    for _ in range(args.steps):
        if kernel_s is not None:
            kernel_s[0] = 0.0
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
        attention.append(kernel_s[0] if kernel_s is not None else 0.0)
    step = statistics.median(times)
    label = (f"{engine.core.dtype}".replace("torch.", "") + (f" {args.quantization}" if args.quantization else "")
             + (f" ({args.int4_activations} activations)" if args.quantization == "int4" else "")
             + f" attention {engine.core.attention_backend}, fused ops {engine.core.fused_ops}"
             + f", linears {engine.core.linear_backend}")
    split = f" (C++ attention {statistics.median(attention) * 1e3:.1f} ms)" if kernel_s is not None else ""
    print(f"{label} threads {args.threads} batch {args.batch}: step {step * 1e3:.1f} ms{split} "
          f"-> {args.batch / step:.0f} tok/s")
    if args.profile:
        print_profile(engine, args.profile)


def time_attention(engine: LLMEngine) -> list[float] | None:
    """Wrap the engine's C++ attention kernel so that each call adds its seconds
    to the returned one-element list (the caller resets it per step); None when
    the engine runs torch's attention instead."""
    kernel = engine.core.runner.decode_kernel
    if kernel is None:
        return None
    seconds = [0.0]

    def timed_kernel(*a):
        t0 = time.perf_counter()
        out = kernel(*a)
        seconds[0] += time.perf_counter() - t0
        return out

    engine.core.runner.decode_kernel = timed_kernel
    return seconds


def print_profile(engine: LLMEngine, steps: int) -> None:
    """Self CPU time by op over ``steps`` decode steps. The C++ decode attention
    is a plain extension call, invisible to the profiler: it is labelled."""
    from torch.profiler import ProfilerActivity, profile, record_function

    runner = engine.core.runner
    kernel = runner.decode_kernel
    if kernel is not None:
        def labelled(*a):
            with record_function("tokenmill::cpp_decode_attention"):
                return kernel(*a)

        runner.decode_kernel = labelled
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    print(f"\nby op over {steps} steps (torch.profiler; self CPU time of the calling thread):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
