"""The server's own counters around a run (URL targets): prefix cache,
speculative decoding and the engine's steps.

A client cannot see cache hits or accepted drafts; the server's Prometheus
counters can. The runner reads them before and after the LoadGen test, so the
rates it reports are those of the run's own requests (as long as nothing else
uses the server meanwhile). Counter names of tokenmill and vLLM are both
understood.
"""

from __future__ import annotations

import httpx

HIT_COUNTERS = ("tokenmill:prefix_cache_hits_total", "vllm:prefix_cache_hits_total")
QUERY_COUNTERS = ("tokenmill:prefix_cache_queries_total", "vllm:prefix_cache_queries_total")
COUNTERS = {
    "prefix_hits": HIT_COUNTERS,
    "prefix_queries": QUERY_COUNTERS,
    "spec_drafts": ("tokenmill:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"),
    "spec_accepted": ("tokenmill:spec_decode_num_accepted_tokens_total",
                      "vllm:spec_decode_num_accepted_tokens_total"),
    "spec_verifications": ("tokenmill:spec_decode_num_verifications_total", "vllm:spec_decode_num_drafts_total"),
    "engine_steps": ("tokenmill:engine_steps_total",),
    "engine_step_seconds": ("tokenmill:engine_step_seconds_total",),
    "engine_prefill_steps": ('tokenmill:engine_steps_total{kind="prefill"}',),
    "engine_prefill_step_seconds": ('tokenmill:engine_step_seconds_total{kind="prefill"}',),
    "engine_step_cpu_seconds": ("tokenmill:engine_step_cpu_seconds_total",),
}
"""Our name -> the Prometheus counters (tokenmill's, vLLM's) that hold it: a bare name sums
every label set, a name with its labels only that sample."""


def parse_counters(text: str) -> dict[str, float]:
    """The COUNTERS present in Prometheus text."""
    names: dict[str, list[str]] = {}
    for ours, proms in COUNTERS.items():
        for prom in proms:
            names.setdefault(prom, []).append(ours)
    out: dict[str, float] = {}
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        for key in {sample.split("{", 1)[0], sample}:  # the bare name, and the sample with its labels
            for ours in names.get(key, ()):
                out[ours] = out.get(ours, 0.0) + float(value)
    return out


def read_counters(base_url: str, headers: dict[str, str] | None = None) -> dict[str, float] | None:
    """The server's COUNTERS; None when it has no /metrics."""
    try:
        answer = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    except httpx.HTTPError:
        return None
    return parse_counters(answer.text) if answer.status_code == 200 else None


def rates_between(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float | None]:
    """Over a run: prefix-cache hit rate, drafts accepted / verified, tokens a
    verification step appended (accepted drafts + the model's own token), and the
    engine's steps, their seconds and their stepping threads' CPU seconds (every
    worker's summed); None where the counters are missing or did not move."""
    before, after = before or {}, after or {}

    def delta(name: str) -> float | None:
        return after[name] - before[name] if name in before and name in after else None

    hits, queries = delta("prefix_hits"), delta("prefix_queries")
    drafts, accepted, steps = delta("spec_drafts"), delta("spec_accepted"), delta("spec_verifications")
    return {"prefix_cache_hit_rate": hits / queries if hits is not None and queries else None,
            "spec_acceptance_rate": accepted / drafts if accepted is not None and drafts else None,
            "spec_tokens_per_verification": (accepted + steps) / steps if accepted is not None and steps else None,
            "engine_steps": int(n_steps) if (n_steps := delta("engine_steps")) else None,
            "engine_busy_s": delta("engine_step_seconds") or None,
            "engine_prefill_steps": None if (n_prefill := delta("engine_prefill_steps")) is None else int(n_prefill),
            "engine_prefill_busy_s": delta("engine_prefill_step_seconds"),
            "engine_busy_cpu_s": delta("engine_step_cpu_seconds")}
