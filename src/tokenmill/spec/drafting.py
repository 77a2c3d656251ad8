"""The engine's side of speculative decoding: ask the proposer for drafts
before a step, count what the step's verification kept.

Drafts go only to requests about to decode (prompt computed, one token
pending), and never past what the request may still produce: a request with r
tokens left to its ``max_tokens`` gets at most r - 1 drafts (the step adds the
model's own token after them). Counters (EngineStats, /metrics): drafts
verified, drafts accepted, accepted per draft position, verifications; each
request's own drafts verified and accepted, logged at debug level when it ends.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from tokenmill.spec.config import SpeculativeConfig
from tokenmill.spec.proposer import make_proposer

if TYPE_CHECKING:
    from tokenmill.engine.request import Request

log = logging.getLogger(__name__)


class Drafting:
    def __init__(self, config: SpeculativeConfig):
        self.config = config
        self.proposer = make_proposer(config)
        self.num_draft_tokens = 0
        """Drafts verified (fed to a forward pass), cumulative."""
        self.num_accepted_tokens = 0
        self.num_verifications = 0
        """(request, step) pairs that verified at least one draft."""
        self.accepted_per_position: Counter[int] = Counter()
        """Draft position (0 = the first draft) -> times it was accepted."""

    def propose(self, running: list[Request]) -> None:
        """Set ``draft_token_ids`` of every running request that is about to decode."""
        ready = [r for r in running if r.num_computed_tokens == r.num_tokens - 1]
        if not ready:
            return
        k = self.config.num_speculative_tokens
        for req, drafts in zip(ready, self.proposer.propose(ready, k)):
            room = req.params.max_tokens - req.num_output_tokens - 1
            req.draft_token_ids = list(drafts[:max(min(room, k), 0)])

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
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += accepted
        self.num_verifications += 1
        for position in range(accepted):
            self.accepted_per_position[position] += 1
