"""What one engine step computes, in the simulator's terms (the interface
between the cost model, cost.py, and the serving simulation, serving.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrefillChunk:
    """One sequence's prompt chunk in a step."""

    num_tokens: int
    """Prompt tokens computed in this step (>= 1)."""
    context: int
    """Tokens of the sequence already in the KV cache before this chunk (prefix hits, earlier chunks)."""


@dataclass(frozen=True)
class StepShape:
    """One step of continuous batching: decode rows plus prefill chunks."""

    decode_contexts: tuple[int, ...] = ()
    """For each decoding sequence, its KV length before this step (it computes
    ``tokens_per_decode`` rows: 1, or 1 + drafts verified with speculative decoding)."""
    prefills: tuple[PrefillChunk, ...] = ()
    tokens_per_decode: int = 1
    """Rows each decoding sequence computes (1 + speculative tokens verified)."""
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    """Free-form annotations (not used by the cost model)."""

    @property
    def num_decodes(self) -> int:
        return len(self.decode_contexts)

    @property
    def num_tokens(self) -> int:
        """Rows of the forward pass."""
        return self.num_decodes * self.tokens_per_decode + sum(p.num_tokens for p in self.prefills)
