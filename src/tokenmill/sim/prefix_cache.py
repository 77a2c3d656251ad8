"""One replica's shared prefixes as the engine's block pool keeps them (engine/block_pool.py), for
the serving simulation's requests of a ``prefix_group`` (sim/serving.py).

The engine's free queue is in LRU order: released blocks join its tail, allocation takes from its
head and evicts what those blocks cached, and a prefix hit takes cached blocks off the queue
without evicting them. A request releases its blocks tail first, so its own blocks (question,
answer) join the queue before the prefix's, and within the prefix its last blocks come first:
eviction eats a prefix from its end, and what is left of it still hits.

Here the queue is a deque of segments ``[group, blocks]`` (group -1: blocks caching no shared
prefix). A prefix's blocks are shared: counted once, held while any running request uses them
(``refs``), and back on the queue, as one segment at its tail, when the last one releases them.
A prefix is shared block by block as it is computed, as the engine caches each full block after
the step that filled it: the first request to fill a prefix's next blocks registers them (they
become the prefix's, and a prompt admitted while it computes the rest in chunks hits what is
done); one that fills blocks someone else registered meanwhile keeps its copies as its own, as
the engine keeps the first block stored under a hash.
"""

from __future__ import annotations

from collections import deque

import numpy as np


def whole_block_hits(hit, prompt, block_size: int):
    """Prefix hits as a replica admits them (KVCacheManager.find_prefix): rounded down to whole blocks,
    each leaving at least one prompt token to compute. Arrays or ints alike."""
    blocks = hit // block_size
    return np.where(blocks * block_size >= prompt, blocks - 1, blocks) * block_size


class SharedPrefixes:
    def __init__(self, num_blocks: int, groups: int):
        self.queue: deque[list[int]] = deque([[-1, num_blocks]])
        self.blocks = np.zeros(groups, dtype=np.int64)
        """Cached blocks of each prefix, from its first (what a hit finds)."""
        self.refs = np.zeros(groups, dtype=np.int64)
        """Running requests holding each prefix's blocks (0: they are on the free queue, if cached)."""
        self.segment: list[list[int] | None] = [None] * groups
        """Each unheld cached prefix's segment on the queue."""

    def take(self, n: int) -> None:
        """``n`` blocks leave the queue's head (an allocation), evicting what they cached."""
        q = self.queue
        while n:
            seg = q[0]
            t = min(seg[1], n)
            seg[1] -= t
            n -= t
            g = seg[0]
            if g >= 0:
                self.blocks[g] -= t
            if seg[1] == 0:  # used up, or a segment a hit took off the queue
                q.popleft()
                if g >= 0 and self.segment[g] is seg:
                    self.segment[g] = None

    def give(self, n: int, g: int = -1) -> None:
        """``n`` released blocks join the queue's tail (``g``: the prefix they cache)."""
        if n <= 0:
            return
        if g < 0 and self.queue and self.queue[-1][0] < 0:
            self.queue[-1][1] += n
            return
        seg = [g, n]
        self.queue.append(seg)
        if g >= 0:
            self.segment[g] = seg

    def on_queue(self, g: int) -> int:
        """Blocks of prefix ``g`` a hit would take off the queue (0 while held)."""
        seg = self.segment[g]
        return seg[1] if seg is not None else 0

    def hold(self, g: int) -> int:
        """A request starts using prefix ``g``'s cached blocks; returns the blocks that left the queue."""
        self.refs[g] += 1
        seg = self.segment[g]
        if seg is None:
            return 0
        n = seg[1]
        seg[1] = 0  # left in place, empty: ``take`` drops it when it reaches the head
        self.segment[g] = None
        return n

    def drop(self, g: int) -> int:
        """A holder of prefix ``g`` released it; returns the blocks that joined the queue (the last one's)."""
        self.refs[g] -= 1
        if self.refs[g]:
            return 0
        n = int(self.blocks[g])
        self.give(n, g)
        return n

    def computed(self, g: int, filled: int, shared: int) -> int:
        """A request holding ``shared`` of prefix ``g``'s blocks has filled its first ``filled`` (whole
        blocks of the prefix, computed); returns how many of its blocks are now the prefix's. It
        registers (or extends) the prefix when what is cached is exactly what it holds; otherwise its
        copies stay its own."""
        if shared >= filled or int(self.blocks[g]) != shared:
            return shared
        if not shared:
            self.refs[g] += 1
        self.blocks[g] = filled
        return filled


class PrefixHits:
    """ReplicaSim's (sim/serving.py) prefix hits and block release, over its per-request arrays
    (``cached``, ``group``, ``prefix``, ``prompt``, ``held``, ``shared``, ``computed``), its free
    block count ``free`` and its ``prefixes`` (a SharedPrefixes, None without shared prefixes)."""

    def _whole_blocks(self, hit: np.ndarray, r: np.ndarray | int = slice(None)) -> np.ndarray:
        return whole_block_hits(hit, self.prompt[r], self.cfg.block_size)

    def prefix_hit(self, r: int) -> int:
        """Prompt tokens request ``r`` finds cached here now (its own hit or its shared prefix's)."""
        return max(int(self.cached[r]), self._group_hit(r))

    def _group_hit(self, r: int) -> int:
        g = int(self.group[r])
        if g < 0:
            return 0
        shared = min(int(self.prefixes.blocks[g]) * self.cfg.block_size, int(self.prefix[r]))
        return int(self._whole_blocks(np.int64(shared), r))

    def _take(self, n: int) -> None:
        """``n`` blocks allocated from the free queue (evicting cached prefixes at its head)."""
        self.free -= n
        if self.prefixes is not None:
            self.prefixes.take(n)

    def _release(self, r: int) -> None:
        """Request ``r``'s blocks back to the free queue: its own, then its shared prefix's if it held
        them last (released tail first, as KVCacheManager.free)."""
        held, shared = int(self.held[r]), int(self.shared[r])
        self.held[r] = self.shared[r] = 0
        self.free += held - shared
        if self.prefixes is not None:
            self.prefixes.give(held - shared)
            if shared:
                self.free += self.prefixes.drop(int(self.group[r]))

    def _register_prefixes(self, ids: np.ndarray) -> None:
        """After a step over ``ids``: those that have filled more of their shared prefix's whole blocks
        than they share register them (KVCacheManager.cache_computed_blocks, block by block)."""
        filled = np.minimum(self.computed[ids], self.prefix[ids]) // self.cfg.block_size
        group, shared = self.group[ids], self.shared[ids]
        # Only a request holding exactly what its prefix caches can extend it (``SharedPrefixes.computed``).
        # A registration in the loop below only raises a prefix's count, so a request filtered out here (its
        # prefix caches more than it holds) could not register there either; without the filter, requests
        # left with their own copies were tried again every step.
        more = (group >= 0) & (filled > shared) & (self.prefixes.blocks[np.maximum(group, 0)] == shared)
        for r, f in zip(ids[more].tolist(), filled[more].tolist()):
            self.shared[r] = self.prefixes.computed(int(self.group[r]), f, int(self.shared[r]))

