"""Chained block hashes for automatic prefix caching.

A full block's hash covers its parent's hash and its own token ids, so equal
hashes mean equal whole prefixes. blake2b (not Python's ``hash``) keeps hashes
stable across processes, which the router relies on.
"""

from __future__ import annotations

import hashlib
from array import array

_NO_PARENT = b"\x00" * 8


def hash_block(parent_hash: int | None, token_ids) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(_NO_PARENT if parent_hash is None else parent_hash.to_bytes(8, "little"))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


def hash_full_blocks(token_ids: list[int], block_size: int, start_block: int = 0,
                     parent_hash: int | None = None) -> list[int]:
    """Hashes of the full blocks from ``start_block`` on, chained from ``parent_hash``."""
    out = []
    for b in range(start_block, len(token_ids) // block_size):
        parent_hash = hash_block(parent_hash, token_ids[b * block_size:(b + 1) * block_size])
        out.append(parent_hash)
    return out
