"""The Router: the worker table, the KV index and the policy, behind one ``route`` call.

Not thread-safe: one frontend event loop owns it (every method is short and
does no I/O). Workers live in a table in the order they were added; that order
is the policies' final tie-break.

Index lifecycle:
- exact mode (``RouterConfig.kv_events``): ``apply_kv_events`` mirrors each
  worker's event batches into a ``KVIndex``; batches of unknown or dead
  workers are dropped, so a late batch cannot resurrect a removed worker;
- approximate mode: ``route`` records every decision in an ``ApproxIndex``
  (the chosen worker is assumed to cache the request's blocks for
  ``approx_ttl_s``);
- a worker marked dead or removed leaves the index at once (its cache is gone
  or unreachable); a revived worker relearns from scratch.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tokenmill.cluster.router.approx import ApproxIndex
from tokenmill.cluster.router.config import RouterConfig
from tokenmill.cluster.router.index import KVIndex
from tokenmill.cluster.router.policies import make_policy
from tokenmill.cluster.router.types import Decision, RouteRequest, WorkerId, WorkerLoad, WorkerState
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.kv_events import KVEventBatch


@dataclass
class RouterMetrics:
    """Plain counters; the server exports them (e.g. ``router_overlap_blocks``)."""

    decisions: Counter = field(default_factory=Counter)
    """(policy name, worker id) -> requests routed there."""
    last_overlap_blocks: int = 0
    """Overlap in blocks of the latest decision."""
    overlap_blocks: Counter = field(default_factory=Counter)
    """Overlap in blocks -> decisions with that overlap (a histogram, one bucket per block count)."""


class Router:
    def __init__(self, config: RouterConfig | None = None, *, clock: Callable[[], float] = time.monotonic):
        """``clock``: monotonic seconds, read by the approximate index only (tests inject one)."""
        self.config = config if config is not None else RouterConfig()
        self.index: KVIndex | ApproxIndex = (
            KVIndex() if self.config.kv_events else ApproxIndex(self.config.approx_ttl_s, clock))
        self.policy = make_policy(self.config.policy, **self._policy_options())
        self.metrics = RouterMetrics()
        self._workers: dict[WorkerId, WorkerState] = {}  # in the order added
        self._routed: Counter = Counter()  # worker -> prompt blocks of its requests not yet released

    def _policy_options(self) -> dict:
        c = self.config
        if c.policy == "kv":
            return dict(index=self.index, overlap_weight=c.overlap_weight, temperature=c.temperature, seed=c.seed)
        return dict(seed=c.seed) if c.policy == "random" else {}

    # ---- the worker table --------------------------------------------------------

    @property
    def workers(self) -> list[WorkerState]:
        """The table in order, dead workers included."""
        return list(self._workers.values())

    def add_worker(self, worker_id: WorkerId, load: WorkerLoad | None = None) -> None:
        if worker_id in self._workers:
            raise ValueError(f"worker_id: {worker_id!r} is already registered")
        self.index.remove_worker(worker_id)  # no leftovers from an earlier worker of that name
        self._workers[worker_id] = WorkerState(worker_id, load if load is not None else WorkerLoad())

    def remove_worker(self, worker_id: WorkerId) -> None:
        self._get(worker_id)
        del self._workers[worker_id]
        self.index.remove_worker(worker_id)

    def mark_dead(self, worker_id: WorkerId) -> None:
        self._workers[worker_id] = replace(self._get(worker_id), alive=False)
        self.index.remove_worker(worker_id)
        self._routed.pop(worker_id, None)  # its requests are gone with it (or moved, and counted anew)

    def mark_alive(self, worker_id: WorkerId) -> None:
        self._workers[worker_id] = replace(self._get(worker_id), alive=True)

    def update_load(self, worker_id: WorkerId, load: WorkerLoad) -> None:
        """A fresh load report (e.g. ``WorkerLoad.from_stats(engine_stats)``)."""
        self._workers[worker_id] = replace(self._get(worker_id), load=load)

    def _get(self, worker_id: WorkerId) -> WorkerState:
        state = self._workers.get(worker_id)
        if state is None:
            raise ValueError(f"worker_id: unknown worker {worker_id!r}")
        return state

    # ---- KV events and routing -----------------------------------------------------

    def apply_kv_events(self, worker_id: WorkerId, batch: KVEventBatch) -> bool:
        """Mirror a worker's KV event batch; False (dropped) if the worker is unknown or dead."""
        if not isinstance(self.index, KVIndex):
            raise ValueError("kv_events: this router is in approximate mode (RouterConfig.kv_events=False)")
        state = self._workers.get(worker_id)
        if state is None or not state.alive:
            return False
        self.index.apply(worker_id, batch)
        return True

    def route(self, token_ids: Sequence[int], session: str | None = None) -> Decision:
        """Pick the worker for a prompt; raises NoWorkerAvailable when none is alive."""
        if len(token_ids) == 0:
            raise ValueError("token_ids: empty prompt")
        hashes = tuple(hash_full_blocks(list(token_ids), self.config.block_size))  # one per full block
        workers = [replace(w, load=replace(w.load, routed_blocks=self._routed[w.worker_id]))
                   for w in self._workers.values()]
        decision = self.policy.choose(RouteRequest(hashes, len(token_ids), session), workers)
        self._routed[decision.worker_id] += self.blocks_of(len(token_ids))
        if decision.overlap_blocks is None:  # a policy that ignores caches: measure its luck anyway
            overlap = self.index.overlap(hashes).get(decision.worker_id, 0)
            decision = replace(decision, overlap_blocks=overlap)
        if isinstance(self.index, ApproxIndex):
            self.index.record(decision.worker_id, hashes)
        self._count(decision)
        return decision

    def blocks_of(self, num_tokens: int) -> int:
        """KV blocks ``num_tokens`` tokens take."""
        return -(-num_tokens // self.config.block_size)

    def release(self, worker_id: WorkerId, num_tokens: int) -> None:
        """A request routed to ``worker_id`` with ``num_tokens`` prompt tokens ended."""
        left = self._routed[worker_id] - self.blocks_of(num_tokens)
        if left > 0:
            self._routed[worker_id] = left
        else:
            self._routed.pop(worker_id, None)

    def _count(self, decision: Decision) -> None:
        self.metrics.decisions[(self.policy.name, decision.worker_id)] += 1
        self.metrics.last_overlap_blocks = decision.overlap_blocks
        self.metrics.overlap_blocks[decision.overlap_blocks] += 1
