"""What the engine and the runner use from a model: the ``CausalLM`` protocol.

Anything that satisfies it runs through ModelRunner and the engine, whatever
its layers look like; model classes need not inherit from anything but
``nn.Module``. Loading (config parsing, weight names) is not part of it: that
is the model registry's business (model/registry.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tokenmill.model.kv_cache_spec import KVCacheSpec

if TYPE_CHECKING:
    import torch

    from tokenmill.engine.exact_head import ExactHead
    from tokenmill.kernels.attention import AttentionMetadata
    from tokenmill.kernels.fused_ops import FusedOps


@runtime_checkable
class ArchInfo(Protocol):
    """The description every architecture shares (its own config type adds the rest)."""

    family: str
    """Short architecture name (llama, qwen2, ...), for logs and tests."""
    vocab_size: int
    hidden_size: int
    num_layers: int
    max_position_embeddings: int
    """Longest context the model was trained for: caps max_model_len."""
    sliding_window: int | None
    """Attention window, if any; the engine caps max_model_len at it rather than emulate it."""
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]

    def num_params(self) -> int:
        """Parameter count, embeddings included (tied counted once)."""
        ...

    def flops_per_token(self, context_len: int = 0) -> float:
        """Forward FLOPs for one token attending over ``context_len`` cached tokens."""
        ...


@runtime_checkable
class CausalLM(Protocol):
    """A decoder over the paged KV cache (an ``nn.Module``: calling it runs ``forward``).

    Optional: ``cuda_graph_safe: bool``, True when no op of ``forward`` waits
    on the host (no ``.tolist()``/``.item()``, no data-dependent shapes) for a
    decode-only step; the engine then captures decode steps as CUDA graphs
    (engine/decode_graphs.py). Absent means False."""

    arch: ArchInfo
    ops: FusedOps
    """Fused elementwise ops backend (kernels/fused_ops.py); the engine sets it."""

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                 kv_caches: Sequence[torch.Tensor]) -> torch.Tensor: ...

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: Sequence[torch.Tensor]) -> torch.Tensor:
        """input_ids, positions: [T] long, every sequence of the step flattened
        (token order in kernels/attention.py); kv_caches: one tensor per layer,
        laid out as ``kv_cache_spec()`` says (model/kv_cache_spec.py). Writes the
        step's tokens into the caches at meta.slot_mapping and returns the final
        hidden states [T, hidden] in the model dtype."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] in the model dtype."""
        ...

    def exact_head(self) -> ExactHead:
        """The LM head as data for the sampler's bf16 tie rule (engine/exact_head.py)."""
        ...

    def kv_cache_spec(self) -> KVCacheSpec:
        """What one token costs in the KV cache per layer; sizes and shapes the cache."""
        ...

    def decoder_linears(self) -> list[tuple[object, str]]:
        """Every weight matrix of the decoder layers as (owning module, attribute
        name), so weight-only quantization and deterministic mode can swap them
        without knowing the architecture's names. The LM head (``lm_head``) is
        not in the list: those callers treat it on its own."""
        ...
