"""How a draft model's logits become drafts.

Greedy requests (temperature 0) get the argmax, and so does every request
under ``"acceptance_method": "exact_match"``: a point mass, which the
verifying step checks by exact match (engine/verify.py), keeping seeded
outputs token-identical to decoding without drafts. Under
``rejection_sampler`` (the default) a sampled request's draft is drawn from
the draft's own processed distribution q (the request's penalties,
temperature, top-k, top-p and min-p applied to the draft's logits,
engine/distribution.py), and q travels with the draft to the verifying row,
which keeps it with probability min(1, p/q) (engine/rejection.py). A draft
drawn from something close to the target is kept far more often than its
argmax would be matched at temperature > 0.

The draw's number: a seeded request's comes from its seed and the draft's
output position (counter stream STREAM_DRAFT), so its drafts, and with them
its output, repeat run after run; an unseeded one's from the drafter's own
generator. A row whose weights have no finite distribution drafts its argmax
(a point mass: exact match for that draft).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tokenmill.engine.counter_rng import STREAM_DRAFT, seeded_uniform
from tokenmill.engine.distribution import apply_penalties, draw, filtered_weights
from tokenmill.engine.sampler import SamplingRow

if TYPE_CHECKING:
    from tokenmill.engine.request import Request


class DraftSampler:
    def __init__(self, sample: bool = True, seed: int = 0):
        """sample: draw sampled requests' drafts (rejection_sampler); False: argmax only (exact_match)."""
        self.sample = sample
        self.generator = torch.Generator().manual_seed(seed)
        """Unseeded requests' draft draws (never the engine sampler's generator)."""

    @torch.inference_mode()
    def pick(self, logits: torch.Tensor, vocab_size: int, requests: list[Request],
             drafts: list[list[int]]) -> tuple[list[int], list[torch.Tensor | None]]:
        """logits [B, >= vocab_size]: the draft model's row for each request at
        the position after its tokens and ``drafts[i]`` (its drafts so far).
        Returns one draft per row and the distribution it was drawn from
        ([vocab_size] float32, sums to 1), or None where it is the argmax."""
        logits = logits[:, :vocab_size]
        tokens = logits.argmax(dim=-1)  # [B]
        probs: list[torch.Tensor | None] = [None] * len(requests)
        sampled = [i for i, r in enumerate(requests) if self.sample and not r.params.greedy]
        if sampled:
            rows = [SamplingRow(requests[i].params, requests[i].prompt_token_ids,
                                requests[i].output_token_ids + drafts[i]) for i in sampled]
            x = logits[sampled].float()  # [S, V], a copy (advanced indexing)
            if any(r.params.uses_penalties for r in rows):
                apply_penalties(x, rows)
            w = filtered_weights(x, [r.params for r in rows])  # [S, V]
            total = w.sum(dim=-1, dtype=torch.float64)  # [S]
            ok = torch.nonzero(torch.isfinite(total) & (total > 0)).flatten().tolist()
            if ok:
                u = self._uniforms([rows[j] for j in ok])
                drawn = draw(w[ok], u.to(w.device))
                q = w[ok] / total[ok, None].to(w.dtype)  # [O, V]
                drawn_rows = [sampled[j] for j in ok]
                tokens[drawn_rows] = drawn
                for n, i in enumerate(drawn_rows):
                    probs[i] = q[n]
        return tokens.tolist(), probs

    def extend(self, logits: torch.Tensor, vocab_size: int, requests: list[Request], rows: list[int],
               drafts: list[list[int]], probs: list[list[torch.Tensor | None]]) -> None:
        """One more draft for requests[i], i in ``rows`` (logits [len(rows), >= vocab]
        in that order): appended to drafts[i], its distribution (or None) to probs[i]."""
        picked, q = self.pick(logits, vocab_size, [requests[i] for i in rows], [drafts[i] for i in rows])
        self.append(picked, rows, drafts, probs, q)

    def argmax_only(self, requests: list[Request]) -> bool:
        """Whether every one of ``requests`` drafts its argmax (greedy, or exact_match)."""
        return not self.sample or all(r.params.greedy for r in requests)

    @staticmethod
    def append(tokens: list[int], rows: list[int], drafts: list[list[int]], probs: list[list[torch.Tensor | None]],
               q: list[torch.Tensor | None] | None = None) -> None:
        """Draft tokens[j] for request rows[j], drawn from q[j] (None: an argmax)."""
        for j, (i, token) in enumerate(zip(rows, tokens)):
            drafts[i].append(token)
            probs[i].append(q[j] if q is not None else None)

    def _uniforms(self, rows: list[SamplingRow]) -> torch.Tensor:
        """[S] float64: seeded rows from (seed, output position, STREAM_DRAFT)."""
        u = torch.rand(len(rows), dtype=torch.float64, generator=self.generator)
        for j, row in enumerate(rows):
            if row.params.seed is not None:
                u[j] = seeded_uniform(row.params.seed, len(row.output_token_ids), STREAM_DRAFT)
        return u
