"""The server's own counters around a run (URL targets): prefix cache,
speculative decoding and the engine's steps.

A client cannot see cache hits or accepted drafts; the server's Prometheus
counters can. The runner reads them before and after the LoadGen test, so the
rates it reports are those of the run's own requests (as long as nothing else
uses the server meanwhile). Counter names of tokenmill and vLLM are both
understood.
"""

from __future__ import annotations

import re

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


WORKER_COUNTERS = {"tokenmill:worker_engine_step_seconds_total": "busy_s",
                   "tokenmill:worker_engine_step_cpu_seconds_total": "busy_cpu_s"}
"""A cluster's counters per worker (labels worker, role) -> our name; read into keys
``worker|<worker>|<role>|<name>`` beside COUNTERS."""
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_counters(text: str) -> dict[str, float]:
    """The COUNTERS present in Prometheus text, and WORKER_COUNTERS per worker."""
    names: dict[str, list[str]] = {}
    for ours, proms in COUNTERS.items():
        for prom in proms:
            names.setdefault(prom, []).append(ours)
    out: dict[str, float] = {}
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        bare = sample.split("{", 1)[0]
        for key in {bare, sample}:  # the bare name, and the sample with its labels
            for ours in names.get(key, ()):
                out[ours] = out.get(ours, 0.0) + float(value)
        if bare in WORKER_COUNTERS:
            labels = dict(_LABEL.findall(sample))
            out[f"worker|{labels.get('worker')}|{labels.get('role')}|{WORKER_COUNTERS[bare]}"] = float(value)
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
    worker's summed, and a cluster's per worker); None where the counters are missing or did
    not move."""
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
            "engine_busy_cpu_s": delta("engine_step_cpu_seconds"),
            "engine_workers": workers_between(before, after)}


def workers_between(before: dict[str, float], after: dict[str, float]) -> dict[str, dict] | None:
    """Each cluster worker's steps over a run: {worker: {"role", "busy_s", "busy_cpu_s"}} (its
    counters' deltas; a worker that restarted meanwhile counts from its restart); None for a
    target without per-worker counters."""
    out: dict[str, dict] = {}
    for key, value in after.items():
        if not key.startswith("worker|"):
            continue
        _, worker, role, name = key.split("|", 3)
        start = before.get(key, 0.0)
        out.setdefault(worker, {"role": role})[name] = value - start if value >= start else value
    return out or None
