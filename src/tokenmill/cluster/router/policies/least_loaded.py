"""least-loaded: the live worker with the fewest requests, then the fewest KV blocks in use."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.cluster.router.types import Decision, RouteRequest, WorkerState, alive_workers


class LeastLoadedPolicy:
    """Key: (running + waiting requests, KV blocks used); ties go to the first in
    table order. Ignores caches. Only as fresh as the last load update: between
    updates a burst all lands on the same worker (the router does not guess)."""

    name = "least-loaded"

    def choose(self, request: RouteRequest, workers: Sequence[WorkerState]) -> Decision:
        live = alive_workers(workers)
        chosen = min(live, key=_load_key)  # min keeps the first of equal keys
        return Decision(chosen.worker_id, None, float(_load_key(chosen)[0]))


def _load_key(worker: WorkerState) -> tuple[int, int]:
    load = worker.load
    return load.num_running + load.num_waiting, load.kv_blocks_used
