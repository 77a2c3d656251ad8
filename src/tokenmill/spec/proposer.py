"""The interface every draft proposer implements, and the factory the engine calls.

A proposer sees the requests that are about to decode (their prompt computed,
one token pending) and returns up to k draft tokens for each. The engine puts
them in ``request.draft_token_ids``; the next step feeds each request's last
token and its drafts as query rows of the same batched forward and keeps the
drafts the model confirms (engine/verify.py), so outputs are the same as
without drafts: only the number of steps changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tokenmill.spec.config import SpeculativeConfig

if TYPE_CHECKING:
    from tokenmill.engine.request import Request


class Proposer(Protocol):
    def propose(self, requests: list[Request], k: int) -> list[list[int]]:
        """Up to k drafts for each request, in order ([] for none)."""
        ...


def make_proposer(config: SpeculativeConfig) -> Proposer:
    if config.method == "ngram":
        from tokenmill.spec.ngram import NgramProposer

        return NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    raise ValueError(f"speculative_config.method: {config.method!r} has no proposer")
