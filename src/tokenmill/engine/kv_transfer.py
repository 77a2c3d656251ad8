"""KV blocks that leave one engine and land in another (disaggregated serving).

A prefill engine computes a prompt, samples its first token and keeps the
prompt's blocks (KVCacheManager.hold); ``export`` copies the blocks the decode
engine lacks into a ``KVBlocks`` payload; the decode engine checks the payload
against its own layout and writes it into freshly allocated blocks of its
paged cache (``scatter``), where the request continues as if it had prefilled
there. How the payload travels between processes is the transport's job
(cluster/kv_transport.py); this module is torch and numpy only.

Payload layout: one numpy array of raw bytes, shaped
``[num_layers, num_blocks, num_parts, num_heads, block_size, head_dim * itemsize]``,
blocks in request order starting at the request's block ``first_block``. Raw
bytes (uint8) because numpy has no bfloat16, and because a numpy array is
what Ray's object store hands back zero-copy on one node.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import msgspec
import numpy as np
import torch

from tokenmill.model.kv_cache_spec import KVCacheSpec


class KVLayout(msgspec.Struct, frozen=True):
    """What a block of this engine's cache holds; two engines exchange blocks
    only when their layouts are equal."""

    parts: tuple[str, ...]
    num_layers: int
    num_heads: int
    head_dim: int
    block_size: int
    dtype: str
    """torch dtype name without the 'torch.' prefix ('bfloat16', 'float32', ...)."""

    @staticmethod
    def of(spec: KVCacheSpec, block_size: int, dtype: torch.dtype) -> KVLayout:
        return KVLayout(tuple(spec.parts), spec.num_layers, spec.num_heads, spec.head_dim, block_size,
                        str(dtype).removeprefix("torch."))

    def check_matches(self, other: KVLayout) -> None:
        """ValueError naming the first field where ``other`` (the sender's) differs from this one."""
        for name in self.__struct_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                raise ValueError(f"kv_layout.{name}: the sender's blocks have {theirs!r}, this engine's {mine!r}; "
                                 "prefill and decode workers must run the same model, dtype and block size")


@dataclass
class KVBlocks:
    """A prompt's KV blocks in transit (``request_id``'s blocks ``first_block`` on)."""

    request_id: str
    layout: KVLayout
    first_block: int
    """Index of the first block in the request's block list (the receiver holds the ones before)."""
    num_tokens: int
    """Prompt tokens the blocks cover in all (the last block may be partly filled)."""
    block_hashes: list[int]
    """Chained hashes of the full blocks from ``first_block`` on (a check for the receiver)."""
    data: np.ndarray
    """uint8, [num_layers, num_blocks, num_parts, num_heads, block_size, head_dim * itemsize]."""

    @property
    def num_blocks(self) -> int:
        return int(self.data.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


def gather(kv_caches: list[torch.Tensor], block_ids: list[int]) -> np.ndarray:
    """Copy blocks out of every layer's cache -> the payload's raw-bytes array."""
    index = torch.tensor(block_ids, dtype=torch.long, device=kv_caches[0].device)
    stacked = torch.stack([cache.index_select(0, index) for cache in kv_caches])  # [L, n, parts, heads, bs, hd]
    return stacked.cpu().contiguous().view(torch.uint8).numpy()


def scatter(kv_caches: list[torch.Tensor], block_ids: list[int], data: np.ndarray) -> None:
    """Write a payload's blocks into ``block_ids`` of every layer's cache.
    ``data`` may be a read-only view (Ray's zero-copy read): it is only read."""
    cache0 = kv_caches[0]
    expected = (len(kv_caches), len(block_ids), *cache0.shape[1:-1], cache0.shape[-1] * cache0.element_size())
    if tuple(data.shape) != expected or data.dtype != np.uint8:
        raise ValueError(f"kv_blocks.data: shape {tuple(data.shape)} {data.dtype}, expected {expected} uint8")
    if not block_ids:  # the receiver held the whole prompt already (a repeat): nothing to write, and
        return         # torch.frombuffer refuses an empty buffer
    with warnings.catch_warnings():  # a read-only buffer: torch warns, and we never write through it
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.frombuffer(np.ascontiguousarray(data), dtype=torch.uint8)
    blocks = raw.view(cache0.dtype).view(len(kv_caches), len(block_ids), *cache0.shape[1:])
    index = torch.tensor(block_ids, dtype=torch.long, device=cache0.device)
    for layer, cache in enumerate(kv_caches):
        cache.index_copy_(0, index, blocks[layer].to(cache.device))
