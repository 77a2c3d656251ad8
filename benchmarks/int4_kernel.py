"""The int4 linear kernels side by side on SmolLM2-135M's layer shapes, in one
process, calls alternated (this VM's speed drifts by tens of percent within
minutes): torch's ``_weight_int4pack_mm_for_cpu``, tokenmill's C++
``int4_linear`` with float and (AVX512-VNNI or AVX2) int8 activations, and the bf16
panel kernel the int4 layers replace (and, where int4's dense copy is float32:
AVX2-only CPUs, the float32 panels it runs on). Median microseconds per call; weights
read per second for the int4 kernels (codes only, 0.5 byte per weight).

    python -m benchmarks.int4_kernel --rows 1,4 --threads 2
    python -m benchmarks.int4_kernel --rows 1 --cold-layers 30   # + whole-model passes, weights from memory
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int4_linear import dense_copy_dtype, has_int8_activations, int4_pack, quantize_groupwise_int4

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
"""SmolLM2-135M's decoder linears as (N, K), q/k/v and gate/up fused as the engine runs them."""


def _callables(kernels, n: int, k: int, x: torch.Tensor) -> dict:
    weight = torch.randn(n, k) * 0.05
    codes, scales, zeros = quantize_groupwise_int4(weight)
    torch_packed = torch._convert_weight_to_int4pack_for_cpu(codes, 1)
    sz = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
    ours = int4_pack(codes, scales, zeros)
    calls = {"torch int4": lambda: torch._weight_int4pack_mm_for_cpu(x, torch_packed, 32, sz),
             "ours float": lambda: kernels.int4_linear(x, ours, n, None, False)}
    if has_int8_activations(kernels):
        calls["ours int8"] = lambda: kernels.int4_linear(x, ours, n, None, True)
    panels = kernels.pack_invariant_weight(weight.to(torch.bfloat16))
    calls["bf16 panels"] = lambda: kernels.invariant_linear(x, panels, n, None)
    if dense_copy_dtype() == torch.float32:
        x32, panels32 = x.float(), kernels.pack_invariant_weight(weight)
        calls["float32 panels"] = lambda: kernels.invariant_linear(x32, panels32, n, None)
    return calls


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,4", help="rows per call, comma-separated")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--calls", type=int, default=300, help="timed calls per kernel (alternated in rounds of 10)")
    ap.add_argument("--cold-layers", type=int, default=0,
                    help="also time passes over this many layers' four linears, each its own weights (30: the "
                         "model's 53 MB of codes, read from memory as in a decode step), kernels alternated by pass")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    kernels = load_cpu_kernels()
    if kernels is None:
        raise SystemExit("the C++ kernels did not build here")
    print(f"int4_linear vector code: {kernels.int4_linear_isa()}; threads {torch.get_num_threads()}")
    totals: dict[tuple[int, str], float] = {}
    for rows in (int(r) for r in args.rows.split(",")):
        for name, (n, k) in SHAPES.items():
            torch.manual_seed(0)
            x = torch.randn(rows, k).to(torch.bfloat16)
            calls = _callables(kernels, n, k, x)
            times = {label: [] for label in calls}
            for _ in range(3):  # warm-up
                for f in calls.values():
                    f()
            for _ in range(args.calls // 10):
                for label, f in calls.items():
                    start = time.perf_counter()
                    for _ in range(10):
                        f()
                    times[label].append((time.perf_counter() - start) / 10)
            cells = []
            for label, ts in times.items():
                us = statistics.median(ts) * 1e6
                totals[(rows, label)] = totals.get((rows, label), 0.0) + us
                rate = f", {n * k / 2 / us / 1e3:.1f} GB/s" if "int4" in label or "ours" in label else ""
                cells.append(f"{label} {us:.1f} us{rate}")
            print(f"rows {rows} {name:8} [{n}x{k}]: " + "; ".join(cells))
        base = totals[(rows, "torch int4")]
        print(f"rows {rows}, one layer's four linears: " + "; ".join(
            f"{label} {us:.0f} us ({base / us:.2f}x torch int4)" for (r, label), us in totals.items() if r == rows))
        if args.cold_layers:
            cold_pass(kernels, rows, args.cold_layers)


def cold_pass(kernels, rows: int, layers: int, passes: int = 30) -> None:
    """Median ms of one pass over ``layers`` layers' four linears per kernel, the
    weights of every layer distinct (too many bytes for the caches)."""
    torch.manual_seed(0)
    xs = {k: torch.randn(rows, k).to(torch.bfloat16) for k in {k for _, k in SHAPES.values()}}
    per_layer = [[_callables(kernels, n, k, xs[k]) for n, k in SHAPES.values()] for _ in range(layers)]
    labels = list(per_layer[0][0])
    times = {label: [] for label in labels}
    for _ in range(passes):
        for label in labels:
            start = time.perf_counter()
            for layer in per_layer:
                for calls in layer:
                    calls[label]()
            times[label].append(time.perf_counter() - start)
    code_bytes = layers * sum(n * k / 2 for n, k in SHAPES.values())
    print(f"rows {rows}, {layers} layers from memory ({code_bytes / 1e6:.0f} MB of int4 codes): " + "; ".join(
        f"{label} {statistics.median(ts) * 1e3:.2f} ms" + (f" ({code_bytes / statistics.median(ts) / 1e9:.1f} GB/s)"
                                                           if "panels" not in label else "")
        for label, ts in times.items()))


if __name__ == "__main__":
    main()
