"""The approximate KV index: overlap predicted from the router's own decisions.

For engines that publish no KV events. Each routing decision is recorded as
"worker W was sent these block hashes at time t", on the bet that W computed
and cached them; the bet is trusted for ``ttl_s`` seconds, then forgotten
(by then the worker may have evicted them). Sending the same prefix again
renews it. Same ``overlap()`` query as the exact index (it reuses its
``BlockHolders``), so the kv policy cannot tell them apart.

Expiry: with a fixed TTL and a clock that never steps back, the order in
which (worker, hash) entries were last recorded is also their expiry order,
so an insertion-ordered dict is the expiry queue: purging pops from its front
(amortised O(1) per entry). A clock that steps back only delays expiry.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from tokenmill.cluster.router.index import BlockHolders
from tokenmill.cluster.router.types import WorkerId


class ApproxIndex:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        """``ttl_s``: seconds a recorded block is believed cached; ``clock``: seconds, monotonic."""
        if not (ttl_s > 0 and math.isfinite(ttl_s)):
            raise ValueError(f"approx_ttl_s: must be a positive number of seconds, got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        self._blocks = BlockHolders()
        # (worker, hash) -> expiry time in clock seconds; invariant: ordered by expiry time,
        # and holds exactly the (worker, hash) pairs in _blocks.
        self._expiry: OrderedDict[tuple[WorkerId, int], float] = OrderedDict()

    def record(self, worker_id: WorkerId, block_hashes: Sequence[int]) -> None:
        """``worker_id`` was just sent a request with these block hashes."""
        now = self._clock()
        self._purge(now)
        expires = now + self.ttl_s
        for h in block_hashes:
            key = (worker_id, h)
            self._expiry.pop(key, None)  # re-insert at the back: renewed entries expire last
            self._expiry[key] = expires
        self._blocks.add(worker_id, block_hashes)

    def overlap(self, block_hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Worker -> leading blocks of the request it was recently sent (absent = 0)."""
        self._purge(self._clock())
        return self._blocks.overlap(block_hashes)

    def remove_worker(self, worker_id: WorkerId) -> None:
        for h in self._blocks.hashes_of(worker_id):
            del self._expiry[(worker_id, h)]
        self._blocks.drop_worker(worker_id)

    def hashes_of(self, worker_id: WorkerId) -> frozenset[int]:
        """The unexpired hashes recorded for a worker."""
        self._purge(self._clock())
        return self._blocks.hashes_of(worker_id)

    def __len__(self) -> int:
        """Unexpired (worker, hash) entries (without purging first)."""
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        """Drop entries whose expiry time is <= now (an entry lives for [t, t + ttl_s))."""
        while self._expiry:
            (worker_id, h), expires = next(iter(self._expiry.items()))
            if expires > now:
                return
            self._expiry.popitem(last=False)
            self._blocks.discard(worker_id, (h,))
