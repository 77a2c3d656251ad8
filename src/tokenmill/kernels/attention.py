"""Reference paged attention in plain torch (CPU and CUDA).

The KV cache of one layer is a pair of head-major slot arrays
[num_kv_heads, num_slots, head_dim], slot = block_id * block_size + offset.
Head-major because every read is "these slots, for every head": gathering a
sequence's blocks then yields [Hkv, L, D] rows that batched matmuls take
without a copy. Each step writes the new tokens' K/V at their slots, then every
sequence attends over its own slots, gathered through its block table.

Token order in a step (set by the runner): all single-token decodes first, then
each prefill chunk as a contiguous run.

Two paths, chosen by the runner:
- the C++ kernel (``meta.decode_kernel``, csrc/paged_decode_attention.cpp):
  every token of the step is one query row over its own context (position + 1
  tokens) read in place through its sequence's block table, decodes and
  prefill chunks alike, in one call (``num_decodes`` = all rows, no prefills);
- plain torch: decodes in one batched call that gathers their blocks into a
  padded [Hkv, B, span, D] copy first; each prefill chunk in its own SDPA call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PrefillChunk:
    start: int
    """First row of this chunk in the step's token batch."""
    end: int
    context_slots: torch.Tensor | None
    """[context_len] long: slots of all tokens it attends to (cached + new), or
    None when the chunk is the sequence's whole context (plain causal)."""
    mask: torch.Tensor | None
    """[chunk_len, context_len] bool, True = may attend; None with context_slots None."""


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor
    """[num_tokens] long: cache slot each new token's K/V is written to."""
    num_decodes: int
    """Rows [0, num_decodes) are single query rows (one-token decodes; every row
    on the C++ kernel path)."""
    decode_blocks: torch.Tensor | None
    """[num_decodes, max_blocks] long: each row's block table, padded with 0.
    The torch path gathers whole blocks (one contiguous copy per block, far
    cheaper than per-slot indexing); the bias hides the unused tail."""
    decode_lens: torch.Tensor | None
    """[num_decodes] long: context length of each row, its own token included."""
    decode_bias: torch.Tensor | None
    """[num_decodes, max_blocks * block_size] float32: 0 inside each context,
    -inf past it (added to the scores before the softmax). Torch path only."""
    prefills: list[PrefillChunk]
    block_size: int
    decode_kernel: Callable | None = None
    """The C++ ``paged_decode_attention`` (CPU), or None for the torch path."""


def new_kv_cache(num_slots: int, num_kv_heads: int, head_dim: int, device, dtype) -> torch.Tensor:
    """One layer's K (or V) cache: [num_kv_heads, num_slots, head_dim], zeroed."""
    return torch.zeros(num_kv_heads, num_slots, head_dim, device=device, dtype=dtype)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q: [T, Hq, D]; k, v: [T, Hkv, D]; caches: [Hkv, num_slots, D].
    Returns [T, Hq, D]. Writes k, v into the caches at meta.slot_mapping."""
    k_cache.index_copy_(1, meta.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, meta.slot_mapping, v.transpose(0, 1))
    n = meta.num_decodes
    if not meta.prefills:  # decode-only step: no output buffer to fill piecewise
        return _decode(q, k_cache, v_cache, meta, scale)
    out = torch.empty_like(q)
    if n:
        out[:n] = _decode(q[:n], k_cache, v_cache, meta, scale)
    for chunk in meta.prefills:
        s, e = chunk.start, chunk.end
        if chunk.context_slots is None:
            out[s:e] = _grouped_attention(q[s:e], k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), None, scale)
        else:
            kc = k_cache.index_select(1, chunk.context_slots)  # [Hkv, L, D]
            vc = v_cache.index_select(1, chunk.context_slots)
            out[s:e] = _grouped_attention(q[s:e], kc, vc, chunk.mask, scale)
    return out


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """cache [Hkv, num_slots, D], blocks [B, nb] -> [Hkv, B, nb * block_size, D] (contiguous)."""
    b, nb = blocks.shape
    hkv, _, d = cache.shape
    per_block = cache.view(hkv, -1, block_size, d)
    return per_block.index_select(1, blocks.flatten()).view(hkv, b, nb * block_size, d)


def _decode(q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    if meta.decode_kernel is not None:
        return meta.decode_kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, meta.block_size, scale)
    return _decode_attention(q, k_cache, v_cache, meta.decode_blocks, meta.decode_bias, meta.block_size, scale)


def _decode_attention(q, k_cache, v_cache, blocks, bias, block_size, scale):
    # q: [B, Hq, D] -> [Hkv, B, G, D]: the G query heads sharing a KV head act as
    # G query rows, so K/V are never repeated for grouped-query attention.
    # Two batched matmuls with the softmax in float32: with G query rows per
    # (KV head, sequence), torch's CPU flash SDPA is 2-4x slower than this in
    # bf16 (measured), and the float32 softmax keeps bf16 runs close to fp32.
    b, hq, d = q.shape
    hkv = k_cache.shape[0]
    qg = q.view(b, hkv, hq // hkv, d).transpose(0, 1)  # [Hkv, B, G, D]
    kc = _gather_blocks(k_cache, blocks, block_size)  # [Hkv, B, L, D]
    vc = _gather_blocks(v_cache, blocks, block_size)
    scores = torch.matmul(qg, kc.transpose(-1, -2)).float()  # [Hkv, B, G, L]
    probs = torch.softmax(scores.mul_(scale).add_(bias[:, None, :]), dim=-1).to(q.dtype)
    out = torch.matmul(probs, vc)  # [Hkv, B, G, D]
    return out.transpose(0, 1).reshape(b, hq, d)


def _grouped_attention(q, k, v, mask, scale):
    """One sequence. q: [n, Hq, D]; k, v: [Hkv, L, D]; mask: [n, L] bool or None (causal, n == L).
    SDPA shares each KV head among its query heads (enable_gqa) and, without a
    mask, takes its causal fast path: ~2x faster here than an explicit mask
    repeated per query head (measured, bf16 and fp32)."""
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None], attn_mask=mask,
                                       is_causal=mask is None, scale=scale, enable_gqa=True)  # [1, Hq, n, D]
    return o[0].transpose(0, 1)  # [n, Hq, D]
