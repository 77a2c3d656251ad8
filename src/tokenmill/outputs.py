"""What the engine hands back for each request after each step.

These are plain dataclasses so they can cross a process boundary later
(msgspec/JSON), never pickled objects with behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
    """The top-N alternatives as (token_id, logprob), most likely first."""


@dataclass
class RequestOutput:
    """One request's progress after an engine step (a delta, not a snapshot)."""

    request_id: str
    new_token_ids: list[int]
    """Tokens produced in this step (usually one)."""
    new_text: str
    """Text made final in this step; never ends inside a UTF-8 sequence."""
    finished: bool
    finish_reason: str | None = None
    """'stop' (EOS, stop token or stop string), 'length', 'abort' or 'error'."""
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    """Total generated so far (including this step)."""
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""
    logprobs: list[TokenLogprob] | None = None
    """One entry per new token when the request asked for logprobs."""
    stop_reason: str | int | None = None
    """The stop string or token id that ended the request, if any."""
    error: str | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
    """params.prompt_logprobs: one entry per prompt token, None for the first
    (nothing precedes it); only on the request's first output."""


def merge_outputs(outputs: list[RequestOutput]) -> RequestOutput:
    """Consecutive deltas of one request as one delta: tokens, text and
    logprobs concatenated, prompt logprobs kept (only a first output has
    them), everything else (counts, finish) from the last."""
    last = outputs[-1]
    logprobs = None
    if any(o.logprobs is not None for o in outputs):
        logprobs = [lp for o in outputs for lp in (o.logprobs or [])]
    prompt = next((o.prompt_logprobs for o in outputs if o.prompt_logprobs is not None), None)
    return replace(last, new_token_ids=[t for o in outputs for t in o.new_token_ids],
                   new_text="".join(o.new_text for o in outputs), logprobs=logprobs, prompt_logprobs=prompt)
