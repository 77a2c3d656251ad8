"""KV cache events: what a KV-aware router needs to mirror a worker's cache.

Emitted by the block pool in the order the changes happen; ``take_events``
drains them. Hashes are the chained block hashes of engine/block_hash.py, so
two workers holding the same prefix report the same hashes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    """The tokens of the stored blocks, concatenated."""
    block_size: int


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared
