"""Median time of one prompt's prefill (one chunk), bf16 vs int4.

    python -m benchmarks.prefill_step --tokens 512
    python -m benchmarks.prefill_step --tokens 512 --quantization int4
    python -m benchmarks.prefill_step --tokens 512 --quantization int4 --no-dense-copy

Prefix caching off, so every repeat computes the whole prompt. --no-dense-copy
drops int4's dense copies after load (kernels/int4_linear.py), to time the int4
kernel on prefill rows as it was before them.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.int4_linear import dense_copy_dtype
from tokenmill.sampling_params import SamplingParams


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--quantization", default=None, choices=["int8", "int4"])
    ap.add_argument("--no-dense-copy", action="store_true")
    args = ap.parse_args(argv)
    engine = LLMEngine(EngineConfig(num_threads=args.threads, quantization=args.quantization,
                                    enable_prefix_caching=False, max_num_batched_tokens=max(args.tokens, 512)))
    copies = getattr(engine.core, "int4_dense_prefill", False)
    if args.no_dense_copy:
        for owner, name in engine.core.model.decoder_linears():
            if hasattr(getattr(owner, name), "dense"):
                getattr(owner, name).dense = None
        copies = False
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    times = []
    for i in range(args.repeats + 1):
        t = time.perf_counter()
        engine.generate([list(range(1000 + i, 1000 + i + args.tokens))], params)
        times.append(time.perf_counter() - t)
    label = f"{engine.core.dtype}".replace("torch.", "") + (f" {args.quantization}" if args.quantization else "")
    if args.quantization == "int4":
        dense = str(dense_copy_dtype()).removeprefix("torch.")
        label += f", {dense} copies for prefill" if copies else ", no dense copies"
    print(f"{label}, threads {args.threads}: {args.tokens}-token prefill {statistics.median(times[1:]) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
