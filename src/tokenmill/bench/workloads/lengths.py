"""Token-length distributions for synthetic samples.

Every kind is parametrised by a mean and one spread ratio ``r`` (vLLM's
``--random-range-ratio``), and every draw is an integer >= 1:

- fixed:     always the mean.
- uniform:   an integer in [round(mean*(1-r)), round(mean*(1+r))] (vLLM's random dataset).
- normal:    round(N(mean, (r*mean)^2)), clamped to [1, 2*mean-1]; the clamp is
             symmetric about the mean, so the mean is kept.
- lognormal: coefficient of variation r with the requested mean (the right-skewed
             shape of real chat traffic), clamped to [1, LOGNORMAL_CAP*mean] so one
             outlier cannot outgrow the context.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

LENGTH_DISTS = ("fixed", "uniform", "normal", "lognormal")
LOGNORMAL_CAP = 8


@dataclass(frozen=True)
class LengthDist:
    field: str
    """Name used in errors ('input_len', 'output_len')."""
    mean: int
    """Mean length in tokens."""
    kind: str = "uniform"
    """One of LENGTH_DISTS."""
    spread: float = 0.0
    """The ratio r above; 0 makes every kind fixed."""

    def __post_init__(self) -> None:
        if isinstance(self.mean, bool) or not isinstance(self.mean, int) or self.mean < 1:
            raise ValueError(f"{self.field}: must be an integer >= 1, got {self.mean!r}")
        if self.kind not in LENGTH_DISTS:
            raise ValueError(f"length_dist: must be one of {LENGTH_DISTS}, got {self.kind!r}")
        if not self.spread >= 0 or math.isinf(self.spread):
            raise ValueError(f"range_ratio: must be a finite number >= 0, got {self.spread!r}")
        if self.kind == "uniform" and self.spread > 1:
            raise ValueError(f"range_ratio: a uniform length needs a ratio in [0, 1], got {self.spread}")

    def draw(self, rng: random.Random) -> int:
        m, r = self.mean, self.spread
        if self.kind == "fixed" or r == 0:
            return m
        if self.kind == "uniform":
            low = max(1, round(m * (1 - r)))
            return rng.randint(low, max(low, round(m * (1 + r))))
        if self.kind == "normal":
            return min(max(1, round(rng.gauss(m, r * m))), 2 * m - 1)
        # lognormal: E[X] = exp(mu + sigma^2/2) = m and CV^2 = exp(sigma^2) - 1 = r^2.
        sigma = math.sqrt(math.log1p(r * r))
        mu = math.log(m) - sigma * sigma / 2
        return min(max(1, round(rng.lognormvariate(mu, sigma))), LOGNORMAL_CAP * m)

    def describe(self) -> str:
        if self.kind == "fixed" or self.spread == 0:
            return f"{self.mean}"
        return f"{self.kind} mean {self.mean} (r={self.spread:g})"
