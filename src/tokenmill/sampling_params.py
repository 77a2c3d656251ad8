"""Per-request sampling parameters.

Validation happens here, once, at the edge: every bad value raises a
``ValueError`` whose message starts with the field name, so the server can map
it onto an OpenAI error body with ``param`` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from tokenmill.errors import RequestError

SamplingParamError = RequestError  # a bad sampling parameter; ``param`` names the field


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    """Upper bound on generated tokens (>= 1)."""
    temperature: float = 1.0
    """0 means greedy; otherwise logits are divided by it before sampling."""
    top_k: int = -1
    """Keep the k most likely tokens; -1 (or 0) disables."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p x the top probability."""
    repetition_penalty: float = 1.0
    """HF-style multiplicative penalty on tokens seen in prompt or output (> 0)."""
    frequency_penalty: float = 0.0
    """OpenAI-style: subtract count x penalty for each generated token, in [-2, 2]."""
    presence_penalty: float = 0.0
    """OpenAI-style: subtract penalty once for each generated token, in [-2, 2]."""
    seed: int | None = None
    """Per-request RNG seed; the same seed gives the same tokens whatever the batch."""
    stop: tuple[str, ...] = ()
    """Stop strings; generation ends before the first occurrence (not included)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end generation (the token is not shown as text)."""
    ignore_eos: bool = False
    """Keep generating past the model's end-of-sequence token."""
    logprobs: int | None = None
    """Return the sampled token's logprob and this many top alternatives (0-20)."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the detokenized text."""
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    """Free-form per-request annotations (not used by sampling)."""

    def __post_init__(self) -> None:
        # Normalise list-typed inputs to tuples so the object stays hashable.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        self._validate()

    def _validate(self) -> None:
        def bad(param: str, message: str) -> None:
            raise SamplingParamError(param, message)

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            bad("max_tokens", f"must be an integer, got {self.max_tokens!r}")
        if self.max_tokens < 1:
            bad("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if not 0.0 <= self.temperature <= 100.0:
            bad("temperature", f"must be in [0, 100], got {self.temperature}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            bad("top_k", f"must be -1 (disabled) or a positive integer, got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0.0:
            bad("repetition_penalty", f"must be > 0, got {self.repetition_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            bad("frequency_penalty", f"must be in [-2, 2], got {self.frequency_penalty}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            bad("presence_penalty", f"must be in [-2, 2], got {self.presence_penalty}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not -(1 << 63) <= self.seed < (1 << 64)):
            bad("seed", f"must be an integer in [-2^63, 2^64), got {self.seed!r}")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) for s in self.stop):
            bad("stop", f"must be a string or a list of strings, got {self.stop!r}")
        if any(s == "" for s in self.stop):
            bad("stop", "stop strings must not be empty")
        if not isinstance(self.stop_token_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            bad("stop_token_ids", f"must be a list of non-negative integers, got {self.stop_token_ids!r}")
        if self.logprobs is not None and (
            isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20
        ):
            bad("logprobs", f"must be an integer in [0, 20], got {self.logprobs!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )
