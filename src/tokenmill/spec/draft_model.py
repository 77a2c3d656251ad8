"""``draft_model``: a smaller model with the same vocabulary drafts, the served
model verifies.

The draft has a paged KV cache of its own (one tensor per draft layer, its own
heads and head size) addressed through the target's block tables: slot s of
the draft cache belongs to the token in slot s of the target's. So it needs
no block allocator; the engine counts its bytes per token with the target's
when it sizes the cache (spec/proposer.py ``extra_kv_bytes_per_token``).

Catching up. Per request, ``valid`` counts the leading positions whose draft
K/V are those of the request's actual tokens. A proposal feeds the tokens
from ``valid`` through the pending one (a prompt the first time, afterwards
the tokens the last verification accepted), whose last row gives the first
draft, then one row per further draft. The pass that gives the first draft
takes at most the last two of those tokens per request (usually the last
accepted draft, which the draft never fed, and the pending token); any
before them go first, through catch-up passes of at most ``CATCH_UP_ROWS``
rows over all requests, so a long prompt never makes one huge pass. The drafts it fed
(``written``) sit in the cache after the pending token; the next proposal
keeps those the target accepted (they equal its tokens there) and feeds the
rest again. A preempted request restarts from 0 (its blocks may be new); so
does a new one, even when its prompt hit the prefix cache (those blocks'
draft rows may never have been written). That keeps drafts right; outputs
are right whatever the drafts (engine/verify.py).

Each draft is picked by spec/draft_sampling.py: the argmax, or for sampled
requests a draw from the draft's distribution (rejection sampling).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from tokenmill.model.kv_cache_spec import allocate_kv_caches
from tokenmill.model.loaders import load_model
from tokenmill.spec.config import SpeculativeConfig
from tokenmill.spec.draft_sampling import DraftSampler

CATCH_UP_ROWS = 2048
"""Rows per catch-up pass of the draft, over all its requests (bounds its activations)."""

if TYPE_CHECKING:
    from tokenmill.engine.kv_cache_manager import KVCacheManager
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ForwardResult, ModelRunner
    from tokenmill.engine.scheduler import SchedulerOutput
    from tokenmill.model.protocol import ArchInfo, CausalLM


def load_draft_model(config: SpeculativeConfig, target_arch: ArchInfo, target_tokenizer: str | None,
                     device: torch.device, dtype: torch.dtype, seed: int) -> CausalLM:
    """Load ``speculative_config.model`` and check that it can draft for the
    target: every token id it can emit is one of the target's, and where both
    have a tokenizer, the two vocabularies are the same (ValueError otherwise)."""
    loaded = load_model(config.model, "auto", device, dtype, seed=seed)
    if loaded.arch.vocab_size > target_arch.vocab_size:
        raise ValueError(f"speculative_config.model: its vocabulary ({loaded.arch.vocab_size} tokens) is larger "
                         f"than the served model's ({target_arch.vocab_size}); the draft must share its tokenizer")
    if target_tokenizer is not None and loaded.tokenizer_source is not None:
        from tokenmill.model.tokenizer import load_tokenizer

        if not load_tokenizer(target_tokenizer).same_vocabulary(load_tokenizer(loaded.tokenizer_source)):
            raise ValueError(f"speculative_config.model: {config.model} does not share the served model's "
                             f"tokenizer (their vocabularies differ)")
    return loaded.model


@dataclass
class _DraftCache:
    """What the draft cache holds for one request (see the module docstring)."""

    valid: int = 0
    """Positions 0 .. valid - 1 hold the K/V of the request's own tokens."""
    written: list[int] = field(default_factory=list)
    """Drafts whose K/V the last proposal wrote at positions valid, valid + 1, ..."""
    preemptions: int = 0
    """The request's preemption count when this was last right."""


class DraftModelDrafter:
    """Drafts from a separate model over its own cache, caught up per request."""

    drafts_cost_passes = True
    """Each draft position costs a forward pass of the draft model (spec/adaptive.py)."""

    def __init__(self, draft: CausalLM, runner: ModelRunner, kv: KVCacheManager, sampler: DraftSampler):
        self.draft = draft
        self.runner = runner
        self.kv = kv
        self.sampler = sampler
        self.last_probs: list[list[torch.Tensor | None]] = []
        """Per request of the last propose(), per draft: the distribution it was drawn from, or None (an argmax)."""
        target_cache = runner.kv_caches[0]
        self.caches = allocate_kv_caches(draft.kv_cache_spec(), target_cache.shape[0], runner.block_size,
                                         target_cache.device, target_cache.dtype)
        """One tensor per draft layer, slots as in the target's block tables."""
        self.max_positions = draft.arch.max_position_embeddings
        self.states: dict[str, _DraftCache] = {}
        self.catch_up_seconds = 0.0
        """Seconds the last propose() spent catching up (not drafting): the
        adaptive policy times draft passes without them (spec/drafting.py)."""

    @torch.inference_mode()
    def propose(self, requests: list[Request], limits: list[int]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor | None]] = [[] for _ in requests]
        self.last_probs = probs
        self.catch_up_seconds = 0.0
        # Blocks for the pending token and `limit` drafts after it, or no drafts.
        active = [i for i, (req, limit) in enumerate(zip(requests, limits))
                  if limit > 0 and req.num_tokens + limit <= self.max_positions and self.kv.allocate(req, 1 + limit)]
        if not active:
            return drafts
        starts = {i: self._caught_up(requests[i]) for i in active}
        begin = time.perf_counter()
        self._catch_up(requests, starts)
        self.catch_up_seconds = time.perf_counter() - begin
        # First pass: each request's last stale position (if any) and its pending token.
        active.sort(key=lambda i: requests[i].num_tokens - starts[i] != 1)  # one-row runs first (attention_inputs)
        runs = [(starts[i], requests[i].num_tokens - starts[i]) for i in active]
        ids = [t for i in active for t in requests[i].token_ids[starts[i]:]]
        hidden = self._forward(ids, runs, [requests[i] for i in active])
        last_rows = torch.tensor(runs, dtype=torch.long)[:, 1].cumsum(0) - 1
        self.sampler.extend(self.draft.compute_logits(hidden[last_rows]), self.draft.arch.vocab_size, requests, active,
                            drafts, probs)
        for step in range(1, max(limits[i] for i in active)):
            rows = [i for i in active if limits[i] > step]
            reqs = [requests[i] for i in rows]
            hidden = self._forward([drafts[i][-1] for i in rows], [(r.num_tokens - 1 + step, 1) for r in reqs], reqs)
            self.sampler.extend(self.draft.compute_logits(hidden), self.draft.arch.vocab_size, requests, rows,
                                drafts, probs)
        for i in active:
            req = requests[i]
            self.states[req.request_id] = _DraftCache(req.num_tokens, drafts[i][:-1], req.num_preemptions)
        return drafts

    def after_step(self, out: SchedulerOutput, forward: ForwardResult | None, live: dict[str, Request]) -> None:
        """Forget requests that ended."""
        for rid in [rid for rid in self.states if rid not in live]:
            del self.states[rid]

    def _catch_up(self, requests: list[Request], starts: dict[int, int]) -> None:
        """Feed requests[i] positions starts[i] .. num_tokens - 3 (all but the
        last two, which the first draft pass takes) in passes of at most
        CATCH_UP_ROWS rows, advancing ``starts``."""
        behind = {i: requests[i].num_tokens - 2 for i, start in starts.items() if requests[i].num_tokens - 2 > start}
        while behind:
            budget, chosen = CATCH_UP_ROWS, []
            for i, end in behind.items():
                if budget == 0:
                    break
                n = min(end - starts[i], budget)
                chosen.append((i, n))
                budget -= n
            chosen.sort(key=lambda run: run[1] != 1)  # one-row runs first (attention_inputs)
            reqs = [requests[i] for i, _ in chosen]
            ids = [t for (i, n), r in zip(chosen, reqs) for t in r.token_ids[starts[i]:starts[i] + n]]
            self._forward(ids, [(starts[i], n) for i, n in chosen], reqs)
            for i, n in chosen:
                starts[i] += n
                if starts[i] == behind[i]:
                    del behind[i]

    def _caught_up(self, req: Request) -> int:
        """The first position whose draft K/V must be computed again: past the
        drafts the target accepted, never past the pending token (its row gives
        the first draft)."""
        state = self.states.get(req.request_id)
        if state is None or state.preemptions != req.num_preemptions:
            return 0
        valid, tokens = state.valid, req.token_ids
        for token in state.written:
            if valid >= len(tokens) - 1 or tokens[valid] != token:
                break
            valid += 1
        return min(valid, len(tokens) - 1)

    def _forward(self, token_ids: list[int], runs: list[tuple[int, int]], requests: list[Request]) -> torch.Tensor:
        """The draft over rows ``runs`` (start, n) of ``requests``, writing their
        K/V into the draft cache; returns the hidden rows [sum n, hidden]."""
        positions, meta = self.runner.attention_inputs(runs, [self.kv.block_table(r.request_id) for r in requests])
        ids = torch.tensor(token_ids, dtype=torch.long, device=positions.device)
        return self.draft(ids, positions, meta, self.caches)
