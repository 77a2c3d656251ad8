"""Reference paged attention in plain torch (CPU and CUDA).

The KV cache of one layer is a pair of head-major slot arrays
[num_kv_heads, num_slots, head_dim], slot = block_id * block_size + offset.
Head-major because every read is "these slots, for every head": gathering a
sequence's blocks then yields [Hkv, L, D] rows that batched matmuls take
without a copy. Each step writes the new tokens' K/V at their slots, then every
sequence attends over its own slots, gathered through its block table.

Token order in a step (set by the runner): all single-token decodes first, then
each prefill chunk as a contiguous run.

Two backends, each with its metadata type and builder; the runner picks the
builder once, and ``paged_attention`` runs whichever the metadata belongs to:
- ``CppAttentionMetadata`` (csrc/paged_decode_attention.cpp): every token of
  the step is one query row over its own context (position + 1 tokens) read in
  place through its sequence's block table, decodes and prefill chunks alike,
  in one call;
- ``TorchAttentionMetadata``: decodes in one batched call that gathers their
  blocks into a padded [Hkv, B, span, D] copy first; each prefill chunk in its
  own SDPA call.
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
class TorchAttentionMetadata:
    """The plain-torch path: decodes in one batched call, each prefill chunk in
    its own SDPA call. Built by ``build_torch_metadata``."""

    slot_mapping: torch.Tensor
    """[num_tokens] long: cache slot each new token's K/V is written to."""
    num_decodes: int
    """Rows [0, num_decodes) are one-token decodes; prefill chunks follow."""
    decode_blocks: torch.Tensor | None
    """[num_decodes, max_blocks] long: each decode's block table, padded with 0.
    The decodes gather whole blocks (one contiguous copy per block, far cheaper
    than per-slot indexing); the bias hides the unused tail."""
    decode_bias: torch.Tensor | None
    """[num_decodes, max_blocks * block_size] float32: 0 inside each context,
    -inf past it (added to the scores before the softmax)."""
    prefills: list[PrefillChunk]
    block_size: int

    def attend(self, q, k, v, k_cache, v_cache, scale: float) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: this step's [T, Hkv, D] (already in the caches) -> [T, Hq, D]."""
        n = self.num_decodes
        if not self.prefills:  # decode-only step: no output buffer to fill piecewise
            return _decode_attention(q, k_cache, v_cache, self.decode_blocks, self.decode_bias, self.block_size, scale)
        out = torch.empty_like(q)
        if n:
            out[:n] = _decode_attention(q[:n], k_cache, v_cache, self.decode_blocks, self.decode_bias,
                                        self.block_size, scale)
        for chunk in self.prefills:
            s, e = chunk.start, chunk.end
            if chunk.context_slots is None:
                out[s:e] = _grouped_attention(q[s:e], k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), None, scale)
            else:
                kc = k_cache.index_select(1, chunk.context_slots)  # [Hkv, L, D]
                vc = v_cache.index_select(1, chunk.context_slots)
                out[s:e] = _grouped_attention(q[s:e], kc, vc, chunk.mask, scale)
        return out


@dataclass
class CppAttentionMetadata:
    """The C++ kernel path (csrc/paged_decode_attention.cpp): every token of the
    step, decode or prefill, is one query row over its own context, read in
    place through its sequence's block table, in one call. Built by
    ``build_cpp_metadata``."""

    slot_mapping: torch.Tensor
    """[num_tokens] long: cache slot each new token's K/V is written to."""
    block_tables: torch.Tensor
    """[num_tokens, max_blocks] long: the block table of each row's sequence, padded with 0."""
    context_lens: torch.Tensor
    """[num_tokens] long: tokens each row attends to (its position + 1)."""
    block_size: int
    kernel: Callable
    """The compiled ``paged_decode_attention``."""

    def attend(self, q, k, v, k_cache, v_cache, scale: float) -> torch.Tensor:
        return self.kernel(q, k_cache, v_cache, self.block_tables, self.context_lens, self.block_size, scale)


AttentionMetadata = TorchAttentionMetadata | CppAttentionMetadata
"""What the model's attention layers read each step; one type per backend."""


def build_cpp_metadata(tables: torch.Tensor, row_of_token: torch.Tensor, positions: torch.Tensor,
                       slot_mapping: torch.Tensor, block_size: int, kernel: Callable) -> CppAttentionMetadata:
    """tables [B, max_blocks] (one row per sequence), row_of_token [T], positions [T]."""
    return CppAttentionMetadata(slot_mapping, tables[row_of_token], positions + 1, block_size, kernel)


def build_torch_metadata(tables: torch.Tensor, decode_starts: list[int], prefills: list[tuple[int, int]],
                         slot_mapping: torch.Tensor, block_size: int) -> TorchAttentionMetadata:
    """tables [B, max_blocks]: the decodes' rows first, then the prefills'.
    decode_starts: each decode's position; prefills: each chunk's (start
    position, length), in token order after the decodes."""
    device = tables.device
    nd = len(decode_starts)
    decode_blocks = decode_bias = None
    if nd:
        lens = torch.tensor([p + 1 for p in decode_starts], device=device)  # [Bd]
        num_blocks = -(-max(p + 1 for p in decode_starts) // block_size)
        decode_blocks = tables[:nd, :num_blocks].contiguous()  # [Bd, num_blocks]
        span = num_blocks * block_size
        outside = torch.arange(span, device=device) >= lens[:, None]  # [Bd, span]
        decode_bias = torch.zeros(nd, span, device=device).masked_fill_(outside, float("-inf"))
    chunks = []
    row = nd
    for i, (start, n) in enumerate(prefills):
        if start == 0:
            chunks.append(PrefillChunk(row, row + n, None, None))
        else:
            ctx_len = start + n
            table = tables[nd + i]
            p = torch.arange(ctx_len, device=device)
            ctx_slots = table[p // block_size] * block_size + p % block_size
            q_pos = torch.arange(start, ctx_len, device=device)
            mask = p[None, :] <= q_pos[:, None]  # [n, ctx_len]
            chunks.append(PrefillChunk(row, row + n, ctx_slots, mask))
        row += n
    return TorchAttentionMetadata(slot_mapping, nd, decode_blocks, decode_bias, chunks, block_size)


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
    Returns [T, Hq, D]. Writes k, v into the caches at meta.slot_mapping, then
    attends with the backend the metadata was built for."""
    k_cache.index_copy_(1, meta.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, meta.slot_mapping, v.transpose(0, 1))
    return meta.attend(q, k, v, k_cache, v_cache, scale)


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """cache [Hkv, num_slots, D], blocks [B, nb] -> [Hkv, B, nb * block_size, D] (contiguous)."""
    b, nb = blocks.shape
    hkv, _, d = cache.shape
    per_block = cache.view(hkv, -1, block_size, d)
    return per_block.index_select(1, blocks.flatten()).view(hkv, b, nb * block_size, d)


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
