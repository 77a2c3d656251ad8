"""One linear layer by rows: tokenmill's panel kernel (csrc/invariant_linear.cpp,
what ``--linear-backend mixed`` runs up to 128 rows) against oneDNN on a
prepacked weight and torch's F.linear, per call, cache-warm, in one dtype.

    python -m benchmarks.linear_rows --dtype float32
    python -m benchmarks.linear_rows --dtype bfloat16 --shapes 8960x1536 --rows 1,5,64

Shapes are out x in (N x K); the defaults are Qwen2.5-1.5B's MLP and the
embedded SmolLM2's qkv. Prints milliseconds per call (median of --repeats
timings of --calls calls) and the panel kernel's largest deviation from
F.linear.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def per_call_ms(fn, calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--shapes", default="8960x1536,1536x8960,1728x576", help="comma-separated NxK")
    ap.add_argument("--rows", default="1,2,5,8,16,32,64,128,256", help="comma-separated row counts")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    kernels = load_cpu_kernels()
    if kernels is None:
        raise SystemExit("the C++ kernels do not build here")
    dtype = DTYPES[args.dtype]
    with_onednn = onednn_available(dtype)
    torch.manual_seed(0)
    print(f"dtype {args.dtype}, {torch.get_num_threads()} threads; ms per call")
    print(f"{'N x K':>12} {'rows':>5} {'panel':>8} {'onednn':>8} {'torch':>8} {'max |panel - torch|':>20}")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        linear = nn.Linear(k, n, bias=False).to(dtype)
        panels = kernels.pack_invariant_weight(linear.weight.detach())
        packed = PackedLinear(linear, keep_weight=False) if with_onednn else None
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, k, dtype=dtype)
            with torch.inference_mode():
                panel = per_call_ms(lambda: kernels.invariant_linear(x, panels, n, None), args.calls, args.repeats)
                onednn = per_call_ms(lambda: packed(x), args.calls, args.repeats) if packed else float("nan")
                plain = per_call_ms(lambda: linear(x), args.calls, args.repeats)
                error = (kernels.invariant_linear(x, panels, n, None).float() - linear(x).float()).abs().max().item()
            print(f"{shape:>12} {rows:>5} {panel:8.2f} {onednn:8.2f} {plain:8.2f} {error:20.1e}", flush=True)


if __name__ == "__main__":
    main()
