"""Adopting a prompt's K/V computed by a prefill engine (disaggregated serving):
the imported blocks are checked against the request and this engine's layout,
written into this cache, and handed to the request, which then starts with its
prompt computed. EngineCore.add_request calls it."""

from __future__ import annotations

import logging

import torch

from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.kv_transfer import KVBlocks, KVLayout, scatter
from tokenmill.engine.request import Request

log = logging.getLogger(__name__)


def adopt_kv(req: Request, blocks: KVBlocks, layout: KVLayout, kv: KVCacheManager, pool: BlockPool,
             caches: list[torch.Tensor], block_size: int) -> int | None:
    """Write ``blocks`` into ``caches`` and hand them to ``req``; returns how many
    blocks were imported, or None when they cannot be used here (a held prefix
    block was evicted, or the pool is short: the request recomputes its prompt).
    The blocks before ``first_block`` are this engine's own prefix-cache entries,
    and the imported full blocks join that cache. ValueError (naming the field)
    when they do not fit the request or this layout; nothing is taken then."""
    layout.check_matches(blocks.layout)
    prompt = req.prompt_token_ids
    if blocks.request_id != req.request_id or blocks.num_tokens != len(prompt):
        raise ValueError(f"kv_blocks: they hold request {blocks.request_id!r}'s {blocks.num_tokens} prompt tokens, "
                         f"not request {req.request_id!r}'s {len(prompt)}")
    hashes = hash_full_blocks(prompt, block_size)
    first, total = blocks.first_block, kv.blocks_needed(len(prompt))
    if blocks.block_hashes != hashes[first:] or first + blocks.num_blocks != total:
        raise ValueError(f"kv_blocks.block_hashes: blocks {first}..{first + blocks.num_blocks} do not match "
                         f"the request's prompt ({total} blocks)")
    leading = [pool.lookup(h) for h in hashes[:first]]
    if None in leading or total - first > pool.num_free_excluding(leading):
        log.warning("request %s: its imported KV cannot be used here (%s); recomputing its prompt",
                    req.request_id, "a held prefix block was evicted" if None in leading else "no free blocks")
        return None
    pool.touch(leading)
    new = pool.allocate(total - first)
    try:
        scatter(caches, new, blocks.data)
    except Exception:  # a payload whose array does not match its layout: give the blocks back
        pool.release(new[::-1] + leading[::-1])
        raise
    if kv.enable_prefix_caching:  # the full ones serve later prompts here too (KV events tell the router)
        full = len(hashes) - first
        pool.store(new[:full], hashes[first:], hashes[first - 1] if first else None,
                   prompt[first * block_size:len(hashes) * block_size])
    kv.adopt(req, leading + new, hashes)
    req.num_computed_tokens = len(prompt)
    req.num_cached_tokens = first * block_size
    return len(new)
