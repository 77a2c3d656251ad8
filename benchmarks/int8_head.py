"""int8 weight-only linears by rows: tokenmill's C++ int8_linear
(kernels/csrc/int8_linear.cpp) against torch's ``_weight_int8pack_mm``, both on
the same int8 weights and bf16 activations, calls alternated in one process.

    python -m benchmarks.int8_head                       # the embedded model's LM head, 1-128 rows
    python -m benchmarks.int8_head --shapes 960x576,3072x576 --rows 1,4

Each timed call goes to the next of ``--copies`` copies of the weight, so that
the bytes come from memory as in a decode step (one LM head of SmolLM2 in int8
is 28 MB; 4 copies exceed this machine's caches), not from a warm cache.
Prints milliseconds per call (median of ``--repeats`` timings of ``--calls``
calls), the ratio, the weight bytes per second of ours, and the largest
difference between the two outputs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int8_linear import quantize_per_channel


def _timed(fn, weights: list, x: torch.Tensor, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(x, *weights[i % len(weights)])
    return (time.perf_counter() - start) / calls * 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.int8_head", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="49152x576", help="N x K (out x in), comma-separated")
    p.add_argument("--rows", default="1,2,4,8,16,64,128")
    p.add_argument("--copies", type=int, default=4, help="weight copies cycled through (cold reads)")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    opts = p.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    kernels = load_cpu_kernels()
    if kernels is None or not hasattr(kernels, "int8_linear"):
        raise SystemExit("needs the C++ kernels (make setup)")
    ours = lambda x, q, s: kernels.int8_linear(x, q, s, None)  # noqa: E731
    theirs = torch._weight_int8pack_mm
    print(f"int8_linear isa {kernels.int8_linear_isa()}, {torch.get_num_threads()} threads, "
          f"{opts.copies} weight copies, ms per call (median of {opts.repeats} x {opts.calls} calls)")
    print("| N x K | rows | ours | torch | torch / ours | ours GB/s | max |diff| |")
    print("|---|---|---|---|---|---|---|")
    for shape in opts.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        weights = []
        for c in range(opts.copies):
            torch.manual_seed(c)
            q, s = quantize_per_channel(torch.randn(n, k) * 0.05)
            weights.append((q, s.bfloat16()))
        for rows in (int(r) for r in opts.rows.split(",")):
            x = torch.randn(rows, k).bfloat16()
            diff = (ours(x, *weights[0]).float() - theirs(x, *weights[0]).float()).abs().max().item()
            a, b = [], []
            for _ in range(opts.repeats):  # alternated, so drift hits both alike
                a.append(_timed(ours, weights, x, opts.calls))
                b.append(_timed(theirs, weights, x, opts.calls))
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {n}x{k} | {rows} | {ma:.3f} | {mb:.3f} | {mb / ma:.2f}x | {n * k / ma / 1e6:.1f} | {diff:.3g} |")


if __name__ == "__main__":
    main()
