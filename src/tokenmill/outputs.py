"""What the engine hands back for each request after each step.

These are plain dataclasses so they can cross a process boundary later
(msgspec/JSON), never pickled objects with behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
