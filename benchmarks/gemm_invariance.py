"""Is a linear layer batch-invariant, and what does it cost? torch vs the
--deterministic kernel (csrc/invariant_linear.cpp), on SmolLM2's shapes.

Invariance: row 0 of ``x[:M] @ W^T`` for M = 1..40 and a few larger M,
compared bit for bit with the same row computed at M = 64; prints the M values
where it differs. Speed: GFLOP/s at M = 1 and M = 256 (median of --repeats).

    python -m benchmarks.gemm_invariance --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels

SHAPES = [(960, 576), (1536, 576), (576, 1536), (49152, 576)]  # qkv, gate_up/2, down, LM head
SIZES = list(range(1, 41)) + [63, 65, 100, 128, 129, 256, 300, 512]


def differing_sizes(linear, x: torch.Tensor) -> list[int]:
    reference = linear(x[:64])[0]
    return [m for m in SIZES if not torch.equal(linear(x[:m])[0], reference)]


def gflops(linear, x: torch.Tensor, n: int, repeats: int) -> float:
    linear(x)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        linear(x)
        times.append(time.perf_counter() - t)
    return 2 * x.shape[0] * x.shape[1] * n / statistics.median(times) / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    kernels = load_cpu_kernels()
    if kernels is None:
        raise SystemExit("the C++ kernels are not available here")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for dtype in (torch.bfloat16, torch.float32):
        for n, k in SHAPES:
            g = torch.Generator().manual_seed(n + k)
            w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
            x = torch.randn(512, k, generator=g).to(dtype)
            packed = kernels.pack_invariant_weight(w)
            impls = {"torch": lambda a, w=w: torch.nn.functional.linear(a, w),
                     "invariant": lambda a, p=packed, n=n: kernels.invariant_linear(a, p, n, None)}
            for name, linear in impls.items():
                bad = differing_sizes(linear, x)
                speed = [gflops(linear, x[:m], n, args.repeats) for m in (1, 256)]
                print(f"{str(dtype).removeprefix('torch.'):9} {n:6d} x {k:5d} {name:10} "
                      f"GFLOP/s M=1 {speed[0]:7.1f}  M=256 {speed[1]:7.1f}  "
                      f"row 0 differs at M in {bad if bad else 'none'}", flush=True)


if __name__ == "__main__":
    main()
