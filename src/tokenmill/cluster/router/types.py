"""The router's data: what a request asks, what a worker carries, what a policy decides."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tokenmill.engine.client import EngineStats

WorkerId = Hashable
"""Any hashable name for a worker (a string, an int, a Ray actor's id)."""


class NoWorkerAvailable(RuntimeError):
    """Raised by a policy asked to choose when no live worker is left."""


@dataclass(frozen=True)
class RouteRequest:
    block_hashes: tuple[int, ...]
    """Chained hashes of the prompt's full blocks (engine/block_hash.py), in prompt order."""
    num_tokens: int
    """Prompt length in tokens (the last, partial block has no hash)."""
    session: str | None = None
    """Who is asking (e.g. the OpenAI ``user`` field): breaks ties so one user's turns stick."""

    def __post_init__(self):
        if self.num_tokens < 0:
            raise ValueError(f"num_tokens: must be >= 0, got {self.num_tokens}")


@dataclass(frozen=True)
class WorkerLoad:
    """A worker's load, as its engine last reported it (counts, not rates)."""

    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    """KV blocks held by in-flight requests (cached-but-free blocks are not counted)."""
    kv_blocks_total: int = 0
    """The worker's KV pool size in blocks; 0 when unknown."""
    prefill_tokens_queued: int = 0
    """Prompt tokens admitted but not yet computed (0 when the engine does not say)."""
    routed_blocks: int = 0
    """Prompt blocks of the requests the router sent there that have not ended
    (Router.route adds, Router.release subtracts): known at once, and counting
    requests still waiting in the worker's queue, which hold no KV blocks yet."""

    def __post_init__(self):
        for name in ("num_running", "num_waiting", "kv_blocks_used", "kv_blocks_total", "prefill_tokens_queued",
                     "routed_blocks"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.kv_blocks_total and self.kv_blocks_used > self.kv_blocks_total:
            raise ValueError(f"kv_blocks_used: {self.kv_blocks_used} exceeds kv_blocks_total {self.kv_blocks_total}")

    @classmethod
    def from_stats(cls, stats: EngineStats) -> WorkerLoad:
        """The load part of an engine's ``EngineStats`` snapshot."""
        return cls(stats.num_running, stats.num_waiting, stats.kv_blocks_used, stats.kv_blocks_total,
                   stats.prefill_tokens_queued)


@dataclass(frozen=True)
class WorkerState:
    worker_id: WorkerId
    load: WorkerLoad = field(default_factory=WorkerLoad)
    alive: bool = True
    """A dead worker stays in the table (for metrics, or until it restarts) but is never chosen."""


@dataclass(frozen=True)
class Decision:
    worker_id: WorkerId
    overlap_blocks: int | None
    """Leading request blocks already cached on the chosen worker; None when the policy did
    not look (the Router fills it in from its index, so the metric exists for every policy)."""
    score: float
    """The policy's figure for the chosen worker, lower is better: kv -> its cost in blocks,
    least-loaded -> running + waiting, round-robin and random -> 0.0."""


class OverlapIndex(Protocol):
    """What the kv policy reads: ``KVIndex`` (from events) or ``ApproxIndex`` (from decisions)."""

    def overlap(self, block_hashes: Sequence[int]) -> dict[WorkerId, int]: ...

    def remove_worker(self, worker_id: WorkerId) -> None: ...


def alive_workers(workers: Sequence[WorkerState]) -> list[WorkerState]:
    """The live workers, in the given order; NoWorkerAvailable when there are none."""
    live = [w for w in workers if w.alive]
    if not live:
        raise NoWorkerAvailable(f"no live worker among {len(workers)} registered")
    return live
