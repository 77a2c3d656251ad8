"""``self-int4``: the served model's own weights in int4 draft, the
full-precision model verifies.

The draft is a twin of the target's module tree that shares every tensor but
its linears, which kernels/quantize.py swaps for int4 ones (the LM head for
int8). It shares the target's KV cache too: a draft pass writes its K/V at
the positions it drafts, just after the request's computed ones, and the
verification step that follows rewrites each of those slots at full precision
before anything reads it as computed (the scheduler's rule: the computed
counter covers verified tokens only). So the drafter keeps no cache of its own
and never catches up: its context is the target's own K/V, which also raises
its acceptance over a draft that saw only its own.

A step: each request's blocks grow to hold its pending token and its drafts
(the verification needs those slots anyway; a request that cannot get them
drafts nothing this step), then up to k passes of one row per request, each
row's draft picked by spec/draft_sampling.py (the argmax, or for sampled
requests a draw from the twin's distribution, which goes with the draft to
the rejection rule). A pass whose every row drafts an argmax reads the twin's
shortlist head instead of its int8 head (spec/shortlist_head.py).
"""

from __future__ import annotations

import copy
from itertools import chain
from typing import TYPE_CHECKING

import torch
from torch import nn

from tokenmill.kernels.quantize import quantize_model
from tokenmill.spec.config import DRAFT_HEAD_VOCAB
from tokenmill.spec.draft_sampling import DraftSampler
from tokenmill.spec.shortlist_head import shortlist_head

if TYPE_CHECKING:
    from tokenmill.engine.kv_cache_manager import KVCacheManager
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ModelRunner


def int4_twin(model: nn.Module, int4_activations: str = "float",
              draft_head_vocab: int | None = DRAFT_HEAD_VOCAB) -> nn.Module:
    """A copy of ``model`` whose decoder linears are int4 (LM head int8) and
    which shares every other tensor with it; its ``shortlist_head``
    (spec/shortlist_head.py) picks greedy drafts from an int4 copy of the head's
    first ``draft_head_vocab`` rows (None: all), or is None. Call before the
    target's own linears are swapped for a backend (they must still be nn.Linear)."""
    shared = {id(t): t for t in chain(model.parameters(), model.buffers())}
    ops = getattr(model, "ops", None)
    if ops is not None:
        shared[id(ops)] = ops
    twin = copy.deepcopy(model, memo=shared)
    head = twin.lm_head
    quantize_model(twin, "int4", int4_activations=int4_activations)
    twin.shortlist_head = shortlist_head(head, twin.lm_head, torch.bfloat16, int4_activations,
                                         twin.arch.vocab_size, draft_head_vocab)
    return twin


class ModelDrafter:
    """Drafts from a model that reads and writes the target's KV cache."""

    drafts_cost_passes = True
    """Each draft position costs a forward pass of the draft model (spec/adaptive.py)."""

    def __init__(self, draft: nn.Module, runner: ModelRunner, kv: KVCacheManager, sampler: DraftSampler):
        self.draft = draft
        self.runner = runner
        self.kv = kv
        self.sampler = sampler
        self.last_probs: list[list[torch.Tensor | None]] = []
        """Per request of the last propose(), per draft: the distribution it was drawn from, or None (an argmax)."""

    @torch.inference_mode()
    def propose(self, requests: list[Request], limits: list[int]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor | None]] = [[] for _ in requests]
        # Blocks for the pending token and `limit` drafts after it, or no drafts.
        active = [i for i, (req, limit) in enumerate(zip(requests, limits))
                  if limit > 0 and self.kv.allocate(req, 1 + limit)]
        shortlist = getattr(self.draft, "shortlist_head", None)
        extras = None
        if shortlist is not None and active and self.sampler.argmax_only([requests[i] for i in active]):
            extras = {i: shortlist.extras(requests[i].token_ids) for i in active}
        for step in range(max((limits[i] for i in active), default=0)):
            rows = [i for i in active if limits[i] > step]
            reqs = [requests[i] for i in rows]
            hidden = self.runner.decode_rows(
                self.draft, [drafts[i][-1] if step else requests[i].token_ids[-1] for i in rows],
                [r.num_computed_tokens + step for r in reqs],
                [self.kv.block_table(r.request_id) for r in reqs])
            if extras is not None:
                self.sampler.append(shortlist.argmax(hidden, [extras[i] for i in rows]), rows, drafts, probs)
            else:
                self.sampler.extend(self.draft.compute_logits(hidden), self.draft.arch.vocab_size, requests, rows,
                                    drafts, probs)
        self.last_probs = probs
        return drafts
