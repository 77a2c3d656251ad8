"""The router's configuration (frozen; checked on construction)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.cluster.router.policies import POLICIES
from tokenmill.cluster.router.policies.kv import DEFAULT_OVERLAP_WEIGHT


@dataclass(frozen=True)
class RouterConfig:
    policy: str = "kv"
    """Which routing policy: one of ``POLICIES`` (round-robin, random, least-loaded, kv)."""
    overlap_weight: float = DEFAULT_OVERLAP_WEIGHT
    """kv: weight of the uncached-prefill term against the decode-load term (both in blocks).
    Higher favours cache hits (TTFT); lower favours spreading load (ITL)."""
    temperature: float = 0.0
    """kv: 0 picks the cheapest worker; > 0 samples softmax(-cost / temperature) (cost in blocks)."""
    block_size: int = 16
    """Tokens per KV block; must equal the workers' block size, or hashes never match."""
    approx_ttl_s: float = 120.0
    """Approximate mode: seconds a routed request's blocks are believed cached on its worker."""
    seed: int = 0
    """Seed of the random and kv (temperature > 0) policies' generators."""
    kv_events: bool = True
    """True: workers publish KV events and the index mirrors them (exact); False: the
    router predicts caches from its own decisions (approximate mode)."""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"policy: unknown policy {self.policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        _check_real("overlap_weight", self.overlap_weight, positive=False)
        _check_real("temperature", self.temperature, positive=False)
        _check_real("approx_ttl_s", self.approx_ttl_s, positive=True)
        if not _is_int(self.block_size) or self.block_size < 1:
            raise ValueError(f"block_size: must be a positive integer, got {self.block_size!r}")
        if not _is_int(self.seed):
            raise ValueError(f"seed: must be an integer, got {self.seed!r}")
        if not isinstance(self.kv_events, bool):
            raise ValueError(f"kv_events: must be a bool, got {self.kv_events!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_real(name: str, value, positive: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > 0 if positive else value >= 0)
    if not ok:
        raise ValueError(f"{name}: must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
