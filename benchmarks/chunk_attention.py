"""A prompt chunk's attention over cached context, the way the torch path runs it, timed per variant.

On a lent H200 the engine's eager steps holding such a chunk cost 50-190 ms more than steps of whole
prompts in an Offline run (docs/PERFORMANCE.md, 2026-11-30). Per layer such a chunk runs a gather of
its context and one SDPA call with an explicit boolean mask and ``enable_gqa``
(kernels/attention.py ``_grouped_attention``), where whole prompts take SDPA's causal path. Which
SDPA backend serves the masked call, and whether it pays a one-time cost per new shape (a chunk's
length and context change from step to step), decides it. This times, in SmolLM2-135M's attention
shape (9 query heads over 3 KV heads of 64):

- ``sdpa``: the engine's own call, SDPA choosing the backend;
- ``sdpa:<backend>``: the same call held to one backend (``torch.nn.attention.sdpa_kernel``), each that
  this torch build has; a backend that cannot serve the call is reported as such;
- ``lower_right``: the same call with ``torch.nn.attention.bias.causal_lower_right`` for the mask, which
  CUDA's flash and memory-efficient kernels take without a mask tensor (the fix to try first);
- ``matmul``: the masked attention as two batched matmuls with the softmax in float32, the query
  heads of a KV head as rows (the engine's decode attention's way);
- ``causal``: a whole prompt of the same length without context, the fast path, for reference;

each over ``--shapes`` chunks, every shape new to the process (``cold``: the first call of each
shape, as an engine's varying chunks meet them) and then again (``warm``: the median of repeats).

    python -m benchmarks.chunk_attention --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from tokenmill.kernels.attention import _grouped_attention

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
DEFAULT_SHAPES = "8:136,9:137,15:143,39:167,112:128,120:248,200:328,896:1024"
"""chunk rows : context tokens (the chunk's own included), as in the H200 Offline run's slow steps."""


def matmul_attention(q, k, v, mask, scale):
    """q: [n, Hq, D]; k, v: [Hkv, L, D]; mask [n, L] bool (True = may attend) -> [n, Hq, D]."""
    n, hq, d = q.shape
    hkv = k.shape[0]
    qg = q.view(n, hkv, hq // hkv, d).permute(1, 2, 0, 3).reshape(hkv, hq // hkv * n, d)  # [Hkv, G*n, D]
    scores = torch.matmul(qg, k.transpose(-1, -2)).float().mul_(scale)  # [Hkv, G*n, L]
    scores = scores.view(hkv, hq // hkv, n, -1).masked_fill_(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(q.dtype).view(hkv, hq // hkv * n, -1)
    out = torch.matmul(probs, v)  # [Hkv, G*n, D]
    return out.view(hkv, hq // hkv, n, d).permute(2, 0, 1, 3).reshape(n, hq, d)


def lower_right_attention(q, k, v, mask, scale):
    """The same call with the mask given as what it is, causal aligned to the last key
    (``torch.nn.attention.bias.causal_lower_right``): flash and memory-efficient kernels serve that
    without a mask tensor on CUDA; elsewhere torch builds the mask itself. ``mask`` is unused."""
    from torch.nn.attention.bias import causal_lower_right

    n, length = q.shape[0], k.shape[1]
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None],
                                       attn_mask=causal_lower_right(n, length), scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1)


def inputs(n: int, context: int, device, dtype):
    q = torch.randn(n, HEADS, HEAD_DIM, device=device, dtype=dtype)
    k = torch.randn(KV_HEADS, context, HEAD_DIM, device=device, dtype=dtype)
    v = torch.randn(KV_HEADS, context, HEAD_DIM, device=device, dtype=dtype)
    positions = torch.arange(context, device=device)
    mask = positions[None, :] <= torch.arange(context - n, context, device=device)[:, None]  # [n, L]
    return q, k, v, mask


def variants(device) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {"sdpa": _grouped_attention}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        def held(q, k, v, mask, scale, backend=backend):
            with sdpa_kernel([backend]):
                return _grouped_attention(q, k, v, mask, scale)
        out[f"sdpa:{backend.name.lower()}"] = held
    out["lower_right"] = lower_right_attention
    out["matmul"] = matmul_attention
    # A whole prompt of the chunk's length: its own keys only, SDPA's causal path.
    out["causal"] = lambda q, k, v, mask, scale: _grouped_attention(q, k[:, -q.shape[0]:], v[:, -q.shape[0]:],
                                                                    None, scale)
    return out


def timed(fn, args, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn(*args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def run(device, dtype, shapes: list[tuple[int, int]], repeats: int) -> list[tuple[str, float | None, float | None]]:
    """(variant, median cold ms, median warm ms) per variant; None where the variant cannot serve the call."""
    rows = []
    scale = HEAD_DIM ** -0.5
    for index, (name, fn) in enumerate(variants(device).items()):
        cold, warm = [], []
        try:
            for n, context in shapes:  # contexts offset per variant: every variant's shapes are new to it
                args = (*inputs(n, context + index, device, dtype), scale)
                cold.append(timed(fn, args, device))
                warm.append(statistics.median(timed(fn, args, device) for _ in range(repeats)))
        except RuntimeError as e:  # a backend held to a call it cannot serve
            print(f"{name}: {str(e).splitlines()[0][:120]}")
            rows.append((name, None, None))
            continue
        rows.append((name, statistics.median(cold) * 1e3, statistics.median(warm) * 1e3))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="chunk:context pairs (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    shapes = [tuple(int(x) for x in pair.split(":")) for pair in args.shapes.split(",")]
    print(f"{device} {torch.cuda.get_device_name(device) if device.type == 'cuda' else ''} torch {torch.__version__}, "
          f"{args.dtype}, {len(shapes)} shapes, each new to the process")
    print("| variant | first call of a shape, median ms | repeated, median ms |")
    print("|---|---|---|")
    for name, cold, warm in run(device, dtype, shapes, args.repeats):
        print(f"| {name} | {'-' if cold is None else f'{cold:.3f}'} | {'-' if warm is None else f'{warm:.3f}'} |")


if __name__ == "__main__":
    main()
