"""Which blocks each request holds, prefix-cache lookups, and block hashing.

Rules:
- a request's blocks cover positions [0, num_computed + scheduled) in order;
  block i holds positions [i*bs, (i+1)*bs);
- a block is hashed and indexed once all its tokens' K/V are computed (after
  the step that filled it), never before, so a hit always reads valid K/V;
- a prefix hit never covers the whole prompt: the last token is recomputed so
  the request has logits to sample from;
- a request with prompt_logprobs takes no hit past the prompt positions it has
  reported (Request.num_prompt_logprobs: none when new): a cached position has
  no logits. Its computed blocks are still indexed for others;
- held blocks (disaggregated prefill: a finished prefill-only request's prompt,
  waiting for a decode engine to take it) keep their references until
  ``release_hold`` or until they expire (``HOLD_TIMEOUT_S``), so no transfer a
  decode engine abandons leaks them. Holds are the one piece another thread
  reads (``claim_held``, for the export that copies them out): ``_hold_lock``
  guards the table, and a claimed hold never expires under its reader.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.request import Request

HOLD_TIMEOUT_S = 60.0
"""Seconds a prefill engine keeps a finished prompt's blocks for a decode
engine that has not come for them (a transfer takes milliseconds; a frontend
that died mid-handoff never comes)."""


@dataclass
class HeldBlocks:
    """A finished prefill-only request's prompt blocks, waiting for export."""

    blocks: list[int]
    """The request's blocks covering its prompt, in order (the last may be partly filled)."""
    hashes: list[int]
    """Chained hashes of its full blocks."""
    num_tokens: int
    """Prompt tokens the blocks hold."""
    deadline: float
    """time.monotonic() after which an unclaimed hold is released."""
    claimed: bool = False
    """An export is reading the blocks: expiry leaves them alone."""


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
        self.held: dict[str, HeldBlocks] = {}
        self._hold_lock = threading.Lock()

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_prefix(self, request: Request) -> list[int]:
        """Blocks holding the longest cached prefix of the request's tokens
        (takes no reference, counts nothing: ``count_lookup`` counts it once
        the request is admitted)."""
        usable = self._lookup_span(request)
        if not usable:
            return []
        tokens = request.token_ids
        found = []
        for h in hash_full_blocks(tokens[:usable], self.block_size):
            block = self.pool.lookup(h)
            if block is None:
                break
            found.append(block)
        # Keep at least one token to compute (it yields the logits to sample).
        if found and len(found) * self.block_size >= len(tokens):
            found.pop()
        return found

    def _lookup_span(self, request: Request) -> int:
        """Tokens a prefix hit may cover; 0 where no lookup is made (caching
        off, or prompt logprobs still owed for positions in the first block)."""
        if not self.enable_prefix_caching:
            return 0
        if request.params.prompt_logprobs is not None and request.num_prompt_logprobs < request.num_prompt_tokens - 1:
            usable = request.num_prompt_logprobs
            return usable if usable >= self.block_size else 0
        return request.num_tokens

    def count_lookup(self, request: Request, num_hit_blocks: int) -> None:
        """Count an admitted request's lookup in the hit-rate stats: once per
        admission, not each step it waited at the head of the queue (a prompt
        waiting for room would be looked up, and counted, again every step).
        A preempted request's readmission is a lookup of its own."""
        if not self._lookup_span(request):
            return  # find_prefix looked nothing up
        self.queries += request.num_tokens
        self.hits += num_hit_blocks * self.block_size

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

    # ---- disaggregated prefill: holding blocks for export, adopting imported ones ----

    def hold(self, request: Request, timeout_s: float = HOLD_TIMEOUT_S) -> None:
        """Keep the blocks of the request's computed tokens (its prompt) for an
        export instead of freeing them; any block past them is freed."""
        rid = request.request_id
        blocks = self.blocks.pop(rid, [])
        hashes = self.hashes.pop(rid, [])
        full = request.num_computed_tokens // self.block_size
        if len(hashes) < full:  # prefix caching off: nothing hashed them, and the receiver checks them
            hashes = hash_full_blocks(request.token_ids[:full * self.block_size], self.block_size)
        keep = self.blocks_needed(request.num_computed_tokens)
        self.pool.release(blocks[keep:][::-1])
        with self._hold_lock:
            self.held[rid] = HeldBlocks(blocks[:keep], hashes, request.num_computed_tokens,
                                        time.monotonic() + timeout_s)

    def claim_held(self, request_id: str) -> HeldBlocks | None:
        """The hold of a request, marked as being read (any thread); None if
        there is none (never held, released or expired)."""
        with self._hold_lock:
            held = self.held.get(request_id)
            if held is not None:
                held.claimed = True
            return held

    def release_hold(self, request_id: str) -> bool:
        """Drop a hold (exported, or abandoned); False if there was none."""
        with self._hold_lock:
            held = self.held.pop(request_id, None)
        if held is None:
            return False
        self.pool.release(held.blocks[::-1])
        return True

    def expire_holds(self, now: float | None = None) -> int:
        """Release unclaimed holds past their deadline; returns how many."""
        now = time.monotonic() if now is None else now
        with self._hold_lock:
            expired = [rid for rid, h in self.held.items() if h.deadline <= now and not h.claimed]
            released = [self.held.pop(rid) for rid in expired]
        for held in released:
            self.pool.release(held.blocks[::-1])
        return len(released)

    def adopt(self, request: Request, blocks: list[int], hashes: list[int]) -> None:
        """Give a new request blocks that already hold its first tokens' K/V
        (imported, or prefix hits; the caller took their references) and the
        chained hashes of the full ones."""
        self.blocks[request.request_id] = list(blocks)
        self.hashes[request.request_id] = list(hashes)
