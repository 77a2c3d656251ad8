"""What one engine step computes, in the simulator's terms (the interface
between the cost model, cost.py, and the serving simulation, serving.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefillChunk:
    """One sequence's prompt chunk in a step."""

    num_tokens: int
    """Prompt tokens computed in this step (>= 1)."""
    context: int
    """Tokens of the sequence already in the KV cache before this chunk (prefix hits, earlier chunks)."""


class StepShape:
    """One step of continuous batching: decode rows plus prefill chunks. Immutable; equal and
    hashed by its contents, however the contexts were given.

    ``decode_contexts``: for each decoding sequence, its KV length before this step (it computes
    ``tokens_per_decode`` rows: 1, or 1 + drafts verified with speculative decoding); a tuple of
    ints, or a 1-D integer array that is never written afterwards. The serving simulation passes
    its array as it is: building a tuple of a step's thousands of contexts cost more than pricing
    the step, and the cost model reads only their count and sum (``num_decodes``,
    ``decode_context_sum``) or the array (``decode_context_array``).
    ``tokens_per_decode``: rows each decoding sequence computes (1 + speculative tokens verified).
    ``extra``: free-form annotations (not used by the cost model, not compared)."""

    __slots__ = ("_contexts", "_tuple", "prefills", "tokens_per_decode", "extra")

    def __init__(self, decode_contexts: tuple[int, ...] | np.ndarray = (), prefills: tuple[PrefillChunk, ...] = (),
                 tokens_per_decode: int = 1, extra: dict | None = None):
        array = isinstance(decode_contexts, np.ndarray)
        contexts = decode_contexts if array else tuple(decode_contexts)  # any iterable of ints
        set_ = object.__setattr__
        set_(self, "_contexts", contexts)
        set_(self, "_tuple", None if array else contexts)
        set_(self, "prefills", tuple(prefills))
        set_(self, "tokens_per_decode", tokens_per_decode)
        set_(self, "extra", {} if extra is None else extra)

    def __setattr__(self, name, value):
        raise AttributeError(f"StepShape is immutable: cannot set {name!r}")

    @property
    def decode_contexts(self) -> tuple[int, ...]:
        if self._tuple is None:  # given as an array: built once, on first use
            object.__setattr__(self, "_tuple", tuple(self._contexts.tolist()))
        return self._tuple

    def decode_context_array(self) -> np.ndarray:
        """The contexts as a 1-D int64 array (not to be written)."""
        c = self._contexts
        return c if isinstance(c, np.ndarray) and c.dtype == np.int64 else np.asarray(self.decode_contexts, np.int64)

    @property
    def decode_context_sum(self) -> int:
        c = self._contexts
        return int(c.sum()) if isinstance(c, np.ndarray) else sum(self._tuple)

    @property
    def num_decodes(self) -> int:
        return len(self._contexts)

    @property
    def num_tokens(self) -> int:
        """Rows of the forward pass."""
        return self.num_decodes * self.tokens_per_decode + sum(p.num_tokens for p in self.prefills)

    def _key(self) -> tuple:
        return self.decode_contexts, self.prefills, self.tokens_per_decode

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, StepShape) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):  # pickled through the constructor (attribute setting is refused)
        return StepShape, (self._contexts, self.prefills, self.tokens_per_decode, self.extra)

    def __repr__(self) -> str:
        return (f"StepShape(decode_contexts={self.decode_contexts!r}, prefills={self.prefills!r}, "
                f"tokens_per_decode={self.tokens_per_decode!r})")
