"""The server's own prefix-cache counters around a run (URL targets).

A client cannot see cache hits; the server's Prometheus counters can. The
runner reads them before and after the LoadGen test, so the hit rate it
reports is that of the run's own requests (as long as nothing else uses the
server meanwhile). Counter names of tokenmill and vLLM are both understood.
"""

from __future__ import annotations

import httpx

HIT_COUNTERS = ("tokenmill:prefix_cache_hits_total", "vllm:prefix_cache_hits_total")
QUERY_COUNTERS = ("tokenmill:prefix_cache_queries_total", "vllm:prefix_cache_queries_total")


def read_prefix_cache_counters(base_url: str, headers: dict[str, str] | None = None) -> tuple[float, float] | None:
    """(hits, queries) in prompt tokens, summed over label sets (per-engine
    series); None when the server has no /metrics or no such counters."""
    try:
        answer = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    return parse_prefix_cache_counters(answer.text) if answer.status_code == 200 else None


def parse_prefix_cache_counters(text: str) -> tuple[float, float] | None:
    """(hits, queries) from Prometheus text; None when either counter is absent."""
    hits = queries = None
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in HIT_COUNTERS:
            hits = (hits or 0.0) + float(line.rpartition(" ")[2])
        elif name in QUERY_COUNTERS:
            queries = (queries or 0.0) + float(line.rpartition(" ")[2])
    return None if hits is None or queries is None else (hits, queries)


def hit_rate_between(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """Prompt tokens found in the cache / looked up, between two readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
