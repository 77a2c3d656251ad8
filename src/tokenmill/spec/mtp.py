"""``mtp``: DeepSeek-V3/R1's own next-token-prediction module drafts.

MTP depth 0 (model/deepseek_mtp.py) reads, for the row at position q, the main
model's final hidden state at q and the token at q + 1, and predicts the
token at q + 2. It is a decoder block with attention, so it keeps a latent
cache layer of its own (``cache``): a separate tensor addressed through the
main cache's block tables, so it needs no blocks of its own.

After every step (``after_step``), each request's rows that the step verified
(positions start .. num_computed - 1: its new prompt positions, or its
accepted drafts and the position before its new pending token) go through
the MTP block with the tokens after them, which the step has just made known.
That keeps the MTP cache in step with the main one, and the last row's
logits give the first draft of the request's next step. For k > 1 the same
block runs again (as vLLM and SGLang reuse a single MTP layer): its own output
hidden state and its draft, one position further, writing rows that the
next step's pass rewrites once the tokens there are verified.

Where the main cache's blocks came from elsewhere (a prefix-cache hit, KV
imported from a prefill engine) the MTP rows are whatever that block's
computing request left, or nothing: the last row of a block depends on the
token after it. Drafts may be worse there; outputs are not (they are verified).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tokenmill.engine.request import RequestStatus
from tokenmill.model.kv_cache_spec import zeroed_cache
from tokenmill.spec.draft_sampling import DraftSampler

if TYPE_CHECKING:
    from tokenmill.engine.kv_cache_manager import KVCacheManager
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ForwardResult, ModelRunner
    from tokenmill.engine.scheduler import SchedulerOutput

MTP_DEPTH = 0
"""The depth that drafts (DeepSeek-V3/R1 ship one); reused for every draft position."""


def check_has_mtp(model) -> None:
    if getattr(model, "mtp", None) is None:
        raise ValueError("speculative_config.method: mtp needs a model with next-token-prediction layers "
                         "(DeepSeek-V3/R1 with num_nextn_predict_layers > 0 and their weights); this one has none")


class MTPDrafter:
    drafts_cost_passes = False
    """The first draft comes from the pass that keeps the MTP cache current, which
    runs every step anyway; a further one costs a single decoder block."""

    def __init__(self, model, runner: ModelRunner, kv: KVCacheManager, num_speculative_tokens: int,
                 sampler: DraftSampler):
        check_has_mtp(model)
        self.model = model
        self.runner = runner
        self.kv = kv
        self.k = num_speculative_tokens
        self.sampler = sampler
        layer = runner.kv_caches[0]
        self.cache = zeroed_cache(tuple(layer.shape), layer.device, layer.dtype)
        """The MTP block's latent cache layer: [num_blocks, 1, 1, block_size, latent]."""
        self.drafts: dict[str, tuple[list[int], list[torch.Tensor | None]]] = {}
        """Request id -> drafts for its next step, made by the last step that ran it, and
        the distribution each was drawn from (None: an argmax; spec/draft_sampling.py)."""
        self.last_probs: list[list[torch.Tensor | None]] = []
        runner.keep_step_hidden = True

    def propose(self, requests: list[Request], limits: list[int]) -> list[list[int]]:
        made = [self.drafts.pop(r.request_id, ([], [])) for r in requests]
        self.last_probs = [probs[:limit] for (_, probs), limit in zip(made, limits)]
        return [drafts[:limit] for (drafts, _), limit in zip(made, limits)]

    @torch.inference_mode()
    def after_step(self, out: SchedulerOutput, forward: ForwardResult | None, live: dict[str, Request]) -> None:
        """Run the MTP block over the step's verified rows, then draft for the
        requests about to decode (see the module docstring)."""
        for rid in [rid for rid in self.drafts if rid not in live]:
            del self.drafts[rid]  # finished or aborted before using them
        for s in out.scheduled:  # this step moved them on: their drafts are made again below, or not at all
            self.drafts.pop(s.request.request_id, None)
        if forward is None or forward.step_hidden is None:
            return
        runs = []  # (scheduled request, rows it verified)
        for s in out.scheduled:
            req = s.request
            n = req.num_computed_tokens - s.start
            if req.status is RequestStatus.RUNNING and req.request_id in forward.step_rows and n > 0:
                runs.append((s, n))
        if not runs:
            return
        runs.sort(key=lambda run: run[1] != 1)  # one-row runs first (attention_inputs)
        first = [forward.step_rows[s.request.request_id] for s, _ in runs]
        prev = torch.cat([forward.step_hidden[f:f + n] for f, (_, n) in zip(first, runs)])
        ids = [t for s, n in runs for t in s.request.token_ids[s.start + 1:s.start + 1 + n]]
        hidden = self._pass(ids, prev, [(s.start, n) for s, n in runs], [s.request for s, _ in runs])
        ends = torch.tensor([sum(n for _, n in runs[:i + 1]) - 1 for i in range(len(runs))])
        ready = [i for i, (s, _) in enumerate(runs) if s.request.num_computed_tokens == s.request.num_tokens - 1]
        if ready:
            self._draft([runs[i][0].request for i in ready], hidden[ends[ready]])

    def _draft(self, requests: list[Request], hidden: torch.Tensor) -> None:
        """hidden [B, hidden]: each request's MTP state at its last computed position."""
        vocab = self.model.arch.vocab_size
        drafts: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor | None]] = [[] for _ in requests]
        self.sampler.extend(self.model.compute_logits(hidden), vocab, requests, list(range(len(requests))),
                            drafts, probs)
        # Further passes write rows past the computed ones: they need blocks there.
        more = [i for i, r in enumerate(requests) if self.k > 1 and self.kv.allocate(r, self.k)]
        for step in range(1, self.k if more else 1):
            reqs = [requests[i] for i in more]
            hidden = self._pass([drafts[i][-1] for i in more], hidden[more] if step == 1 else hidden,
                                [(r.num_computed_tokens - 1 + step, 1) for r in reqs], reqs)
            self.sampler.extend(self.model.compute_logits(hidden), vocab, requests, more, drafts, probs)
        for req, d, p in zip(requests, drafts, probs):
            self.drafts[req.request_id] = (d, p)

    def _pass(self, token_ids: list[int], prev_hidden: torch.Tensor, runs: list[tuple[int, int]],
              requests: list[Request]) -> torch.Tensor:
        """The MTP block over rows ``runs`` (start, n) of ``requests``: token at
        q + 1 and previous hidden at q for each row q; returns its hidden rows."""
        positions, meta = self.runner.attention_inputs(runs, [self.kv.block_table(r.request_id) for r in requests])
        ids = torch.tensor(token_ids, dtype=torch.long, device=positions.device)
        return self.model.mtp_hidden(MTP_DEPTH, ids, prev_hidden, positions, meta, self.cache)
