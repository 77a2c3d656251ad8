"""least-loaded policy (cluster/router/policies/least_loaded.py)."""

from __future__ import annotations

import pytest

from tokenmill.cluster.router.policies.least_loaded import LeastLoadedPolicy
from tokenmill.cluster.router.types import NoWorkerAvailable, RouteRequest, WorkerLoad, WorkerState

REQUEST = RouteRequest((1,), 20)


def worker(name: str, running: int, waiting: int, used: int = 0, alive: bool = True) -> WorkerState:
    return WorkerState(name, WorkerLoad(num_running=running, num_waiting=waiting, kv_blocks_used=used), alive)


def test_fewest_running_plus_waiting():
    workers = [worker("a", 3, 1), worker("b", 1, 2), worker("c", 2, 0)]
    decision = LeastLoadedPolicy().choose(REQUEST, workers)
    assert (decision.worker_id, decision.score) == ("c", 2.0)


def test_ties_by_kv_blocks_then_order():
    workers = [worker("a", 2, 0, used=50), worker("b", 1, 1, used=10), worker("c", 0, 2, used=10)]
    assert LeastLoadedPolicy().choose(REQUEST, workers).worker_id == "b"


def test_dead_worker_never_chosen_even_if_idle():
    workers = [worker("idle", 0, 0, alive=False), worker("busy", 9, 9)]
    assert LeastLoadedPolicy().choose(REQUEST, workers).worker_id == "busy"
    with pytest.raises(NoWorkerAvailable):
        LeastLoadedPolicy().choose(REQUEST, workers[:1])
