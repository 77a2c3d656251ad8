"""DeepSeek multi-head latent attention (MLA) over the paged latent cache: the torch reference.

MLA caches, per token and layer, one latent row of width ``D = Dl + Dr``: the
normalised compressed KV ``c_kv`` (``Dl = kv_lora_rank``, DeepSeek-V3: 512)
followed by the rotated shared key (``Dr = qk_rope_head_dim``, 64). In the
weight-absorbed form the up-projections are folded into the query and the
output, so every query head h has a query row ``q[t, h, :D]`` (its nope part
projected into the latent space, then its rotary part) and attention is
multi-query over that one latent head, the whole row as key and its first
``Dv = v_dim`` values (``c_kv``, so ``Dv = Dl``) as value:

    scores[t, h, j] = scale * q[t, h, :D] . row_j[:D]     for j < context_lens[t]
    out[t, h, :Dv]  = sum_j softmax_j(scores[t, h])[j] * row_j[:Dv]

Shapes (as csrc/mla_decode_attention.cpp takes them, ``paged_mla_attention``):

- ``q``: [T, H, D], one row per query token (float32 or bfloat16);
- ``cache``: [num_blocks, 1, block_size, D], the view ``layer[:, 0]`` of a layer's
  one-part cache [num_blocks, 1, 1, block_size, D] (model/kv_cache_spec.py),
  strided across blocks; slot = block * block_size + offset;
- ``block_tables``: [T, max_blocks] int64, row t's sequence's block table;
- ``context_lens``: [T] int64, how many slots row t attends to;
- returns [T, H, v_dim] in q's dtype.

A decode is one row; a prefill chunk of n tokens is n rows sharing a block
table, each with context length position + 1 (causal once the chunk's latents
are in the cache).
"""

from __future__ import annotations

import torch


def mla_attention_reference(q: torch.Tensor, cache: torch.Tensor, block_tables: torch.Tensor,
                            context_lens: torch.Tensor, block_size: int, scale: float, v_dim: int) -> torch.Tensor:
    """Plain torch, one query row at a time: gather the row's slots, float32 softmax.
    Same arguments and result as the C++ ``paged_mla_attention`` (module docstring)."""
    T, H, D = q.shape
    if cache.dim() != 4 or cache.shape[1] != 1 or cache.shape[2] != block_size or cache.shape[3] != D:
        raise ValueError(f"cache: expected [num_blocks, 1, {block_size}, {D}], got {list(cache.shape)}")
    if not 1 <= v_dim <= D:
        raise ValueError(f"v_dim: must be in [1, {D}], got {v_dim}")
    rows_of = cache[:, 0]  # [num_blocks, block_size, D]
    out = torch.empty(T, H, v_dim, dtype=q.dtype, device=q.device)
    for t in range(T):
        pos = torch.arange(int(context_lens[t]), device=q.device)
        rows = rows_of[block_tables[t, pos // block_size], pos % block_size].float()  # [L, D]
        p = torch.softmax(q[t].float() @ rows.T * scale, dim=-1)  # [H, L]
        out[t] = (p @ rows[:, :v_dim]).to(q.dtype)
    return out
