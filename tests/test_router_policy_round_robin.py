"""round-robin policy (cluster/router/policies/round_robin.py)."""

from __future__ import annotations

import pytest

from tokenmill.cluster.router.policies.round_robin import RoundRobinPolicy
from tokenmill.cluster.router.types import NoWorkerAvailable, RouteRequest, WorkerState

REQUEST = RouteRequest((1, 2), 40)


def test_cycles_through_workers_in_order():
    workers = [WorkerState(w) for w in "abc"]
    policy = RoundRobinPolicy()
    picks = [policy.choose(REQUEST, workers) for _ in range(6)]
    assert [d.worker_id for d in picks] == list("abcabc")
    assert all(d.overlap_blocks is None and d.score == 0.0 for d in picks)  # the router fills overlap


def test_skips_dead_workers():
    workers = [WorkerState("a"), WorkerState("b", alive=False), WorkerState("c")]
    policy = RoundRobinPolicy()
    assert [policy.choose(REQUEST, workers).worker_id for _ in range(4)] == list("acac")


@pytest.mark.parametrize("workers", [[], [WorkerState("a", alive=False)]])
def test_no_live_worker(workers):
    with pytest.raises(NoWorkerAvailable):
        RoundRobinPolicy().choose(REQUEST, workers)
