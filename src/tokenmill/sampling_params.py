"""Per-request sampling parameters.

Validation happens here, once, at the edge: every bad value raises a
``ValueError`` whose message starts with the field name, so the server can map
it onto an OpenAI error body with ``param`` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenmill.errors import RequestError
from tokenmill.structured.params import StructuredOutputsParams

SamplingParamError = RequestError  # a bad sampling parameter; ``param`` names the field

GREEDY_TEMPERATURE = 1e-5
"""Temperatures below this sample greedily (vLLM's rule): dividing float32 logits
by a smaller one overflows or underflows to inf/NaN, and the distribution is a
point mass on the argmax long before that anyway."""
REPETITION_PENALTY_RANGE = (0.01, 100.0)
"""Bounds of ``repetition_penalty``: logits divided or multiplied by a factor in
this range stay finite in float32 (|logit| << 3e36)."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    """Upper bound on generated tokens (>= 1; 0 only with ``prompt_logprobs``:
    score the prompt, generate nothing, finish with 'length')."""
    temperature: float = 1.0
    """In [0, 100]. Below 1e-5 (GREEDY_TEMPERATURE), 0 included, means greedy;
    otherwise logits are divided by it before sampling."""
    top_k: int = -1
    """Keep the k most likely tokens; -1 or 0 disables (vLLM's convention), 1 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    min_p: float = 0.0
    """In [0, 1]: drop tokens whose probability is below min_p x the top
    probability (1 keeps only the most likely tokens)."""
    repetition_penalty: float = 1.0
    """HF-style multiplicative penalty on tokens seen in prompt or output, in
    [0.01, 100] (REPETITION_PENALTY_RANGE); 1 disables."""
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
    prompt_logprobs: int | None = None
    """Return the logprob of each prompt token given the ones before it (none
    for the first), plus this many top alternatives (0-20). The request then
    takes no prefix-cache hits (cached positions have no logits)."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the detokenized text."""
    structured: StructuredOutputsParams | None = None
    """Constrain the output to a JSON schema, a regex, a choice or a grammar
    (engine/structured_outputs.py); logprobs are then over the allowed tokens."""
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

        def check_int(param: str, value) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                bad(param, f"must be an integer, got {value!r}")

        def check_range(param: str, value, low: float, high: float, low_open: bool = False) -> None:
            # Written as "not inside" so NaN (which compares False) is refused too.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                bad(param, f"must be a number, got {value!r}")
            inside = (low < value if low_open else low <= value) and value <= high
            if not inside:
                bad(param, f"must be in {'(' if low_open else '['}{low:g}, {high:g}], got {value}")

        check_int("max_tokens", self.max_tokens)
        if self.max_tokens < 1 and not (self.max_tokens == 0 and self.prompt_logprobs is not None):
            bad("max_tokens", f"must be at least 1 (0 only with prompt_logprobs), got {self.max_tokens}")
        check_range("temperature", self.temperature, 0.0, 100.0)
        check_int("top_k", self.top_k)
        if self.top_k < -1:
            bad("top_k", f"must be -1 or 0 (disabled) or a positive integer, got {self.top_k}")
        check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_range("min_p", self.min_p, 0.0, 1.0)
        check_range("repetition_penalty", self.repetition_penalty, *REPETITION_PENALTY_RANGE)
        check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        if self.seed is not None:
            check_int("seed", self.seed)
            if not -(1 << 63) <= self.seed < (1 << 64):
                bad("seed", f"must be an integer in [-2^63, 2^64), got {self.seed!r}")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) for s in self.stop):
            bad("stop", f"must be a string or a list of strings, got {self.stop!r}")
        if any(s == "" for s in self.stop):
            bad("stop", "stop strings must not be empty")
        if not isinstance(self.stop_token_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            bad("stop_token_ids", f"must be a list of non-negative integers, got {self.stop_token_ids!r}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20):
                bad(name, f"must be an integer in [0, 20], got {value!r}")
        if self.structured is not None and not isinstance(self.structured, StructuredOutputsParams):
            bad("structured", f"must be a StructuredOutputsParams, got {type(self.structured).__name__}")

    @property
    def greedy(self) -> bool:
        """Argmax decoding: a temperature too small to divide by, or top_k=1."""
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )
