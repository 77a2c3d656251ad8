"""The KV block pool: free list, reference counts, and the prefix-cache index.

Invariants (checked by ``check_invariants`` in tests):
- a block is in the free queue  <=>  its ref count is 0;
- a block with a hash is in ``cached`` under that hash, and ``cached`` maps
  each hash to exactly one block; a hashed block may be free (ref 0): it still
  serves prefix hits until it is evicted;
- the free queue is LRU order: released blocks go to the tail, allocation takes
  from the head, so the least recently used cached block is evicted first.
Eviction happens only in ``allocate``: taking a hashed free block drops its hash
(event BlockRemoved). Hitting a free cached block (``touch``) takes it off the
free queue without evicting it.
KV events (kv_events.py) are recorded only after ``subscribe_events``, into a
bounded buffer; without a subscriber the pool keeps no history at all.
"""

from __future__ import annotations

from collections import OrderedDict

from tokenmill.engine.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventBatch,
    KVEventBuffer,
)

DEFAULT_EVENT_CAPACITY = 16384
"""Events a subscriber may leave unread before the oldest are dropped."""


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1:
            raise ValueError(f"num_kv_blocks: need at least 1 KV block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}
        self._events: KVEventBuffer | None = None  # None: nobody subscribed, nothing recorded

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the LRU head, evicting their cached hashes."""
        if n > len(self.free_queue):
            raise RuntimeError(f"allocate {n} blocks with only {len(self.free_queue)} free")
        out = []
        evicted = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)
            h = self.block_hash[block]
            if h is not None:
                del self.cached[h]
                self.block_hash[block] = None
                evicted.append(h)
            self.ref_cnt[block] = 1
            out.append(block)
        if evicted:
            self._record(BlockRemoved(tuple(evicted)))
        return out

    def touch(self, blocks: list[int]) -> None:
        """Take a reference on cached blocks (a prefix hit)."""
        for block in blocks:
            if self.ref_cnt[block] == 0:
                del self.free_queue[block]
            self.ref_cnt[block] += 1

    def release(self, blocks: list[int]) -> None:
        """Drop one reference each; blocks reaching 0 join the LRU tail in the
        given order (callers pass a request's blocks tail-first, so its later,
        less shared blocks are evicted before its prefix)."""
        for block in blocks:
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] < 0:
                raise RuntimeError(f"block {block} released more often than taken")
            if self.ref_cnt[block] == 0:
                self.free_queue[block] = None

    def lookup(self, block_hash: int) -> int | None:
        return self.cached.get(block_hash)

    def num_free_excluding(self, blocks: list[int]) -> int:
        """Free blocks left if ``blocks`` (prefix hits) were touched first."""
        return len(self.free_queue) - sum(1 for b in blocks if self.ref_cnt[b] == 0)

    def store(self, blocks: list[int], hashes: list[int], parent_hash: int | None, token_ids: list[int]) -> None:
        """Register full blocks under their chained hashes (``token_ids``: their
        tokens, concatenated). A hash already held by another block stays with
        that block: the duplicate is not indexed, and not reported."""
        run: list[int] = []  # indices of consecutive blocks stored: one event per run
        for i, (block, h) in enumerate(zip(blocks, hashes)):
            if h in self.cached or self.block_hash[block] is not None:
                self._record_stored(run, hashes, parent_hash, token_ids)
                run = []
                continue
            self.cached[h] = block
            self.block_hash[block] = h
            run.append(i)
        self._record_stored(run, hashes, parent_hash, token_ids)

    def _record_stored(self, run: list[int], hashes: list[int], parent_hash: int | None,
                       token_ids: list[int]) -> None:
        if not run or self._events is None:
            return
        first, last, bs = run[0], run[-1], self.block_size
        parent = hashes[first - 1] if first else parent_hash  # the chain continues from the block before
        self._record(BlockStored(tuple(hashes[first:last + 1]), parent,
                                 tuple(token_ids[first * bs:(last + 1) * bs]), bs))

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only allowed when no block is in use."""
        if self.num_used_blocks:
            return False
        self.cached.clear()
        self.block_hash = [None] * self.num_blocks
        self._record(AllBlocksCleared())
        return True

    # ---- KV events -------------------------------------------------------------

    def subscribe_events(self, capacity: int = DEFAULT_EVENT_CAPACITY) -> None:
        """Start recording KV events (a KV-aware router mirrors the cache with
        them). The consumer drains them with ``take_events``; past ``capacity``
        unread events the oldest are dropped (the next batch counts them)."""
        if self._events is None:
            self._events = KVEventBuffer(capacity)

    def _record(self, event: KVEvent) -> None:
        if self._events is not None:
            self._events.record(event)

    @property
    def num_pending_events(self) -> int:
        return len(self._events) if self._events is not None else 0

    def take_events(self) -> KVEventBatch:
        """Drain the recorded events (an empty batch when nobody subscribed)."""
        if self._events is None:
            return KVEventBatch(0, ())
        return self._events.take()

    def check_invariants(self) -> None:
        for block in range(self.num_blocks):
            assert (self.ref_cnt[block] == 0) == (block in self.free_queue), f"block {block}"
            h = self.block_hash[block]
            assert h is None or self.cached[h] == block, f"block {block} hash index"
        assert len(self.cached) == sum(h is not None for h in self.block_hash)
