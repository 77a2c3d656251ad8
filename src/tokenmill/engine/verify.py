"""Which draft tokens a step accepts (several tokens per request per step).

A request that verifies k drafts d_0..d_{k-1} gets k + 1 sample rows: row j is
the model's next token after its tokens + d_0..d_{j-1}. The rule here is exact
matching: walk the rows in order, accept d_j while the token sampled at row j
equals it, and end with the first sampled token that differs (or, when every
draft matched, with row k's token). Each appended token is therefore a token
the model itself sampled at that position, with that position's random number
(counter-based, engine/counter_rng.py): outputs are token-identical to decoding
without drafts, greedy and seeded, and only the number of steps changes.
(Rejection sampling against a draft distribution, which accepts more often at
temperature > 0, belongs to the proposers that have one.)
"""

from __future__ import annotations


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
