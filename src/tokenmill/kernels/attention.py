"""Reference paged attention in plain torch (CPU and CUDA).

The KV cache of one layer is one tensor [num_blocks, num_parts, Hkv, block_size,
D] (model/kv_cache_spec.py): one block of one layer is one contiguous chunk, so
blocks copy cheaply between workers. Attention takes one part at a time (K, V,
or a latent used as both), a view [num_blocks, Hkv, block_size, D] that is
strided across blocks; slot = block * block_size + offset. Inside a block each
head's [block_size, D] rows are contiguous, and every gather here is one
index_select over a contiguous view of those runs (see ``_block_rows``). Each
step writes the new tokens' K/V at their slots, then every sequence attends
over its own slots, gathered through its block table.

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

Caches below are always one part's view, [num_blocks, Hkv, block_size, D].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
    slot_blocks: torch.Tensor
    """[num_tokens] long: slot_mapping // block_size."""
    slot_offsets: torch.Tensor
    """[num_tokens] long: slot_mapping % block_size."""
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
    row_indices: dict[tuple, torch.Tensor] = field(default_factory=dict, repr=False)
    """Gather indices into the caches' rows (``_block_rows``), keyed by what
    they gather and the caches' strides. They depend on nothing else, and every
    layer and part of a step shares those strides: the first layer builds them,
    the others reuse them (one index_select per gather, as with a contiguous cache)."""

    def attend(self, q, k, v, k_cache, v_cache, scale: float) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: this step's [T, Hkv, D] (already in the caches) -> [T, Hq, D]."""
        n = self.num_decodes
        if not self.prefills:  # decode-only step: no output buffer to fill piecewise
            return self._decode(q, k_cache, v_cache, scale)
        out = torch.empty_like(q)
        if n:
            out[:n] = self._decode(q[:n], k_cache, v_cache, scale)
        for i, chunk in enumerate(self.prefills):
            s, e = chunk.start, chunk.end
            if chunk.context_slots is None:
                out[s:e] = _grouped_attention(q[s:e], k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), None, scale)
            else:
                kc = self._gather_slots(k_cache, i)  # [Hkv, L, D]
                vc = kc if v_cache is k_cache else self._gather_slots(v_cache, i)
                out[s:e] = _grouped_attention(q[s:e], kc, vc, chunk.mask, scale)
        return out

    def _decode(self, q, k_cache, v_cache, scale):
        kc = self._gather_blocks(k_cache)  # [Hkv, Bd, span, D]
        vc = kc if v_cache is k_cache else self._gather_blocks(v_cache)
        return _decode_attention(q, kc, vc, self.decode_bias, scale)

    def _gather_blocks(self, cache: torch.Tensor) -> torch.Tensor:
        """One part's blocks of every decode -> [Hkv, Bd, max_blocks * block_size, D]."""
        rows, sb, sh = _block_rows(cache)
        hkv, bs, d = cache.shape[1:]
        bd, nb = self.decode_blocks.shape
        index = self._index(("decode", sb, sh, hkv), lambda: _block_index(self.decode_blocks, sb, sh, hkv))
        return rows.index_select(0, index).view(hkv, bd, nb * bs, d)

    def _gather_slots(self, cache: torch.Tensor, i: int) -> torch.Tensor:
        """One part's rows of prefill chunk i's context -> [Hkv, context_len, D]."""
        rows, sb, sh = _block_rows(cache)
        hkv, bs, d = cache.shape[1:]
        slots = self.prefills[i].context_slots
        index = self._index(("chunk", i, sb, sh, hkv), lambda: _slot_index(slots, sb, sh, hkv, bs))
        return rows.view(-1, d).index_select(0, index).view(hkv, len(slots), d)

    def _index(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        index = self.row_indices.get(key)
        if index is None:
            index = self.row_indices[key] = build()
        return index


@dataclass
class CppAttentionMetadata:
    """The C++ kernel path (csrc/paged_decode_attention.cpp): every token of the
    step, decode or prefill, is one query row over its own context, read in
    place through its sequence's block table, in one call. Built by
    ``build_cpp_metadata``."""

    slot_mapping: torch.Tensor
    """[num_tokens] long: cache slot each new token's K/V is written to."""
    slot_blocks: torch.Tensor
    """[num_tokens] long: slot_mapping // block_size."""
    slot_offsets: torch.Tensor
    """[num_tokens] long: slot_mapping % block_size."""
    block_tables: torch.Tensor
    """[num_tokens, max_blocks] long: the block table of each row's sequence, padded with 0."""
    context_lens: torch.Tensor
    """[num_tokens] long: tokens each row attends to (its position + 1)."""
    block_size: int
    kernel: Callable
    """The compiled ``paged_decode_attention``."""
    latent_kernel: Callable | None = None
    """The compiled ``paged_mla_attention`` (DeepSeek's latent attention), or None."""

    def attend(self, q, k, v, k_cache, v_cache, scale: float) -> torch.Tensor:
        return self.kernel(q, k_cache, v_cache, self.block_tables, self.context_lens, self.block_size, scale)


AttentionMetadata = TorchAttentionMetadata | CppAttentionMetadata
"""What the model's attention layers read each step; one type per backend."""


def build_cpp_metadata(tables: torch.Tensor, row_of_token: torch.Tensor, positions: torch.Tensor,
                       slot_mapping: torch.Tensor, block_size: int, kernel: Callable,
                       latent_kernel: Callable | None = None) -> CppAttentionMetadata:
    """tables [B, max_blocks] (one row per sequence), row_of_token [T], positions [T]."""
    return CppAttentionMetadata(slot_mapping, slot_mapping // block_size, slot_mapping % block_size,
                                tables[row_of_token], positions + 1, block_size, kernel, latent_kernel)


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
    return TorchAttentionMetadata(slot_mapping, slot_mapping // block_size, slot_mapping % block_size, nd,
                                  decode_blocks, decode_bias, chunks, block_size)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q: [T, Hq, D]; k, v: [T, Hkv, D]; caches: [num_blocks, Hkv, block_size, D]
    (one part each of the layer's cache). Returns [T, Hq, D]. Writes k, v into
    the caches at meta.slot_mapping, then attends with the backend the metadata
    was built for. One shared part (latent attention) passes the same view as
    both caches and the same tensor as k and v: it is written once."""
    # [num_blocks, block_size, Hkv, D] views: (block, offset) picks a token's [Hkv, D].
    k_cache.transpose(1, 2).index_put_((meta.slot_blocks, meta.slot_offsets), k)
    if v_cache is not k_cache or v is not k:
        v_cache.transpose(1, 2).index_put_((meta.slot_blocks, meta.slot_offsets), v)
    return meta.attend(q, k, v, k_cache, v_cache, scale)


def paged_latent_attention(q: torch.Tensor, latent: torch.Tensor, cache: torch.Tensor, meta: AttentionMetadata,
                           scale: float, v_dim: int) -> torch.Tensor:
    """Multi-query attention over one shared cached row per token (DeepSeek's
    absorbed MLA, model/mla.py): the key is the whole row, the value its first
    ``v_dim`` values. q: [T, H, D]; latent: this step's [T, 1, D]; cache: the
    layer's one part, [num_blocks, 1, block_size, D]. Writes the latents at
    meta.slot_mapping, returns [T, H, v_dim]. On the C++ backend one kernel
    (csrc/mla_decode_attention.cpp) reads each cached row once for all heads
    and only its first v_dim values as the value; the torch path attends with
    the whole row as value and drops the rest."""
    if isinstance(meta, CppAttentionMetadata) and meta.latent_kernel is not None:
        cache.transpose(1, 2).index_put_((meta.slot_blocks, meta.slot_offsets), latent)
        return meta.latent_kernel(q, cache, meta.block_tables, meta.context_lens, meta.block_size, scale, v_dim)
    return paged_attention(q, latent, latent, cache, cache, meta, scale)[..., :v_dim]


def _block_rows(cache: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """cache [num_blocks, Hkv, block_size, D], strided across blocks ->
    (rows, block stride, head stride): ``rows`` [R, block_size, D] is a
    contiguous view of the layer's storage from this part's first row on,
    (block b, head h) being rows[b * block_stride + h * head_stride].
    index_select over it copies whole rows or runs, as over a contiguous cache;
    advanced indexing on the strided view itself copies element by element
    (measured 2-5x slower on CPU for SmolLM2's decode gathers)."""
    n, hkv, bs, d = cache.shape
    run = bs * d
    if cache.stride(3) != 1 or cache.stride(2) != d or cache.stride(1) % run or cache.stride(0) % run:
        raise ValueError(f"cache: [num_blocks, Hkv, block_size, D] with contiguous [block_size, D] runs "
                         f"expected, got strides {cache.stride()}")
    sb, sh = cache.stride(0) // run, cache.stride(1) // run
    rows = torch.as_strided(cache, ((n - 1) * sb + (hkv - 1) * sh + 1, bs, d), (run, d, 1), cache.storage_offset())
    return rows, sb, sh


def _block_index(blocks: torch.Tensor, sb: int, sh: int, hkv: int) -> torch.Tensor:
    """blocks [B, nb] -> [Hkv * B * nb] long: the ``_block_rows`` row of each
    (head, block), head-major."""
    heads = torch.arange(hkv, device=blocks.device)[:, None] * sh  # [Hkv, 1]
    return (blocks.reshape(1, -1) * sb + heads).view(-1)


def _slot_index(slots: torch.Tensor, sb: int, sh: int, hkv: int, bs: int) -> torch.Tensor:
    """slots [L] -> [Hkv * L] long: the row of ``_block_rows(...)[0].view(-1, D)``
    holding each (head, slot), head-major."""
    heads = torch.arange(hkv, device=slots.device)[:, None] * (sh * bs)  # [Hkv, 1]
    return ((slots // bs * sb * bs + slots % bs)[None, :] + heads).view(-1)


def _decode_attention(q, kc, vc, bias, scale):
    """q: [B, Hq, D]; kc, vc: [Hkv, B, L, D] each decode's gathered blocks;
    bias: [B, L] (0 inside each context, -inf past it) -> [B, Hq, D]."""
    # q: [B, Hq, D] -> [Hkv, B, G, D]: the G query heads sharing a KV head act as
    # G query rows, so K/V are never repeated for grouped-query attention.
    # Two batched matmuls with the softmax in float32: with G query rows per
    # (KV head, sequence), torch's CPU flash SDPA is 2-4x slower than this in
    # bf16 (measured), and the float32 softmax keeps bf16 runs close to fp32.
    b, hq, d = q.shape
    hkv = kc.shape[0]
    qg = q.view(b, hkv, hq // hkv, d).transpose(0, 1)  # [Hkv, B, G, D]
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
