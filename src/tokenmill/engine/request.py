"""A request inside the engine: tokens so far and how many have KV computed.

The scheduler's model (vLLM v1): each request is ``num_computed_tokens``
catching up to ``num_tokens``. Prefill, chunked prefill, prefix-cache hits,
decode and recompute after preemption are all the same rule. A resumed
request (core_messages.ResumeState) starts with its earlier output already in
``token_ids`` and simply has more tokens to catch up on.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"
    FINISHED_TRANSFER = "transfer"
    """A prefill-only request that sampled its first token: its prompt's blocks
    are held for a decode engine to take (KVCacheManager.hold); the request
    itself goes on there. Never reaches a client."""

    @property
    def finished(self) -> bool:
        return self.name.startswith("FINISHED")


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_ids: frozenset[int] = frozenset()
    max_model_len: int = 1 << 30
    resumed_output_ids: list[int] = field(default_factory=list)
    """Output generated before a resume (counted as output: max_tokens, penalties, seeded positions)."""
    arrival_time: float = field(default_factory=time.monotonic)
    prefill_only: bool = False
    """Disaggregated prefill: end after the first token (status FINISHED_TRANSFER)
    unless a stop ends it first."""

    token_ids: list[int] = field(init=False)
    """Prompt followed by output; appended to in place (never rebuilt per step)."""
    num_computed_tokens: int = field(default=0, init=False)
    """Tokens whose K/V sit in this request's blocks."""
    num_cached_tokens: int = field(default=-1, init=False)
    """Prompt tokens served from the prefix cache at first admission (-1: not yet admitted)."""
    draft_token_ids: list[int] = field(default_factory=list, init=False)
    """Proposed next tokens (speculative decoding), not yet accepted: the
    scheduler feeds them after ``token_ids`` so one step verifies them all;
    ``Scheduler.update`` clears them."""
    draft_probs: list = field(default_factory=list, init=False)
    """Per draft in ``draft_token_ids`` (or empty: none): the distribution
    ([V] float32 tensor) a draft model drew it from, or None for a draft
    checked by exact match (spec/draft_sampling.py, engine/rejection.py)."""
    num_drafts_verified: int = field(default=0, init=False)
    num_drafts_accepted: int = field(default=0, init=False)
    """Speculative decoding, this request's share (logged at debug level when it ends)."""
    num_draft_rejections: int = field(default=0, init=False)
    """Verifications that kept fewer drafts than they verified (spec/adaptive.py's acceptance estimate)."""
    num_preemptions: int = field(default=0, init=False)
    num_prompt_logprobs: int = field(default=0, init=False)
    """params.prompt_logprobs: prompt positions whose distribution was computed
    (position p gives prompt token p + 1's logprob), in order; it survives
    preemption, so a recomputed prompt reports no position twice."""
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list, init=False)
    """The entries of those positions not yet sent (they go with the request's
    next output, its first: sampling needs the whole prompt computed)."""
    status: RequestStatus = field(default=RequestStatus.WAITING, init=False)
    stop_reason: str | int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_token_ids) + list(self.resumed_output_ids)
        if self.resumed_output_ids:  # its prompt logprobs went out with its earlier output
            self.num_prompt_logprobs = max(len(self.prompt_token_ids) - 1, 0)

    def prompt_logprob_positions(self, start: int, num_new_tokens: int) -> range:
        """Of the positions start .. start + num_new_tokens - 1 computed in a
        step, those whose logits give a prompt token's logprob not yet reported
        (the last prompt position predicts the first output token: not one of
        them). Empty unless params.prompt_logprobs is set."""
        if self.params.prompt_logprobs is None:
            return range(0)
        return range(max(start, self.num_prompt_logprobs), min(start + num_new_tokens, self.num_prompt_tokens - 1))

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_token_ids):]

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def check_stop(self) -> RequestStatus | None:
        """After appending a token: EOS, stop token ids, max_tokens, max_model_len."""
        last = self.token_ids[-1]
        p = self.params
        if not p.ignore_eos and last in self.eos_token_ids:
            self.stop_reason = last
            return RequestStatus.FINISHED_STOPPED
        if last in p.stop_token_ids:
            self.stop_reason = last
            return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= p.max_tokens or self.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        if self.prefill_only:
            return RequestStatus.FINISHED_TRANSFER
        return None
