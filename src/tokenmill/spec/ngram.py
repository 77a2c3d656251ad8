"""Prompt-lookup drafts (the ``ngram`` method): zero model cost.

For n from ``max_n`` down to ``min_n``: take the request's last n tokens and
find the latest earlier place where the same n tokens occur in its prompt or
output; the tokens that followed there are the drafts. Pays off where the
answer copies from its input (rewriting, summarising, editing code) and costs
one numpy scan per request per step where it does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

if TYPE_CHECKING:
    from tokenmill.engine.request import Request


def lookup(tokens: np.ndarray, k: int, min_n: int, max_n: int) -> list[int]:
    """tokens [L] int64 -> up to k tokens that followed the latest earlier occurrence
    of the longest suffix (of min_n..max_n tokens) found again; [] if none is."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        # Windows that start before the suffix itself: starts 0 .. length - n - 1.
        windows = sliding_window_view(tokens[:length - 1], n)
        hits = np.flatnonzero((windows == tokens[length - n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + k].tolist()
    return []


class NgramProposer:
    drafts_cost_passes = False

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n

    def propose(self, requests: list[Request], limits: list[int]) -> list[list[int]]:
        return [lookup(np.asarray(r.token_ids, dtype=np.int64), k, self.min_n, self.max_n) if k > 0 else []
                for r, k in zip(requests, limits)]
