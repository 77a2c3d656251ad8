"""How many drafts each step verifies: as many as pay, by measurement.

Drafts pay at small batches, where a step's time hardly grows with its rows
(the weights are read once whatever the rows), and cost at large ones, where
every row adds its share of compute and a draft row yields less than one token.
So each step picks the drafts that maximise the expected tokens per second:

    rate = (decoding requests + sum of expected accepted drafts)
           / (step time at its rows + draft passes x draft pass time)

- Step time by rows (``StepTimes``): every step's seconds are recorded against
  its rows (all requests' new tokens, drafts included) and interpolated;
  beyond the largest rows seen the time grows in proportion (pessimistic),
  below the smallest it stays flat (memory-bound).
- Draft pass time (model drafters, spec/model_drafter.py): measured the same
  way against the rows of one pass; until measured, a pass is guessed at
  ``DRAFT_PASS_PRIOR`` of a target step of the same rows.
- Acceptance: a draft at position i (0 = first) is accepted with probability
  a**(i + 1), a request's ``a`` estimated from its own verifications (accepted
  drafts over accepted drafts + rejections) shrunk toward the engine-wide figure.

Candidates are added best-first (highest acceptance probability); the step
takes the set with the best rate, and none unless it beats the rate without
drafts by ``MIN_GAIN``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenmill.engine.request import Request

DRAFT_PASS_PRIOR = 0.5
"""A draft pass's time, as a share of a target step with the same rows, before any is measured."""
MIN_GAIN = 1.03
"""Drafts are verified only where they promise at least this much more tokens per second."""
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 4.0
"""The engine-wide acceptance starts at PRIOR_ACCEPTANCE worth this many verified drafts;
a request's own estimate is shrunk toward the engine's with the same weight."""
EMA = 0.7
"""Weight of the old mean when a rows bucket gets a new time."""


@dataclass
class StepTimes:
    """Seconds by rows: one exponential moving average per power-of-two bucket."""

    buckets: dict[int, list[float]] = field(default_factory=dict)
    """log2 bucket -> [mean rows, mean seconds]."""

    def record(self, rows: int, seconds: float) -> None:
        if rows < 1:
            return
        key = max(rows - 1, 0).bit_length()
        old = self.buckets.get(key)
        if old is None:
            self.buckets[key] = [float(rows), seconds]
        else:
            old[0] = EMA * old[0] + (1 - EMA) * rows
            old[1] = EMA * old[1] + (1 - EMA) * seconds

    def predict(self, rows: float) -> float | None:
        """Seconds for ``rows`` rows, or None before anything was recorded."""
        if not self.buckets:
            return None
        points = sorted(self.buckets.values())
        xs = [p[0] for p in points]
        i = bisect.bisect_left(xs, rows)
        if i == 0:
            return points[0][1]
        if i == len(points):
            x, t = points[-1]
            return t * rows / x
        (x0, t0), (x1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (rows - x0) / (x1 - x0)


class DraftPolicy:
    def __init__(self, drafts_cost_passes: bool):
        self.drafts_cost_passes = drafts_cost_passes
        self.step_times = StepTimes()
        self.pass_times = StepTimes()
        self.accepted = 0.0
        self.rejected = 0.0
        """Engine-wide accepted drafts and rejection events (a verification that kept not all its drafts)."""

    def record_step(self, rows: int, seconds: float) -> None:
        self.step_times.record(rows, seconds)

    def record_pass(self, rows: int, seconds: float) -> None:
        self.pass_times.record(rows, seconds)

    def record_verification(self, num_drafts: int, num_accepted: int) -> None:
        self.accepted += num_accepted
        self.rejected += num_accepted < num_drafts

    def acceptance(self, req: Request) -> float:
        engine = (self.accepted + PRIOR_ACCEPTANCE * PRIOR_WEIGHT) / (self.accepted + self.rejected + PRIOR_WEIGHT)
        own_accepted = req.num_drafts_accepted
        return (own_accepted + engine * PRIOR_WEIGHT) / (own_accepted + req.num_draft_rejections + PRIOR_WEIGHT)

    def choose(self, requests: list[Request], caps: list[int], num_rows: int) -> list[int]:
        """Drafts to verify for each of ``requests`` (at most caps[i]) in a step
        whose other rows number ``num_rows`` (one per decoding request, plus
        prefill chunks)."""
        base = self._seconds(num_rows, 0, 0)
        if base is None or not any(caps):
            return caps if base is None else [0] * len(caps)  # nothing measured yet: all (this step measures)
        alphas = [self.acceptance(r) for r in requests]
        # Each (request, position) with its probability of acceptance, best first.
        candidates = sorted(((alphas[r] ** (i + 1), r, i) for r, cap in enumerate(caps) for i in range(cap)),
                            reverse=True)
        tokens, rows, passes = float(len(requests)), num_rows, 0
        best_rate, best_n = len(requests) / base * MIN_GAIN, 0
        for n, (value, _, position) in enumerate(candidates, start=1):
            tokens += value
            rows += 1
            passes = max(passes, position + 1)
            seconds = self._seconds(rows, passes, len(requests))
            if seconds and tokens / seconds > best_rate:
                best_rate, best_n = tokens / seconds, n
        chosen = [0] * len(caps)
        for _, r, position in candidates[:best_n]:
            chosen[r] = max(chosen[r], position + 1)
        return chosen

    def _seconds(self, rows: int, passes: int, draft_rows: int) -> float | None:
        step = self.step_times.predict(rows)
        if step is None:
            return None
        if not (passes and self.drafts_cost_passes):
            return step
        per_pass = self.pass_times.predict(draft_rows)
        if per_pass is None:
            per_pass = DRAFT_PASS_PRIOR * (self.step_times.predict(draft_rows) or step)
        return step + passes * per_pass

