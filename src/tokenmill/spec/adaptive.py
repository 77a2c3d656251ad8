"""How many drafts each step verifies: as many as pay, by measurement.

Drafts pay at small batches, where a step's time hardly grows with its rows
(the weights are read once whatever the rows), and cost at large ones, where
every row adds its share of compute and a draft row yields less than one token.
So each step compares, for its R decoding requests, the decode rate without
drafts with the rate of the best set of drafts:

    plain = R / T(R)
    spec  = (R + sum of expected accepted drafts)
            / (T(R + drafts) + draft passes x P(R))

and verifies that set only when spec >= plain x ``MIN_GAIN``. Prefill chunks
that share the step are left out of both sides: they are work either way, and
drafts compete with them for the step's token budget rather than ride free.

- T, decode step time by rows (``StepTimes``): recorded from steps in which
  every row is sampled (decodes and their drafts; a prefill row skips the LM
  head and the sampler, so it costs less), with the host time of a proposer
  that has no draft passes (prompt lookup) added, interpolated between the rows seen;
  below the smallest it stays flat; beyond the largest it stays flat up to
  ``KNEE_ROWS`` and then grows in proportion to the rows (the pessimistic
  guess, so large batches do not draft on a hope; small ones may try, and the
  try measures).
- P, draft pass time (model drafters, spec/model_drafter.py): measured the
  same way against the rows of one pass; until measured, guessed at
  ``DRAFT_PASS_PRIOR`` of T at the same rows (a whole T past ``KNEE_ROWS``:
  a quantized draft is no cheaper where compute, not weight bytes, bounds it).
- Acceptance: a draft at position i (0 = first) is accepted with probability
  a**(i + 1), a request's ``a`` estimated from its own verifications (accepted
  drafts over accepted drafts + rejections) shrunk toward the engine-wide figure.

Candidates are added best-first (highest acceptance probability); the step
takes the best set. Before any decode step is measured, only batches of up to
``KNEE_ROWS`` requests draft.

Estimates move only with verifications, so a policy that stopped drafting
for low acceptance would never learn that acceptance rose (new requests,
another temperature, a switch of acceptance rule). Two things keep it
learning: the engine-wide counts decay (``ACCEPTANCE_DECAY`` per
verification: they describe the recent workload), and when a step drafts
nothing although one draft would pay were it accepted, every
``PROBE_INTERVAL``-th such step verifies one draft of the request most
likely to keep it (a probe).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenmill.engine.request import Request

KNEE_ROWS = 16
"""Rows up to which an unmeasured decode step is assumed to cost what a one-row
step costs (memory-bound: the weights are read once for all rows)."""
DRAFT_PASS_PRIOR = 0.5
"""A draft pass's time, as a share of a decode step with the same rows (up to
KNEE_ROWS; 1.0 beyond), before any pass is measured."""
MIN_GAIN = 1.03
"""Drafts are verified only where they promise at least this much more tokens per second."""
PRIOR_ACCEPTANCE = 0.6
PRIOR_WEIGHT = 4.0
"""The engine-wide acceptance starts at PRIOR_ACCEPTANCE worth this many verified drafts;
a request's own estimate is shrunk toward the engine's with the same weight."""
EMA = 0.7
"""Weight of the old mean when a rows bucket gets a new time."""
ACCEPTANCE_DECAY = 0.99
"""Engine-wide accepted and rejection counts are multiplied by this at each
verification (a memory of about a hundred verifications)."""
PROBE_INTERVAL = 64
"""Steps that drafted nothing (where one accepted draft would pay) between probes."""


@dataclass
class StepTimes:
    """Seconds by rows: one exponential moving average per power-of-two bucket."""

    buckets: dict[int, list[float]] = field(default_factory=dict)
    """log2 bucket -> [mean rows, mean seconds]."""

    def record(self, rows: int, seconds: float) -> None:
        if rows < 1:
            return
        key = (rows - 1).bit_length()
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
            return t * max(1.0, rows / max(x, KNEE_ROWS))
        (x0, t0), (x1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (rows - x0) / (x1 - x0)


class DraftPolicy:
    def __init__(self, drafts_cost_passes: bool):
        self.drafts_cost_passes = drafts_cost_passes
        self.step_times = StepTimes()
        """Decode steps (every row sampled): seconds by rows."""
        self.pass_times = StepTimes()
        """Draft passes: seconds by rows."""
        self.accepted = 0.0
        self.rejected = 0.0
        """Engine-wide accepted drafts and rejection events (a verification that kept not
        all its drafts), decayed by ACCEPTANCE_DECAY per verification."""
        self.steps_without_drafts = 0
        """Consecutive choices that drafted nothing although a draft could pay (for probes)."""
        self.num_probes = 0

    def record_step(self, rows: int, seconds: float) -> None:
        """A decode step (every row sampled) of ``rows`` rows took ``seconds``."""
        self.step_times.record(rows, seconds)

    def record_pass(self, rows: int, seconds: float) -> None:
        self.pass_times.record(rows, seconds)

    def record_verification(self, num_drafts: int, num_accepted: int) -> None:
        self.accepted = self.accepted * ACCEPTANCE_DECAY + num_accepted
        self.rejected = self.rejected * ACCEPTANCE_DECAY + (num_accepted < num_drafts)

    def acceptance(self, req: Request) -> float:
        engine = (self.accepted + PRIOR_ACCEPTANCE * PRIOR_WEIGHT) / (self.accepted + self.rejected + PRIOR_WEIGHT)
        own_accepted = req.num_drafts_accepted
        return (own_accepted + engine * PRIOR_WEIGHT) / (own_accepted + req.num_draft_rejections + PRIOR_WEIGHT)

    def may_pay(self, num_requests: int, k: int) -> bool:
        """Whether k drafts for each of ``num_requests`` decoding requests could
        pay at all (every draft accepted): lets a free proposer skip its work."""
        base = self.step_times.predict(num_requests)
        if base is None:
            return num_requests <= KNEE_ROWS
        plain = num_requests / base
        seconds = self._seconds(num_requests * (k + 1), k, num_requests)
        return num_requests * (k + 1) / seconds >= plain * MIN_GAIN

    def choose(self, requests: list[Request], caps: list[int]) -> list[int]:
        """Drafts to verify for each of ``requests`` (the step's decoding
        requests), at most caps[i] each."""
        num = len(requests)
        base = self.step_times.predict(num)
        if base is None:  # nothing measured yet: small batches try (the step measures), large ones do not
            return list(caps) if num <= KNEE_ROWS else [0] * num
        alphas = [self.acceptance(r) for r in requests]
        # Each (request, position) with its probability of acceptance, best first.
        candidates = sorted(((alphas[r] ** (i + 1), r, i) for r, cap in enumerate(caps) for i in range(cap)),
                            reverse=True)
        tokens, rows, passes = float(num), num, 0
        best_rate, best_n = num / base * MIN_GAIN, 0
        for n, (value, _, position) in enumerate(candidates, start=1):
            tokens += value
            rows += 1
            passes = max(passes, position + 1)
            rate = tokens / self._seconds(rows, passes, num)
            if rate > best_rate:
                best_rate, best_n = rate, n
        chosen = [0] * len(caps)
        for _, r, position in candidates[:best_n]:
            chosen[r] = max(chosen[r], position + 1)
        if best_n:
            self.steps_without_drafts = 0
        elif candidates:
            self._maybe_probe(candidates[0][1], num, base, chosen)
        return chosen

    def _maybe_probe(self, request: int, num: int, base: float, chosen: list[int]) -> None:
        """No drafts chosen: every PROBE_INTERVAL-th such step, one draft for
        ``request`` (the likeliest to keep it), where one kept draft would pay."""
        if (num + 1) / self._seconds(num + 1, 1, num) < num / base * MIN_GAIN:
            return  # even a kept draft would not pay: nothing to learn
        self.steps_without_drafts += 1
        if self.steps_without_drafts >= PROBE_INTERVAL:
            self.steps_without_drafts = 0
            self.num_probes += 1
            chosen[request] = 1

    def _seconds(self, rows: int, passes: int, draft_rows: int) -> float:
        """Predicted seconds of a decode step of ``rows`` rows after ``passes``
        draft passes of ``draft_rows`` rows (step_times must hold a point)."""
        step = self.step_times.predict(rows)
        if not (passes and self.drafts_cost_passes):
            return step
        per_pass = self.pass_times.predict(draft_rows)
        if per_pass is None:
            prior = DRAFT_PASS_PRIOR if draft_rows <= KNEE_ROWS else 1.0
            per_pass = prior * self.step_times.predict(draft_rows)
        return step + passes * per_pass
