"""random policy (cluster/router/policies/random_policy.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from tokenmill.cluster.router.policies.random_policy import RandomPolicy
from tokenmill.cluster.router.types import NoWorkerAvailable, RouteRequest, WorkerState

REQUEST = RouteRequest((), 3)
WORKERS = [WorkerState("a"), WorkerState("b", alive=False), WorkerState("c"), WorkerState("d")]


def picks(seed: int, n: int) -> list:
    policy = RandomPolicy(seed=seed)
    return [policy.choose(REQUEST, WORKERS).worker_id for _ in range(n)]


def test_seeded_and_reproducible():
    assert picks(7, 50) == picks(7, 50)
    assert picks(7, 50) != picks(8, 50)


def test_only_live_workers_roughly_uniform():
    counts = Counter(picks(0, 3000))
    assert set(counts) == {"a", "c", "d"}
    assert all(abs(n / 3000 - 1 / 3) < 0.05 for n in counts.values())


def test_no_live_worker():
    with pytest.raises(NoWorkerAvailable):
        RandomPolicy().choose(REQUEST, [WorkerState("a", alive=False)])
