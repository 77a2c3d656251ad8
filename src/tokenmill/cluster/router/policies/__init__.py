"""Routing policies: one per file, one interface, built by name.

Every policy takes a request and the worker table (in table order, dead ones
included) and returns a ``Decision``; none ever chooses a dead worker, and all
raise ``NoWorkerAvailable`` when no worker is alive. A policy may keep state
(a turn counter, a seeded RNG, an index to read) but never changes the table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Protocol

from tokenmill.cluster.router.policies.kv import KvPolicy
from tokenmill.cluster.router.policies.least_loaded import LeastLoadedPolicy
from tokenmill.cluster.router.policies.random_policy import RandomPolicy
from tokenmill.cluster.router.policies.round_robin import RoundRobinPolicy
from tokenmill.cluster.router.types import Decision, RouteRequest, WorkerState


class RoutingPolicy(Protocol):
    name: str

    def choose(self, request: RouteRequest, workers: Sequence[WorkerState]) -> Decision: ...


POLICIES: dict[str, Callable[..., RoutingPolicy]] = {
    RoundRobinPolicy.name: RoundRobinPolicy,  # no options
    RandomPolicy.name: RandomPolicy,  # seed
    LeastLoadedPolicy.name: LeastLoadedPolicy,  # no options
    KvPolicy.name: KvPolicy,  # index (required), overlap_weight, temperature, seed
}
"""Policy name -> constructor; the names are what RouterConfig.policy accepts."""


def make_policy(name: str, **options) -> RoutingPolicy:
    """Build the policy called ``name`` with its own options (see POLICIES)."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"policy: unknown policy {name!r}; choose one of {', '.join(sorted(POLICIES))}")
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as e:
        raise ValueError(f"policy: bad options for {name!r} ({e}): {sorted(options)}") from None
    return factory(**options)


__all__ = ["POLICIES", "KvPolicy", "LeastLoadedPolicy", "RandomPolicy", "RoundRobinPolicy", "RoutingPolicy",
           "make_policy"]
