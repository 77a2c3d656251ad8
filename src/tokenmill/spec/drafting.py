"""The engine's side of speculative decoding: ask the proposer for drafts
before a step, count what the step's verification kept.

Drafts go only to requests about to decode (prompt computed, one token
pending), and never past what the request may still produce: a request with r
tokens left to its ``max_tokens`` gets at most r - 1 drafts (the step adds the
model's own token after them). With ``adaptive`` (the default) a DraftPolicy
(spec/adaptive.py) trims them to what pays by measurement: before proposing
for drafters whose every position costs a pass, after for free ones. None go
out while more than ``disable_by_batch_size`` requests run. Counters
(EngineStats, /metrics): drafts verified, drafts accepted, accepted per draft
position, verifications; each request's own drafts verified and accepted,
logged at debug level when it ends.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from tokenmill.spec.adaptive import DraftPolicy
from tokenmill.spec.config import SpeculativeConfig
from tokenmill.spec.proposer import Proposer

if TYPE_CHECKING:
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ForwardResult
    from tokenmill.engine.scheduler import SchedulerOutput

log = logging.getLogger(__name__)


class Drafting:
    def __init__(self, config: SpeculativeConfig, proposer: Proposer):
        self.config = config
        self.proposer = proposer
        self.policy = DraftPolicy(proposer.drafts_cost_passes) if config.adaptive else None
        self.num_draft_tokens = 0
        """Drafts verified (fed to a forward pass), cumulative."""
        self.num_accepted_tokens = 0
        self.num_verifications = 0
        """(request, step) pairs that verified at least one draft."""
        self.propose_seconds = 0.0
        """Host time of the last ``propose`` (the policy counts it in the step's time)."""
        self.accepted_per_position: Counter[int] = Counter()
        """Draft position (0 = the first draft) -> times it was accepted."""

    def propose(self, running: list[Request]) -> None:
        """Set ``draft_token_ids`` of every running request that is about to decode."""
        start = time.perf_counter()
        try:
            self._propose(running)
        finally:
            self.propose_seconds = time.perf_counter() - start

    def _propose(self, running: list[Request]) -> None:
        ready = [r for r in running if r.num_computed_tokens == r.num_tokens - 1]
        limit = self.config.disable_by_batch_size
        if not ready or (limit is not None and len(running) > limit):
            return
        k = self.config.num_speculative_tokens
        if self.policy is not None and not self.policy.may_pay(len(ready), k):
            return
        caps = [max(min(k, r.params.max_tokens - r.num_output_tokens - 1, r.max_model_len - r.num_tokens - 1), 0)
                for r in ready]
        cost_passes = self.proposer.drafts_cost_passes
        if self.policy is not None and cost_passes:
            caps = self.policy.choose(ready, caps)
            if not any(caps):
                return
        start = time.perf_counter()
        proposals = self.proposer.propose(ready, caps)
        if self.policy is not None and cost_passes:
            # Less what the proposer spent catching up (draft_model's first sight of a prompt):
            # a one-off per request, which would make every later pass look dear.
            seconds = time.perf_counter() - start - getattr(self.proposer, "catch_up_seconds", 0.0)
            self.policy.record_pass(sum(c > 0 for c in caps), seconds / max(caps))
        if self.policy is not None and not cost_passes:
            caps = self.policy.choose(ready, [len(p) for p in proposals])
        probs = getattr(self.proposer, "last_probs", None) or [[]] * len(ready)
        for req, drafts, q, cap in zip(ready, proposals, probs, caps):
            req.draft_token_ids = list(drafts[:cap])
            req.draft_probs = list(q[:cap]) if any(x is not None for x in q[:cap]) else []

    def after_step(self, out: SchedulerOutput, forward: ForwardResult | None, live: dict[str, Request]) -> None:
        """Hand the finished step to proposers that draft from it (spec/mtp.py)."""
        hook = getattr(self.proposer, "after_step", None)
        if hook is not None:
            hook(out, forward, live)

    def record_step(self, out: SchedulerOutput, seconds: float) -> None:
        """A step and its seconds, for the policy: decode steps only (every row
        sampled: decodes and their drafts), whose time per row drafts add to."""
        if self.policy is not None and all(s.num_sample_rows == s.num_new_tokens for s in out.scheduled):
            # A proposer without draft passes (prompt lookup) costs host time of its
            # own, which the step pays: on a GPU it was as much as the forward
            # (docs/PERFORMANCE.md). Model drafters' passes are timed apart (record_pass).
            extra = 0.0 if self.proposer.drafts_cost_passes else self.propose_seconds
            self.policy.record_step(out.num_tokens, seconds + extra)

    @staticmethod
    def log_finished(req: Request) -> None:
        if req.num_drafts_verified and log.isEnabledFor(logging.DEBUG):
            log.debug("request %s: %d drafts verified, %d accepted (%.0f%%)", req.request_id,
                      req.num_drafts_verified, req.num_drafts_accepted,
                      100 * req.num_drafts_accepted / req.num_drafts_verified)

    def record(self, req: Request, num_drafts: int, num_tokens: int) -> None:
        """One request's verification: ``num_drafts`` drafts fed, ``num_tokens`` appended
        (its accepted drafts and one token of the model's own)."""
        if not num_drafts:
            return
        accepted = max(num_tokens - 1, 0)
        req.num_drafts_verified += num_drafts
        req.num_drafts_accepted += accepted
        req.num_draft_rejections += accepted < num_drafts
        if self.policy is not None:
            self.policy.record_verification(num_drafts, accepted)
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += accepted
        self.num_verifications += 1
        for position in range(accepted):
            self.accepted_per_position[position] += 1
