"""Which draft tokens a step accepts (several tokens per request per step).

A request that verifies k drafts d_0..d_{k-1} gets k + 1 sample rows: row j is
the model's next token after its tokens + d_0..d_{j-1}. The walk: accept d_j
while the token sampled at row j equals it, and end with the first sampled
token that differs (or, when every draft matched, with row k's token).

How a row samples decides what that walk means. A plain row draws from the
model's distribution with that position's random number (counter-based for
seeded requests, engine/counter_rng.py): exact match, and each appended token
is the one decoding without drafts would have sampled there, so outputs are
token-identical to it, greedy and seeded; only the number of steps changes.
A sampled request's row whose draft a draft model drew from its own
distribution q (Request.draft_probs) instead keeps the draft with
probability min(1, p/q) and otherwise draws a different token from the
residual (engine/rejection.py): the same walk, now the rejection rule, which
keeps the target's distribution and accepts more often at temperature > 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenmill.engine.sampler import SamplingRow

if TYPE_CHECKING:
    from tokenmill.engine.request import Request


def verification_rows(req: Request, drafts: list[int]) -> list[SamplingRow]:
    """The len(drafts) + 1 rows a request samples in a step: row j after its
    output + drafts[:j]; rows of sampled requests whose draft j has a
    distribution carry it (the rejection rule)."""
    output = req.output_token_ids
    rows = [SamplingRow(req.params, req.prompt_token_ids, output + drafts[:j] if j else output)
            for j in range(len(drafts) + 1)]
    if not req.params.greedy:
        for row, draft, q in zip(rows, drafts, req.draft_probs):
            if q is not None:
                row.draft, row.draft_probs = draft, q
    return rows


def accept_exact(drafts: list[int], row_tokens: list[int]) -> list[int]:
    """drafts: the k drafts verified; row_tokens: the k + 1 sampled tokens.
    Returns the tokens to append: the accepted drafts, then one model token."""
    if len(row_tokens) != len(drafts) + 1:
        raise ValueError(f"row_tokens: need {len(drafts) + 1} sampled tokens for {len(drafts)} drafts, "
                         f"got {len(row_tokens)}")
    for j, draft in enumerate(drafts):
        if row_tokens[j] != draft:
            return row_tokens[:j + 1]
    return list(row_tokens)
