"""KV cache events: what a KV-aware router needs to mirror a worker's cache.

Emitted by the block pool in the order the changes happen, and only while a
consumer subscribes (``BlockPool.subscribe_events``): nobody reads them
otherwise, and an unread log grows with every block served. Hashes are the
chained block hashes of engine/block_hash.py, so two workers holding the same
prefix report the same hashes.

Events carry sequence numbers (their position in the pool's event stream).
The buffer is bounded: when a consumer falls behind, the oldest events are
dropped and the next batch says how many, so the consumer knows its mirror
has a gap (and should treat it as cleared and relearn).

The event types are msgspec Structs (tagged by class name) so a batch crosses
a process boundary as msgpack inside EngineCoreOutputs (engine/core_messages.py).
"""

from __future__ import annotations

from collections import deque

import msgspec


class BlockStored(msgspec.Struct, frozen=True, tag=True):
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    """The tokens of the stored blocks, concatenated."""
    block_size: int


class BlockRemoved(msgspec.Struct, frozen=True, tag=True):
    block_hashes: tuple[int, ...]


class AllBlocksCleared(msgspec.Struct, frozen=True, tag=True):
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, frozen=True):
    """What one ``take`` drains: events numbered first_seq, first_seq + 1, ..."""

    first_seq: int
    events: tuple[KVEvent, ...]
    dropped: int = 0
    """Events lost to the buffer bound just before first_seq (a gap in the stream)."""


class KVEventBuffer:
    """A bounded FIFO of KV events with sequence numbers (one per subscriber)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity: must be positive, got {capacity}")
        self.capacity = capacity
        self._events: deque[KVEvent] = deque()
        self._next_seq = 0  # sequence number of the next event recorded
        self._dropped = 0

    def __len__(self) -> int:
        return len(self._events)

    def record(self, event: KVEvent) -> None:
        if len(self._events) == self.capacity:
            self._events.popleft()
            self._dropped += 1
        self._events.append(event)
        self._next_seq += 1

    def extend(self, batch: KVEventBatch) -> None:
        """Relay a batch drained from another buffer (an engine core's stream):
        sequence numbers stay the source's, and its gaps (the events it dropped,
        ``batch.dropped`` of them, or batches that never arrived) count as dropped."""
        self._dropped += max(batch.first_seq - self._next_seq, 0)
        self._next_seq = batch.first_seq
        for event in batch.events:
            self.record(event)

    def take(self) -> KVEventBatch:
        batch = KVEventBatch(self._next_seq - len(self._events), tuple(self._events), self._dropped)
        self._events.clear()
        self._dropped = 0
        return batch
