"""Which blocks each request holds, prefix-cache lookups, and block hashing.

Rules:
- a request's blocks cover positions [0, num_computed + scheduled) in order;
  block i holds positions [i*bs, (i+1)*bs);
- a block is hashed and indexed once all its tokens' K/V are computed (after
  the step that filled it), never before, so a hit always reads valid K/V;
- a prefix hit never covers the whole prompt: the last token is recomputed so
  the request has logits to sample from.
"""

from __future__ import annotations

from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.request import Request


class KVCacheManager:
    def __init__(self, pool: BlockPool, enable_prefix_caching: bool = True):
        self.pool = pool
        self.block_size = pool.block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks: dict[str, list[int]] = {}
        self.hashes: dict[str, list[int]] = {}
        """Chained hashes of the request's full, computed blocks (indexed or not)."""
        self.queries = 0
        self.hits = 0

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_prefix(self, request: Request) -> list[int]:
        """Blocks holding the longest cached prefix of the request's tokens
        (takes no reference). Counts the lookup in the hit-rate stats."""
        if not self.enable_prefix_caching:
            return []
        tokens = request.token_ids
        found = []
        for h in hash_full_blocks(tokens, self.block_size):
            block = self.pool.lookup(h)
            if block is None:
                break
            found.append(block)
        # Keep at least one token to compute (it yields the logits to sample).
        if found and len(found) * self.block_size >= len(tokens):
            found.pop()
        self.queries += len(tokens)
        self.hits += len(found) * self.block_size
        return found

    def allocate(self, request: Request, num_new_tokens: int, prefix: list[int] = ()) -> bool:
        """Grow the request's blocks to cover ``num_new_tokens`` more positions
        after its computed ones (and after ``prefix`` hits, for a new request).
        Returns False, changing nothing, when the pool is short."""
        held = self.blocks.get(request.request_id, [])
        start = len(prefix) * self.block_size if prefix else request.num_computed_tokens
        need = self.blocks_needed(start + num_new_tokens) - len(held) - len(prefix)
        if need > self.pool.num_free_excluding(list(prefix)):
            return False
        if prefix:
            self.pool.touch(list(prefix))
            self.hashes[request.request_id] = hash_full_blocks(request.token_ids[:start], self.block_size)
        new = self.pool.allocate(max(need, 0))
        self.blocks[request.request_id] = held + list(prefix) + new
        return True

    def cache_computed_blocks(self, request: Request) -> None:
        """Index the request's newly full, computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        rid = request.request_id
        hashes = self.hashes.setdefault(rid, [])
        num_full = request.num_computed_tokens // self.block_size
        if num_full <= len(hashes):
            return
        start = len(hashes)
        parent = hashes[-1] if hashes else None
        new = hash_full_blocks(request.token_ids[:num_full * self.block_size], self.block_size, start, parent)
        hashes.extend(new)
        blocks = self.blocks[rid][start:num_full]
        tokens = request.token_ids[start * self.block_size:num_full * self.block_size]
        self.pool.store(blocks, new, parent, tokens)

    def free(self, request: Request) -> None:
        """Release all the request's blocks, tail first (see BlockPool.release)."""
        blocks = self.blocks.pop(request.request_id, [])
        self.hashes.pop(request.request_id, None)
        self.pool.release(blocks[::-1])

    def block_table(self, request_id: str) -> list[int]:
        return self.blocks[request_id]
