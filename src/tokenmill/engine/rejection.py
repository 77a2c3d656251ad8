"""The rejection rule for drafts drawn from a distribution (speculative decoding).

A draft d at some position was drawn from the draft model's distribution q
there (spec/draft_sampling.py). The step that verifies it has the target's
distribution p at that position: the sampler's processed weights (penalties,
temperature, top-k, top-p, min-p, the grammar mask), normalised. The row keeps
d with probability min(1, p(d) / q(d)); otherwise it draws from the residual
max(0, p - q), normalised. The token that comes out is distributed as p
exactly, whatever q is (Leviathan et al. 2023; Chen et al. 2023): a draft
model close to the target is kept more often, a poor one only costs steps.
Keeping the draft has probability sum_t min(p(t), q(t)) = 1 - TV(p, q),
against p(argmax q) for a greedy draft checked by exact match (verify.py).

A rejected draft has p(d) < q(d), so the residual puts no mass on it and the
row's token differs from the draft: verify.py's walk (keep drafts while a
row's token equals its draft) ends at the first rejection, as the rule needs.
A row decides even when an earlier row of its request rejected; its token
is then never used, and its numbers are its position's own.

Random numbers per row: one for the accept test, one for the residual draw
(for seeded requests, counter streams STREAM_ACCEPT and STREAM_SAMPLE of the
row's output position).
"""

from __future__ import annotations

import torch

from tokenmill.engine.distribution import draw


def accept_or_resample(w: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor,
                       u_draw: torch.Tensor) -> torch.Tensor:
    """w [D, V]: the target's unnormalised weights at each row (zeros where its
    filters cut; every row sums to a finite positive number); drafts [D] long;
    q [D, Vq] (Vq <= V): the distributions the drafts were drawn from (rows sum
    to 1; ids past Vq have q = 0); u_accept, u_draw [D] float64 in [0, 1).
    Returns [D] token ids: the draft where kept, else a residual draw."""
    rows = torch.arange(w.shape[0], device=w.device)
    total = w.sum(dim=-1, dtype=torch.float64)  # [D]
    p_draft = w[rows, drafts].double() / total  # [D]
    q_draft = q[rows, drafts].double()  # [D]
    keep = u_accept * q_draft < p_draft  # probability min(1, p/q)
    tokens = drafts.clone()
    rejected = torch.nonzero(~keep).flatten()
    if rejected.numel() == 0:
        return tokens
    p = w[rejected].double() / total[rejected, None]  # [N, V]
    residual = p.clone()
    residual[:, :q.shape[1]] -= q[rejected].double()
    residual.clamp_(min=0.0)
    residual[torch.arange(rejected.numel(), device=w.device), drafts[rejected]] = 0.0  # p(d) < q(d) there
    empty = residual.sum(dim=-1) <= 0  # p equal to q up to rounding: nothing left, so draw from p
    residual[empty] = p[empty]
    tokens[rejected] = draw(residual, u_draw[rejected])
    return tokens
