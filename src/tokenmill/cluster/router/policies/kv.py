"""kv: cache-aware routing weighed against load (the rule of NVIDIA Dynamo's KV router).

For each live worker W, in blocks (the engine's KV block size, the same unit
on both sides of the sum):

    cost(W) = overlap_weight * (len(request.block_hashes) - overlap(W))
              + max(W.load.kv_blocks_used, W.load.routed_blocks)

- the first term is the prefill W would have to do: the request's full blocks
  that are NOT already cached there (overlap = leading blocks W holds, read
  from the router's index, exact or approximate). The trailing partial block
  is left out: it is never cached anywhere, so it would add the same constant
  to every worker and change neither the argmin nor the softmax;
- the second term is W's decode load: the larger of ``routed_blocks`` (the
  prompt blocks of the requests the router sent W that have not ended: known
  at once and counting requests still queued there, so a burst is not all sent
  to the worker that looked idle in its last report) and ``kv_blocks_used``, the KV blocks held by
  its in-flight requests (EngineStats.kv_blocks_used, i.e. blocks with a
  reference; cached-but-free blocks are not counted, since they cost nothing
  and are exactly what the first term rewards). It is the figure every engine
  reports, it grows with both the number and the length of the sequences W is
  decoding, and it is what Dynamo calls active blocks. Waiting requests are
  not in it (they hold no blocks yet); ``least-loaded`` looks at queues.

Lowest cost wins. ``temperature`` > 0 samples W with probability
proportional to exp(-cost(W) / temperature) instead (temperature is in blocks:
a worker 1 block costlier is e^(-1/temperature) times as likely), from a
seeded generator. At temperature 0, ties (equal cost) go to the worker picked
by a stable hash of the request's session hint among the tied ones (so one
user's turns stick), or to the first tied worker in table order without a hint.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

from tokenmill.cluster.router.types import (
    Decision,
    OverlapIndex,
    RouteRequest,
    WorkerLoad,
    WorkerState,
    alive_workers,
)

DEFAULT_OVERLAP_WEIGHT = 4.0
"""An uncached prompt block costs as much as 4 blocks of decode load. Dynamo's
default is 1.0; measured here (docs/PERFORMANCE.md: 2 CPU workers, 16 shared
1,024-token prefixes that do not all fit one worker's cache), 1.0 let ordinary
load swings of one request move a prefix's requests off the worker holding it
(prefix-cache hit rate 71.5% vs round-robin's 65.9%, TTFT p90 0.74x), where 4.0
kept them there (hit rate 90.3%, TTFT p90 0.30x) at the same throughput. A
request in flight weighs its whole prompt in the load term, though after its
prefill it mostly costs decode steps; the heavier weight corrects for that."""

TIE_TOLERANCE = 1e-9
"""Relative slack under which two costs count as equal (costs are sums of
float multiples of whole blocks, so exact ties can differ by rounding)."""


def kv_cost(num_blocks: int, overlap_blocks: int, load: WorkerLoad, overlap_weight: float) -> float:
    """The cost in blocks of sending a ``num_blocks``-block request to a worker (see module doc)."""
    return overlap_weight * (num_blocks - overlap_blocks) + max(load.kv_blocks_used, load.routed_blocks)


def session_pick(session: str, n: int) -> int:
    """A stable index in [0, n) for a session: blake2b, not ``hash()``, which is
    salted per process (every frontend replica must make the same pick)."""
    digest = hashlib.blake2b(session.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % n


class KvPolicy:
    name = "kv"

    def __init__(self, index: OverlapIndex, *, overlap_weight: float = DEFAULT_OVERLAP_WEIGHT, temperature: float = 0.0,
                 seed: int = 0):
        if not (overlap_weight >= 0 and math.isfinite(overlap_weight)):
            raise ValueError(f"overlap_weight: must be a finite number >= 0, got {overlap_weight}")
        if not (temperature >= 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature: must be a finite number >= 0, got {temperature}")
        self.index = index
        self.overlap_weight = overlap_weight
        self.temperature = temperature
        self._rng = random.Random(seed)

    def choose(self, request: RouteRequest, workers: Sequence[WorkerState]) -> Decision:
        live = alive_workers(workers)
        overlaps = self.index.overlap(request.block_hashes)
        n = len(request.block_hashes)
        costs = [kv_cost(n, overlaps.get(w.worker_id, 0), w.load, self.overlap_weight) for w in live]
        i = self._sample(costs) if self.temperature > 0 else _argmin(costs, request.session)
        chosen = live[i].worker_id
        return Decision(chosen, overlaps.get(chosen, 0), costs[i])

    def _sample(self, costs: list[float]) -> int:
        """An index drawn with probability softmax(-cost / temperature)."""
        best = min(costs)  # shift by the minimum: the best weight is 1, none overflows
        weights = [math.exp(-(c - best) / self.temperature) for c in costs]
        return self._rng.choices(range(len(costs)), weights=weights)[0]


def _argmin(costs: list[float], session: str | None) -> int:
    best = min(costs)
    slack = TIE_TOLERANCE * max(1.0, abs(best))
    tied = [i for i, c in enumerate(costs) if c <= best + slack]
    return tied[session_pick(session, len(tied))] if session is not None else tied[0]
