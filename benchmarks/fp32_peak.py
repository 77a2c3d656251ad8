"""The CPU's float32 FMA ceiling next to what the engine's linear layers reach.

    python -m benchmarks.fp32_peak --threads 2

Compiles ``benchmarks/csrc/fp32_fma_peak.c`` with the system's C compiler (a
register-only loop of float32 FMAs, 16 lanes with AVX-512, else 8 with AVX2)
and runs it with 1 and THREADS threads; then times, with THREADS threads, the
embedded model's linear layers (qkv, o, gate_up, down, LM head; SmolLM2-135M
shapes) on tokenmill's panel kernel and on oneDNN's prepacked weight at a
decode batch (128 rows) and a prefill chunk (1024 rows), and torch's 2048^3
GEMM. Each rate is printed as GFLOP/s and as a fraction of the FMA ceiling:
the share a faster GEMM kernel could still gain on this CPU.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import torch
from torch import nn

from benchmarks.bf16_peak import instruction_peak
from benchmarks.engine_vs_hf import matmul_peak
from benchmarks.linear_rows import per_call_ms
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available

SOURCE = pathlib.Path(__file__).parent / "csrc" / "fp32_fma_peak.c"
SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}
"""SmolLM2-135M's linear layers, out x in (N x K): the fused projections the engine runs."""


def fma_ceiling(threads: int) -> tuple[float, float]:
    """GFLOP/s of the register-only FMA loop on 1 and ``threads`` threads."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        sys.exit("no C compiler (gcc or cc) on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        binary = pathlib.Path(tmp) / "fp32_fma_peak"
        build = subprocess.run([cc, "-O2", "-march=native", "-fopenmp", str(SOURCE), "-o", str(binary)],
                               capture_output=True, text=True)
        if build.returncode:
            sys.exit(f"the FMA probe does not build here (needs AVX2 + FMA or AVX-512):\n{build.stderr}")
        return instruction_peak(binary, 1), instruction_peak(binary, threads)


def layer_rates(rows: int, calls: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Per layer: (panel kernel, oneDNN) GFLOP/s at ``rows`` rows, float32."""
    kernels = load_cpu_kernels()
    if kernels is None:
        sys.exit("the C++ kernels do not build here")
    with_onednn = onednn_available(torch.float32)
    out = {}
    for name, (n, k) in SHAPES.items():
        linear = nn.Linear(k, n, bias=False)
        panels = kernels.pack_invariant_weight(linear.weight.detach())
        packed = PackedLinear(linear, keep_weight=False) if with_onednn else None
        x = torch.randn(rows, k)
        gflop = 2 * rows * n * k / 1e9
        with torch.inference_mode():
            panel_ms = per_call_ms(lambda: kernels.invariant_linear(x, panels, n, None), calls, repeats)
            onednn_ms = per_call_ms(lambda: packed(x), calls, repeats) if packed else float("nan")
        out[name] = (gflop / panel_ms * 1e3, gflop / onednn_ms * 1e3)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rows", default="128,1024", help="comma-separated row counts for the layer rates")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    one, many = fma_ceiling(args.threads)
    print(f"float32 FMA ceiling: {one:.1f} GFLOP/s on 1 thread, {many:.1f} on {args.threads}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    square = matmul_peak(torch.float32)["square"]
    print(f"torch float32 GEMM 2048^3: {square:.1f} GFLOP/s = {square / many:.2f} of the ceiling")
    print(f"{'layer':>8} {'N x K':>10} {'rows':>5} {'panel GFLOP/s':>14} {'oneDNN GFLOP/s':>15} "
          f"{'panel/ceiling':>14} {'oneDNN/ceiling':>15}")
    for rows in (int(r) for r in args.rows.split(",")):
        for name, (panel, onednn) in layer_rates(rows, args.calls, args.repeats).items():
            n, k = SHAPES[name]
            print(f"{name:>8} {f'{n}x{k}':>10} {rows:>5} {panel:14.1f} {onednn:15.1f} {panel / many:14.2f} "
                  f"{onednn / many:15.2f}", flush=True)


if __name__ == "__main__":
    main()
