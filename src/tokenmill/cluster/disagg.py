"""Disaggregated prefill/decode: where a prompt is computed, and what its move costs.

With prefill workers in the cluster, each request is first routed to a decode
worker (by the router's policy over decode workers: load, and the blocks it
already caches); then ``decide`` says whether that decode worker computes the
prompt itself or a prefill worker does and sends the KV over (Dynamo's
conditional disaggregation):

- local when the part of the prompt the decode worker does not hold is shorter
  than ``min_prefill_tokens``: moving a short prefill costs more than it saves;
  and local when it holds the whole prompt (a repeat), even at 0: nothing is
  left to compute elsewhere;
- local when every live prefill worker already has ``max_prefill_queue``
  prefills in flight: waiting in that queue would cost more TTFT than
  interleaving the prefill with decode steps;
- local when no prefill worker is alive;
- remote otherwise.

``DisaggMetrics`` counts the decisions and the transfers (bytes, blocks,
seconds, failures, fallbacks); the server exports them on /metrics.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

DECISIONS = ("remote", "local_short", "local_queue", "local_no_prefill_worker")
"""Where a prompt was computed, and why (the metric's label values)."""


@dataclass(frozen=True)
class DisaggConfig:
    min_prefill_tokens: int = 256
    """Uncached prompt tokens below which the decode worker prefills locally."""
    max_prefill_queue: int = 4
    """Prefills in flight on the least busy prefill worker at which new ones stay local."""
    transfer_timeout_s: float = 30.0
    """Seconds each call of a KV transfer may take before it counts as failed."""

    def __post_init__(self) -> None:
        if self.min_prefill_tokens < 0:
            raise ValueError(f"disagg_min_prefill_tokens: must be >= 0, got {self.min_prefill_tokens}")
        if self.max_prefill_queue < 1:
            raise ValueError(f"disagg_max_prefill_queue: must be >= 1, got {self.max_prefill_queue}")
        if not (self.transfer_timeout_s > 0 and math.isfinite(self.transfer_timeout_s)):
            raise ValueError(f"transfer_timeout_s: must be a positive number, got {self.transfer_timeout_s}")


def decide(config: DisaggConfig, prompt_tokens: int, decode_overlap_blocks: int, block_size: int,
           prefill_queues: list[int]) -> str:
    """One of DECISIONS for a prompt of ``prompt_tokens``, of which the chosen
    decode worker caches ``decode_overlap_blocks`` leading blocks;
    ``prefill_queues``: prefills in flight per live prefill worker."""
    if not prefill_queues:
        return "local_no_prefill_worker"
    uncached = prompt_tokens - decode_overlap_blocks * block_size
    if uncached < max(config.min_prefill_tokens, 1):
        return "local_short"
    if min(prefill_queues) >= config.max_prefill_queue:
        return "local_queue"
    return "remote"


@dataclass
class DisaggMetrics:
    decisions: Counter = field(default_factory=Counter)
    """DECISIONS value -> requests."""
    transfers: int = 0
    """KV transfers completed (blocks landed on the decode worker)."""
    transfer_bytes: int = 0
    transfer_blocks: int = 0
    """Blocks sent."""
    blocks_skipped: int = 0
    """Prompt blocks not sent because the decode worker already held them."""
    transfer_seconds: float = 0.0
    """Wall time of completed transfers (export + fetch + import call), summed."""
    transfer_failures: int = 0
    """Transfer attempts that failed or timed out (each is retried once)."""
    local_fallbacks: int = 0
    """Requests whose transfer failed twice (or whose prefill worker lost the blocks): prefilled locally."""

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.transfer_bytes / self.transfer_seconds if self.transfer_seconds > 0 else 0.0
