"""The global KV index: which worker holds which block, mirrored from KV events.

Structure: a map block hash -> set of workers holding it (and its mirror,
worker -> hashes, to drop a worker at once). A request's overlap with a worker
is the number of LEADING blocks of its chained hashes that worker holds:
``overlap`` walks the request's hashes in order, shrinking the set of candidate
workers, and a worker's count is fixed at its first miss. Prefix match is the
right notion because the engine's prefix cache stops at the first miss too.

Why not a radix tree (Dynamo's and sgl-router's shape)? A chained hash already
names its whole prefix (hash i covers blocks 0..i), so the node a tree would
reach by walking blocks 0..i is just the dict entry of hash i: the flat map is
that tree with every node addressed directly. Parent links are not stored
either (a BlockStored's ``parent_block_hash`` is implied by the chain); a worker
that holds a child but lost its parent (LRU evicted it first) scores only up to
the missing parent, which is what it could serve.

Cost: ``overlap`` is O(sum over the request's leading blocks of the candidate
set's size) and stops once no candidate is left; ``apply`` is O(hashes in the batch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from tokenmill.cluster.router.types import WorkerId
from tokenmill.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch


class BlockHolders:
    """hash -> workers and worker -> hashes, kept mirror images of each other.

    Invariant: ``w in _by_hash[h]  <=>  h in _by_worker[w]``; no empty set is
    kept in either map (a removed worker or hash leaves nothing behind).
    """

    def __init__(self):
        self._by_hash: dict[int, set[WorkerId]] = {}
        self._by_worker: dict[WorkerId, set[int]] = {}

    def add(self, worker_id: WorkerId, hashes: Iterable[int]) -> None:
        mine = self._by_worker.setdefault(worker_id, set())
        for h in hashes:
            mine.add(h)
            self._by_hash.setdefault(h, set()).add(worker_id)

    def discard(self, worker_id: WorkerId, hashes: Iterable[int]) -> None:
        mine = self._by_worker.get(worker_id)
        if mine is None:
            return
        for h in hashes:
            if h in mine:
                mine.discard(h)
                self._unlink(h, worker_id)
        if not mine:
            del self._by_worker[worker_id]

    def drop_worker(self, worker_id: WorkerId) -> None:
        for h in self._by_worker.pop(worker_id, ()):
            self._unlink(h, worker_id)

    def _unlink(self, h: int, worker_id: WorkerId) -> None:
        holders = self._by_hash[h]
        holders.discard(worker_id)
        if not holders:
            del self._by_hash[h]

    def holders(self, block_hash: int) -> frozenset:
        return frozenset(self._by_hash.get(block_hash, ()))

    def hashes_of(self, worker_id: WorkerId) -> frozenset[int]:
        return frozenset(self._by_worker.get(worker_id, ()))

    def overlap(self, block_hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Worker -> leading blocks of ``block_hashes`` it holds; workers holding
        not even the first block are left out (their overlap is 0)."""
        result: dict[WorkerId, int] = {}
        if not block_hashes:
            return result
        candidates = set(self._by_hash.get(block_hashes[0], ()))
        depth = 0  # invariant: every candidate holds block_hashes[:depth]
        for h in block_hashes:
            if not candidates:
                return result
            holders = self._by_hash.get(h, ())
            survivors = {w for w in candidates if w in holders}
            for w in candidates - survivors:
                result[w] = depth
            candidates = survivors
            depth += 1
        for w in candidates:  # held the whole request
            result[w] = depth
        return result


class KVIndex:
    """The exact index, fed by each worker's ``KVEventBatch`` stream.

    Gaps: a batch with ``dropped > 0`` (the worker's buffer lost events) or whose
    ``first_seq`` is not the next sequence number expected from that worker (a
    batch lost in transit, a replay, or a restarted worker starting again at 0)
    means the mirror may be wrong. The worker is then treated as cleared, and
    the batch applied on the empty mirror: the index under-reports that worker
    until it stores blocks again, never over-reports. The first batch from a
    worker is expected at sequence 0. ``gaps`` counts the gaps per worker.
    """

    def __init__(self):
        self._blocks = BlockHolders()
        self._next_seq: dict[WorkerId, int] = {}  # next event sequence number expected per worker
        self.gaps: Counter = Counter()
        """worker -> batches that found a gap (for metrics)."""

    def apply(self, worker_id: WorkerId, batch: KVEventBatch) -> bool:
        """Mirror one batch of ``worker_id``'s events; True if it revealed a gap."""
        gap = batch.dropped > 0 or batch.first_seq != self._next_seq.get(worker_id, 0)
        if gap:
            self._blocks.drop_worker(worker_id)
            self.gaps[worker_id] += 1
        for event in batch.events:
            self._apply_event(worker_id, event)
        self._next_seq[worker_id] = batch.first_seq + len(batch.events)
        return gap

    def _apply_event(self, worker_id: WorkerId, event) -> None:
        if isinstance(event, BlockStored):
            self._blocks.add(worker_id, event.block_hashes)
        elif isinstance(event, BlockRemoved):
            self._blocks.discard(worker_id, event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            self._blocks.drop_worker(worker_id)
        else:
            raise ValueError(f"event: unknown KV event type {type(event).__name__}")

    def remove_worker(self, worker_id: WorkerId) -> None:
        """Forget a worker at once (dead or gone); its next batch, if any, starts a fresh mirror."""
        self._blocks.drop_worker(worker_id)
        self._next_seq.pop(worker_id, None)

    def expected_seq(self, worker_id: WorkerId) -> int:
        """The sequence number the worker's next batch should start at."""
        return self._next_seq.get(worker_id, 0)

    def overlap(self, block_hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Worker -> leading blocks of the request it holds (absent = 0)."""
        return self._blocks.overlap(block_hashes)

    def holders(self, block_hash: int) -> frozenset:
        return self._blocks.holders(block_hash)

    def hashes_of(self, worker_id: WorkerId) -> frozenset[int]:
        return self._blocks.hashes_of(worker_id)
