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


def seeded_uniform(seed: int, position: int) -> float:
    """U[0, 1) as a float64 with 53 random bits, for output token ``position``
    (0 = the first generated token) of a request sampled with ``seed``."""
    bits = _splitmix64((_splitmix64(seed & _MASK) + _splitmix64(position & _MASK)) & _MASK)
    return (bits >> 11) * (1.0 / (1 << 53))
