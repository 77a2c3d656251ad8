"""random: a uniformly random live worker (seeded, so a run can be replayed)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tokenmill.cluster.router.types import Decision, RouteRequest, WorkerState, alive_workers


class RandomPolicy:
    name = "random"

    def __init__(self, *, seed: int = 0):
        self._rng = random.Random(seed)  # own generator: the global one is nobody's to reseed

    def choose(self, request: RouteRequest, workers: Sequence[WorkerState]) -> Decision:
        chosen = self._rng.choice(alive_workers(workers))
        return Decision(chosen.worker_id, None, 0.0)
