"""The caller's side of the engine-core boundary, on the way in: prompt (text or
token ids) + SamplingParams -> a validated ``EngineCoreRequest``.

Runs where the request arrives (the server's event loop, a frontend), never on
the core's thread: a bad prompt is refused before it is queued, with a
``RequestError`` naming the field. The core checks the same limits again
(``check_prompt``) because a remote caller may skip this step.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tokenmill.engine.core_messages import EngineCoreRequest, ResumeState
from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams


def check_prompt(token_ids: Sequence[int], max_model_len: int, vocab_size: int, field: str = "prompt") -> None:
    """Non-empty, shorter than the context (room for one output token), every id
    inside the vocabulary; RequestError naming ``field`` otherwise."""
    if not token_ids:
        raise RequestError(field, "the prompt is empty")
    if len(token_ids) >= max_model_len:
        raise RequestError(field, f"the prompt has {len(token_ids)} tokens; this model's maximum "
                           f"context length is {max_model_len} tokens (prompt + at least 1 output)")
    bad = next((t for t in token_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size),
               None)
    if bad is not None:
        raise RequestError(field, f"token id {bad!r} is outside the vocabulary [0, {vocab_size})")


class InputProcessor:
    def __init__(self, tokenizer, max_model_len: int, vocab_size: int):
        """tokenizer: the model's (model/tokenizer.py), or None for dummy weights
        (then prompts must be token ids and the core's EOS ids apply)."""
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(tokenizer.eos_token_ids) if tokenizer is not None else None

    def process(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None,
                resume_output_ids: list[int] | None = None) -> EngineCoreRequest:
        """Validate and tokenize (thread-safe: touches no engine state).
        resume_output_ids: tokens this request already generated elsewhere
        (core_messages.ResumeState)."""
        if not isinstance(params, SamplingParams):
            raise TypeError("params must be a SamplingParams")
        token_ids = self._tokenize(prompt)
        check_prompt(token_ids, self.max_model_len, self.vocab_size)
        resume = None
        if resume_output_ids is not None:
            resume = ResumeState(list(resume_output_ids))
            check_resume(token_ids, resume, params, self.max_model_len, self.vocab_size)
        return EngineCoreRequest(request_id or uuid.uuid4().hex, token_ids, params, self.eos_token_ids, resume)

    def _tokenize(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("prompt", "this model has no tokenizer (dummy weights): pass token ids")
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise RequestError("prompt", "must be a string or a list of token ids")


def check_resume(prompt_ids: Sequence[int], resume: ResumeState, params: SamplingParams,
                 max_model_len: int, vocab_size: int) -> None:
    """A resumed request must still have a token to generate."""
    out = resume.output_token_ids
    if out:
        check_prompt(list(prompt_ids) + list(out), max_model_len, vocab_size, "resume.output_token_ids")
    if len(out) >= params.max_tokens:
        raise RequestError("resume.output_token_ids", f"{len(out)} tokens already generated; "
                           f"max_tokens={params.max_tokens} leaves nothing to resume")
