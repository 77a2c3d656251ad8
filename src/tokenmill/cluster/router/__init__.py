"""The request router of the cluster: which worker serves a request.

Pure Python, no Ray: the frontend feeds it worker loads and KV event batches
and asks ``Router.route(token_ids)``; transport is someone else's job.

- ``index.KVIndex``: the global KV index, mirrored from workers' KV events;
- ``approx.ApproxIndex``: the same query, predicted from the router's own
  decisions when workers publish no events;
- ``policies/``: one routing policy per file behind ``RoutingPolicy``,
  built by name with ``make_policy``;
- ``router.Router``: owns the index, the worker table and the policy.
"""

from tokenmill.cluster.router.approx import ApproxIndex
from tokenmill.cluster.router.config import RouterConfig
from tokenmill.cluster.router.index import KVIndex
from tokenmill.cluster.router.policies import POLICIES, RoutingPolicy, make_policy
from tokenmill.cluster.router.router import Router, RouterMetrics
from tokenmill.cluster.router.types import (
    Decision,
    NoWorkerAvailable,
    OverlapIndex,
    RouteRequest,
    WorkerLoad,
    WorkerState,
)

__all__ = [
    "ApproxIndex", "Decision", "KVIndex", "NoWorkerAvailable", "OverlapIndex", "POLICIES", "RouteRequest",
    "Router", "RouterConfig", "RouterMetrics", "RoutingPolicy", "WorkerLoad", "WorkerState", "make_policy",
]
