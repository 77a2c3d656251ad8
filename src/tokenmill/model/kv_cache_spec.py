"""What one token costs in the paged KV cache, and the cache tensors that follow.

A model states it with ``kv_cache_spec()``; the engine sizes the cache from
``bytes_per_token`` and the runner allocates it with ``allocate_kv_caches``.

Layout, per layer, one tensor:

    [num_blocks, num_parts, num_heads, block_size, head_dim]

slot = block * block_size + offset, as in the block tables. A block is the
outermost dimension so that one block of one layer (every part, every head)
is one contiguous chunk: copying or sending a block to another worker is one
memcpy per layer. Inside a block each (part, head) is a contiguous
[block_size, head_dim] run of rows, which is what attention reads.

Parts are what a token stores: Llama-style attention caches a key and a value
(K and V, ``num_kv_heads x head_dim`` each); DeepSeek's multi-head latent
attention caches one latent vector (1 x (kv_lora_rank + rope_dim)). The model
owns how its layer's tensor splits into parts (e.g. ``cache[:, 0]``, ``cache[:, 1]``).
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class KVCacheSpec:
    """Per-token KV cache contents of a model: every layer stores, for each
    token, ``len(parts)`` parts of ``num_heads x head_dim`` values each."""

    num_layers: int
    """Layers that cache (one tensor each)."""
    parts: tuple[str, ...]
    """What each part holds, in tensor order: ('k', 'v') for Llama, ('latent',) for MLA."""
    num_heads: int
    """Heads per part (Llama: num_kv_heads; latent attention: 1)."""
    head_dim: int
    """Values per head."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not self.parts or len(set(self.parts)) != len(self.parts):
            raise ValueError(f"parts: must name at least one part, each once; got {self.parts!r}")

    @property
    def num_parts(self) -> int:
        return len(self.parts)

    def elements_per_token(self) -> int:
        """Values one token stores in one layer."""
        return self.num_parts * self.num_heads * self.head_dim

    def bytes_per_token(self, dtype_bytes: int) -> int:
        """Cache bytes one token costs, summed over all layers."""
        return self.num_layers * self.elements_per_token() * dtype_bytes

    def layer_shape(self, num_blocks: int, block_size: int) -> tuple[int, int, int, int, int]:
        """Shape of one layer's cache tensor (see the module docstring)."""
        return (num_blocks, self.num_parts, self.num_heads, block_size, self.head_dim)


def allocate_kv_caches(spec: KVCacheSpec, num_blocks: int, block_size: int, device: torch.device,
                       dtype: torch.dtype) -> list[torch.Tensor]:
    """One zeroed tensor per layer, each [num_blocks, num_parts, num_heads, block_size, head_dim].
    Zeroed, not empty: the torch decode path reads whole blocks and masks the
    unused tail only after its matmuls, where uninitialised memory holding a
    NaN would leak through (NaN x 0 is NaN).

    On CPU the zeros come from the kernel, not from a memset: each layer is
    an anonymous mapping, whose pages read as zero and are only backed by
    memory when first written. Startup does not touch the whole cache (1 GiB
    by default), resident memory grows with the blocks in use, and freeing
    the tensor unmaps it at once."""
    if num_blocks < 1 or block_size < 1:
        raise ValueError(f"num_blocks and block_size: must be >= 1, got {num_blocks} and {block_size}")
    shape = spec.layer_shape(num_blocks, block_size)
    return [zeroed_cache(shape, device, dtype) for _ in range(spec.num_layers)]


def zeroed_cache(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One cache tensor of zeros; on CPU over its own private anonymous memory
    mapping (see ``allocate_kv_caches``; private, because Python's default,
    shared, would be shared memory, accounted apart from the process's own).
    The tensor holds the mapping, which is unmapped when the tensor is freed."""
    import torch  # here, not at the top: the spec itself is read torch-free (`tokenmill sim`)

    if torch.device(device).type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(mapping, dtype=dtype, count=count).view(shape)
