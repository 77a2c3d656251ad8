"""DeepSeek MLA decode attention over the paged latent cache: the C++ kernel vs torch.

    python -m benchmarks.mla_attention --threads 2

bf16, DeepSeek-V3's latent (D = 512 + 64, v_dim 512), every row a decode of its
own sequence with the same context length, blocks shuffled in a strided
one-part cache (model/kv_cache_spec.py). Three paths per (heads, batch):
- C++: ``paged_mla_attention`` (csrc/mla_decode_attention.cpp);
- reference: ``mla_attention_reference`` (one row at a time, float32);
- bmm: gather every row's latents into [T, L, D] (indices built once, as a step's
  metadata is reused across layers), then two batched bf16 matmuls and a
  float32 softmax between them.
Prints the median of --reps calls per path, the speedups of C++ over the two
torch paths, and the largest difference between C++ and the reference.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.mla_attention import mla_attention_reference


def median_ms(fn, reps: int) -> float:
    fn()  # warm-up: scratch allocation, first-touch
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def bmm_decode(q, rows_of, blocks, offsets, scale, v_dim):
    """q [T, H, D]; blocks, offsets [T, L]: gather, then two batched matmuls."""
    rows = rows_of[blocks, offsets]  # [T, L, D]
    p = torch.softmax(torch.bmm(q, rows.transpose(1, 2)).float() * scale, dim=-1).to(q.dtype)  # [T, H, L]
    return torch.bmm(p, rows[..., :v_dim])  # [T, H, v_dim]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (the kernel's threads too)")
    ap.add_argument("--heads", default="16,128", help="query heads, comma-separated")
    ap.add_argument("--batches", default="1,8,32", help="decode rows T, comma-separated")
    ap.add_argument("--context", type=int, default=1024, help="context length of every row")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    module = load_cpu_kernels()
    if module is None:
        raise SystemExit("the C++ kernels are unavailable here (see the warning above)")
    d, v_dim, bs, n = 576, 512, args.block_size, args.context
    scale = 192**-0.5  # DeepSeek-V3: (qk_nope + qk_rope head dims) ** -0.5
    gen = torch.Generator().manual_seed(0)
    print(f"bf16, D {d}, v_dim {v_dim}, context {n}, block {bs}, {args.threads} threads; median ms of {args.reps}")
    print(f"{'heads':>5} {'batch':>5} {'C++':>8} {'ref':>8} {'bmm':>8} {'ref/C++':>8} {'bmm/C++':>8} {'max diff':>9}")
    for heads in (int(x) for x in args.heads.split(",")):
        for batch in (int(x) for x in args.batches.split(",")):
            nb = -(-n // bs)
            num_blocks = batch * nb + 8
            layer = torch.randn(num_blocks, 1, 1, bs, d, generator=gen).to(torch.bfloat16)
            cache = layer[:, 0]  # [num_blocks, 1, bs, D]; a one-part layer: blocks bs * D apart
            tables = torch.randperm(num_blocks, generator=gen)[:batch * nb].view(batch, nb)
            lens = torch.full((batch,), n, dtype=torch.long)
            q = torch.randn(batch, heads, d, generator=gen).to(torch.bfloat16)
            pos = torch.arange(n)
            blocks, offsets = tables[:, pos // bs], (pos % bs).expand(batch, n)

            cpp = functools.partial(module.paged_mla_attention, q, cache, tables, lens, bs, scale, v_dim)
            ref = functools.partial(mla_attention_reference, q, cache, tables, lens, bs, scale, v_dim)
            bmm = functools.partial(bmm_decode, q, cache[:, 0], blocks, offsets, scale, v_dim)
            diff = (cpp().float() - ref().float()).abs().max().item()
            a, b, c = (median_ms(fn, args.reps) for fn in (cpp, ref, bmm))
            print(f"{heads:>5} {batch:>5} {a:>8.3f} {b:>8.3f} {c:>8.3f} {b / a:>7.1f}x {c / a:>7.1f}x {diff:>9.1e}")


if __name__ == "__main__":
    main()
