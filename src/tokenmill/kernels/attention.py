"""Reference paged attention in plain torch (CPU and CUDA).

The KV cache of one layer is a flat slot array: slot = block_id * block_size +
offset. Each step writes the new tokens' K/V at their slots, then every
sequence attends over its own slots, gathered through its block table.

Token order in a step (set by the runner): all single-token decodes first, then
each prefill chunk as a contiguous run. Decodes are attended in one batched
call; each prefill chunk in its own call.
"""

from __future__ import annotations

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
    """Rows [0, num_decodes) are one-token decodes."""
    decode_blocks: torch.Tensor | None
    """[num_decodes, max_blocks] long: each decode's block table, padded with 0.
    Whole blocks are gathered (one contiguous copy per block, far cheaper than
    per-slot indexing); the mask hides the unused tail."""
    decode_mask: torch.Tensor | None
    """[num_decodes, 1, 1, max_blocks * block_size] bool, False past each context."""
    prefills: list[PrefillChunk]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q: [T, Hq, D]; k, v: [T, Hkv, D]; caches: [num_slots, Hkv, D].
    Returns [T, Hq, D]. Writes k, v into the caches at meta.slot_mapping."""
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    n = meta.num_decodes
    if n:
        out[:n] = _decode_attention(q[:n], k_cache, v_cache, meta.decode_blocks, meta.decode_mask, scale)
    for chunk in meta.prefills:
        s, e = chunk.start, chunk.end
        if chunk.context_slots is None:
            out[s:e] = _grouped_attention(q[s:e], k[s:e], v[s:e], None, scale)
        else:
            kc, vc = k_cache[chunk.context_slots], v_cache[chunk.context_slots]
            out[s:e] = _grouped_attention(q[s:e], kc, vc, chunk.mask, scale)
    return out


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """cache [num_slots, Hkv, D], blocks [B, nb] -> [B, Hkv, nb * block_size, D]."""
    b, nb = blocks.shape
    _, hkv, d = cache.shape
    per_block = cache.view(-1, block_size, hkv, d)
    return per_block.index_select(0, blocks.flatten()).view(b, nb * block_size, hkv, d).transpose(1, 2)


def _decode_attention(q, k_cache, v_cache, blocks, mask, scale):
    # q: [B, Hq, D] -> [B, Hkv, G, D]: the G query heads sharing a KV head act as
    # G query rows, so K/V are never repeated for grouped-query attention.
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    block_size = mask.shape[-1] // blocks.shape[1]
    qg = q.view(b, hkv, hq // hkv, d)
    kc = _gather_blocks(k_cache, blocks, block_size)  # [B, Hkv, L, D]
    vc = _gather_blocks(v_cache, blocks, block_size)
    o = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=mask, scale=scale)
    return o.reshape(b, hq, d)


def _grouped_attention(q, k, v, mask, scale):
    """One sequence. q: [n, Hq, D]; k, v: [L, Hkv, D]; mask: [n, L] or None (causal, n == L)."""
    n, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    # [n, Hq, D] -> [Hkv, G*n, D]: rows ordered (group, position).
    qg = q.view(n, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * n, d)
    kt, vt = k.transpose(0, 1), v.transpose(0, 1)  # [Hkv, L, D]
    if mask is None:
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril_()
    full_mask = mask.repeat(g, 1)  # [G*n, L]
    o = F.scaled_dot_product_attention(qg, kt, vt, attn_mask=full_mask, scale=scale)
    # [Hkv, G*n, D] -> [n, Hq, D]
    return o.view(hkv, g, n, d).permute(2, 0, 1, 3).reshape(n, hq, d)
