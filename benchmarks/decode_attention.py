"""One layer's decode attention: the C++ kernel vs the torch path, side by side.

    python -m benchmarks.decode_attention --threads 2
    python -m benchmarks.decode_attention --head-dim 128 --heads 32 --kv-heads 8

Random K/V in a paged cache (shuffled blocks, the engine's layout: K and V
views of one [num_blocks, 2, Hkv, block_size, D] tensor), SmolLM2's head layout by
default (9 query heads, 3 KV heads, head_dim 64), context lengths uniform in
[max_len/2, max_len). Prints the median of 15 calls per path and their ratio,
and the largest difference between the two outputs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from tokenmill.kernels.attention import build_torch_metadata
from tokenmill.kernels.cpu_kernels import load_cpu_kernels


def median_ms(fn, reps: int = 15) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--cases", default="1:300,64:380,256:380", help="batch:max_len pairs")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    module = load_cpu_kernels()
    if module is None:
        raise SystemExit("the C++ kernel is unavailable here (see the warning above)")
    kernel = module.paged_decode_attention
    gen = torch.Generator().manual_seed(0)
    hq, hkv, d, bs = args.heads, args.kv_heads, args.head_dim, args.block_size
    scale = d**-0.5
    print(f"heads {hq}/{hkv}, head_dim {d}, block {bs}, {args.threads} threads")
    print(f"{'dtype':>9} {'batch':>6} {'max_len':>8} {'torch ms':>9} {'C++ ms':>8} {'ratio':>7} {'max diff':>9}")
    for dtype in (torch.float32, torch.bfloat16):
        for case in args.cases.split(","):
            batch, max_len = (int(x) for x in case.split(":"))
            lens = torch.randint(max_len // 2, max_len, (batch,), generator=gen)
            nb = -(-int(lens.max()) // bs)
            num_blocks = batch * nb + 8
            layer = torch.randn(num_blocks, 2, hkv, bs, d, generator=gen).to(dtype)  # model/kv_cache_spec.py
            kc, vc = layer[:, 0], layer[:, 1]
            tables = torch.randperm(num_blocks, generator=gen)[:batch * nb].view(batch, nb)
            q = torch.randn(batch, hq, d, generator=gen).to(dtype)
            # Built once and reused, as the engine reuses a step's metadata (and its
            # gather indices) across layers.
            meta = build_torch_metadata(tables, (lens - 1).tolist(), [], torch.zeros(batch, dtype=torch.long), bs)

            torch_path = functools.partial(meta.attend, q, None, None, kc, vc, scale)
            cpp_path = functools.partial(kernel, q, kc, vc, tables, lens, bs, scale)
            diff = (torch_path().float() - cpp_path().float()).abs().max().item()
            a, b = median_ms(torch_path), median_ms(cpp_path)
            name = str(dtype).removeprefix("torch.")
            print(f"{name:>9} {batch:>6} {max_len:>8} {a:>9.3f} {b:>8.3f} {a / b:>6.2f}x {diff:>9.1e}")


if __name__ == "__main__":
    main()
