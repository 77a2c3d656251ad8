"""Counter-based random numbers for seeded sampling.

A seeded request's uniform for output position i is a pure function of
(seed, i): no generator object carries state from step to step. So a request
that moves to another engine (migration, disaggregated decode) or restarts
from its prompt + generated tokens (engine-core resume) draws exactly the
numbers it would have drawn where it was, and a step that verifies several
tokens of one request at once (speculative decoding) draws each position's
number without replaying the ones before it.

The mix is SplitMix64 (Steele, Lea and Flood 2014): a bijection on 64-bit
integers whose outputs pass BigCrush for consecutive inputs, applied to the
seed and then to (mixed seed + mixed position).
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x: int) -> int:
    z = (x + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


STREAM_SAMPLE = 0
"""The draw of the token at a position (every sampled row)."""
STREAM_ACCEPT = 1
"""Rejection sampling: the accept/reject test of a draft at a position (engine/rejection.py)."""
STREAM_DRAFT = 2
"""Rejection sampling: the draft model's own draw of its draft at a position (spec/draft_sampling.py)."""


def seeded_uniform(seed: int, position: int, stream: int = STREAM_SAMPLE) -> float:
    """U[0, 1) as a float64 with 53 random bits, for output token ``position``
    (0 = the first generated token) of a request sampled with ``seed``.
    ``stream`` tells apart the independent numbers one position may need
    (stream 0 is the plain draw, the same numbers as before streams existed)."""
    key = (_splitmix64(seed & _MASK) + _splitmix64(position & _MASK)) & _MASK
    if stream:
        key = (_splitmix64(key) + _splitmix64((stream * _GOLDEN) & _MASK)) & _MASK
    bits = _splitmix64(key)
    return (bits >> 11) * (1.0 / (1 << 53))
