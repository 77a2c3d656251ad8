"""``--speculative-config``: vLLM's JSON flag, parsed and checked.

    --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'

    --speculative-config '{"method": "self-int4", "num_speculative_tokens": 4}'

    --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'

    --speculative-config '{"method": "draft_model", "model": "DRAFT.gguf", "num_speculative_tokens": 3}'

Methods: ``ngram`` (prompt lookup over the request's own tokens, spec/ngram.py),
``self-int4`` (the served model's own weights in int4 draft, the
full-precision model verifies: spec/model_drafter.py), ``mtp`` (DeepSeek's
next-token-prediction layer drafts: spec/mtp.py) and ``draft_model`` (a
smaller model sharing the tokenizer, with its own KV cache: spec/draft_model.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

METHODS = ("ngram", "self-int4", "mtp", "draft_model")
DRAFT_QUANTIZATIONS = ("int8", "int4")
ACCEPTANCE_METHODS = ("rejection_sampler", "exact_match")
MAX_SPECULATIVE_TOKENS = 16
DRAFT_HEAD_VOCAB = 16384
"""self-int4's default ``draft_head_vocab``: a third of the embedded model's head
(docs/PERFORMANCE.md, "self-int4 at 1.75-2.1x": the A/B of the range)."""


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    """Drafts proposed per request per step (k): each step verifies up to k + 1 tokens."""
    prompt_lookup_max: int = 4
    """ngram: the longest suffix of the request's tokens looked up earlier in them."""
    prompt_lookup_min: int = 1
    """ngram: the shortest suffix tried before giving up for this step."""
    adaptive: bool = True
    """Pick the drafts of each step from measured step times and acceptance
    (spec/adaptive.py): fewer or none where they would not pay. False: always
    up to ``num_speculative_tokens``."""
    disable_by_batch_size: int | None = None
    """No drafts in a step while more requests than this are running (vLLM's field)."""
    model: str | None = None
    """draft_model: the draft's GGUF file or HF directory (or ``dummy:<preset>``)."""
    quantization: str | None = None
    """draft_model: the draft's weights in int8 or int4 (kernels/quantize.py); None: as loaded."""
    draft_head_vocab: int | None = DRAFT_HEAD_VOCAB
    """self-int4: greedy drafts score only the first this-many token ids on an int4
    copy of the LM head, plus the request's own rarer tokens, and rescore the best on
    the target's head (spec/shortlist_head.py); null: the whole vocabulary. Outputs
    never change; a smaller range reads fewer bytes per draft and misses more."""
    acceptance_method: str = "rejection_sampler"
    """Sampled requests (temperature > 0) of model drafters (self-int4,
    draft_model, mtp): ``rejection_sampler`` draws each draft from the draft
    model's distribution and keeps it with probability min(1, p/q)
    (engine/rejection.py); ``exact_match`` drafts the argmax and keeps it only
    where the target's own draw equals it, so seeded outputs are
    token-identical to decoding without drafts (spec/draft_sampling.py). Both
    leave the output distribution the target's. Greedy requests and ngram
    drafts are always checked by exact match."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"speculative_config.method: {self.method!r} is not available; choose from {METHODS}")
        if not isinstance(self.num_speculative_tokens, int) or \
                not 1 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"speculative_config.num_speculative_tokens: must be an integer in "
                             f"[1, {MAX_SPECULATIVE_TOKENS}], got {self.num_speculative_tokens!r}")
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"speculative_config.{name}: must be a positive integer, got {value!r}")
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"speculative_config.adaptive: must be true or false, got {self.adaptive!r}")
        if self.disable_by_batch_size is not None and (
                not isinstance(self.disable_by_batch_size, int) or self.disable_by_batch_size < 1):
            raise ValueError(f"speculative_config.disable_by_batch_size: must be a positive integer, "
                             f"got {self.disable_by_batch_size!r}")
        if self.method == "draft_model" and not (isinstance(self.model, str) and self.model):
            raise ValueError("speculative_config.model: required with method draft_model (the draft's path)")
        if self.draft_head_vocab is not None and (
                isinstance(self.draft_head_vocab, bool) or not isinstance(self.draft_head_vocab, int)
                or self.draft_head_vocab < 1):
            raise ValueError(f"speculative_config.draft_head_vocab: must be a positive integer or null, "
                             f"got {self.draft_head_vocab!r}")
        for name in ("model", "quantization"):
            if self.method != "draft_model" and getattr(self, name) is not None:
                raise ValueError(f"speculative_config.{name}: only for method draft_model, not {self.method!r}")
        if self.quantization is not None and self.quantization not in DRAFT_QUANTIZATIONS:
            raise ValueError(f"speculative_config.quantization: must be one of {DRAFT_QUANTIZATIONS}, "
                             f"got {self.quantization!r}")
        if self.acceptance_method not in ACCEPTANCE_METHODS:
            raise ValueError(f"speculative_config.acceptance_method: must be one of {ACCEPTANCE_METHODS}, "
                             f"got {self.acceptance_method!r}")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(f"speculative_config.prompt_lookup_min: {self.prompt_lookup_min} exceeds "
                             f"prompt_lookup_max {self.prompt_lookup_max}")


def parse_speculative_config(value: str | dict | None) -> SpeculativeConfig | None:
    """A JSON object (text or dict) -> SpeculativeConfig; None -> None. ValueError names the field."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"speculative_config: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"speculative_config: must be a JSON object, got {type(value).__name__}")
    known = {f.name for f in fields(SpeculativeConfig)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"speculative_config: unknown field(s) {unknown}; known: {sorted(known)}")
    for name in ("method", "num_speculative_tokens"):
        if name not in value:
            raise ValueError(f"speculative_config.{name}: required")
    return SpeculativeConfig(**value)
