"""round-robin: each request to the next live worker in turn; ignores caches and load."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.cluster.router.types import Decision, RouteRequest, WorkerState, alive_workers


class RoundRobinPolicy:
    """Cycles over the live workers in table order.

    The turn is a counter taken modulo the number of live workers, so when a
    worker dies or joins the cycle shifts once and goes on (no worker is owed
    a turn); with a fixed set each live worker gets every N-th request.
    """

    name = "round-robin"

    def __init__(self):
        self._turn = 0  # requests routed so far

    def choose(self, request: RouteRequest, workers: Sequence[WorkerState]) -> Decision:
        live = alive_workers(workers)
        chosen = live[self._turn % len(live)]
        self._turn += 1
        return Decision(chosen.worker_id, None, 0.0)
