"""Prometheus metrics, prefixed ``tokenmill:``, on a registry owned by one app.

Per-request latencies and token counts are observed by the server as outputs
stream by; engine gauges (running/waiting, KV blocks, prefix-cache hit rate,
preemptions) are read from ``engine.stats()`` at scrape time, so they are
never stale and cost nothing between scrapes.
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tokenmill.engine.client import ABORT_REASONS, EngineClient
from tokenmill.outputs import RequestOutput

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class EngineStatsCollector:
    """Reads the engine's gauges and cumulative counters when scraped."""

    def __init__(self, engine: EngineClient):
        self.engine = engine

    def collect(self):
        s = self.engine.stats()
        gauges = [
            ("num_requests_running", "Requests in the running batch.", s.num_running),
            ("num_requests_waiting", "Requests waiting for admission.", s.num_waiting),
            ("prefill_tokens_queued", "Prompt tokens admitted or waiting whose KV is not computed yet.",
             s.prefill_tokens_queued),
            ("kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).", s.kv_usage),
            ("kv_blocks_used", "KV cache blocks held by requests.", s.kv_blocks_used),
            ("kv_blocks_total", "KV cache blocks allocated.", s.kv_blocks_total),
            ("prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / tokens looked up.",
             s.prefix_hit_rate),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(f"tokenmill:{name}", doc, value=value)
        counters = [
            ("num_preemptions", "Requests preempted by the scheduler.", s.num_preemptions),
            ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache (once per admission).",
             s.prefix_cache_queries),
            ("prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_cache_hits),
            ("forward_retries", "Steps whose forward pass raised and was retried without the suspect requests.",
             s.forward_retries),
        ]
        for name, doc, value in counters:
            yield CounterMetricFamily(f"tokenmill:{name}", doc, value=value)
        failures = CounterMetricFamily("tokenmill:request_failures",
                                       "Requests the engine failed on their own (the rest of the step went on), "
                                       "by stage.", labels=["stage"])
        for stage in ("forward", "sampling", "output"):
            failures.add_metric([stage], s.request_failures.get(stage, 0))
        yield failures
        aborted = CounterMetricFamily("tokenmill:aborted_requests",
                                      "Requests ended before they finished, by reason: " +
                                      "; ".join(f"{k}: {v}" for k, v in ABORT_REASONS.items()) + ".",
                                      labels=["reason"])
        for reason in ABORT_REASONS:
            aborted.add_metric([reason], s.aborted_requests.get(reason, 0))
        yield aborted
        yield from step_metrics(s)
        yield from spec_decode_metrics(s)
        yield from cluster_metrics(self.engine)


def step_metrics(s):
    """The engine core's steps and their wall time, by kind (engine/step_stats.py); a cluster's
    summed over its workers."""
    from tokenmill.engine.step_stats import STEP_KINDS

    steps = CounterMetricFamily("tokenmill:engine_steps", "Engine steps run, by kind: prefill (computed prompt "
                                "tokens, beside any decodes) or decode (only running requests' next tokens).",
                                labels=["kind"])
    seconds = CounterMetricFamily("tokenmill:engine_step_seconds", "Wall seconds of those steps (scheduling, "
                                  "forward, sampling; not output processing), by kind.", labels=["kind"])
    cpu = CounterMetricFamily("tokenmill:engine_step_cpu_seconds", "CPU seconds of the stepping thread within "
                              "those steps, by kind: over their wall seconds, the share of the steps it was on a "
                              "core.", labels=["kind"])
    for kind in STEP_KINDS:
        steps.add_metric([kind], s.engine_steps.get(kind, 0))
        seconds.add_metric([kind], s.engine_step_seconds.get(kind, 0.0))
        cpu.add_metric([kind], s.engine_step_cpu_seconds.get(kind, 0.0))
    yield steps
    yield seconds
    yield cpu


def spec_decode_metrics(s):
    """Speculative decoding (spec/drafting.py): drafts verified and accepted, by position."""
    for name, doc, value in (
            ("spec_decode_num_draft_tokens", "Draft tokens verified.", s.spec_draft_tokens),
            ("spec_decode_num_accepted_tokens", "Draft tokens the model confirmed.", s.spec_accepted_tokens),
            ("spec_decode_num_verifications", "Request steps that verified drafts (mean accepted length = "
             "(accepted + verifications) / verifications).", s.spec_verifications)):
        yield CounterMetricFamily(f"tokenmill:{name}", doc, value=value)
    per_position = CounterMetricFamily("tokenmill:spec_decode_num_accepted_tokens_per_pos",
                                       "Draft tokens confirmed, by position in the draft (0: the first).",
                                       labels=["position"])
    for position, n in sorted(s.spec_accepted_per_position.items(), key=lambda kv: int(kv[0])):
        per_position.add_metric([position], n)
    yield per_position


def cluster_metrics(engine):
    """A ClusterEngine's router decisions, overlaps, migrations and per-worker load."""
    router = getattr(engine, "router", None)
    if router is None:
        return
    decisions = CounterMetricFamily("tokenmill:router_decisions", "Requests routed, by policy and worker.",
                                    labels=["policy", "worker"])
    for (policy, worker), n in sorted(router.metrics.decisions.items(), key=str):
        decisions.add_metric([policy, str(worker)], n)
    yield decisions
    yield GaugeMetricFamily("tokenmill:router_overlap_blocks",
                            "Prompt blocks already cached on the chosen worker, latest decision.",
                            value=router.metrics.last_overlap_blocks)
    yield CounterMetricFamily("tokenmill:migrations", "Requests moved to a live worker after theirs died.",
                              value=engine.num_migrations)
    yield from disagg_metrics(engine)
    per_worker = [("worker_alive", "1 if the worker answers, else 0.", lambda w: float(w["alive"])),
                  ("worker_kv_cache_usage_perc", "Fraction of the worker's KV blocks in use (0-1).",
                   lambda w: w["kv_usage"] or 0.0),
                  ("worker_num_requests_running", "Requests in the worker's running batch.",
                   lambda w: (w["load"] or {}).get("running", 0)),
                  ("worker_prefill_tokens_queued", "Prompt tokens queued for prefill on the worker.",
                   lambda w: (w["load"] or {}).get("prefill_tokens_queued", 0)),
                  ("worker_prefix_cache_hit_rate", "The worker's prefix-cache hit rate.",
                   lambda w: w["prefix_cache_hit_rate"] or 0.0)]
    workers = engine.describe_workers()
    for name, doc, value in per_worker:
        family = GaugeMetricFamily(f"tokenmill:{name}", doc, labels=["worker", "role"])
        for w in workers:
            family.add_metric([w["id"], w["role"]], value(w))
        yield family
    for name, doc, key in (("worker_engine_step_seconds", "Wall seconds of the worker's engine steps.",
                            "engine_step_seconds"),
                           ("worker_engine_step_cpu_seconds", "CPU seconds of the worker's stepping thread within "
                            "its steps: over their wall seconds, the share it was on a core.",
                            "engine_step_cpu_seconds")):
        family = CounterMetricFamily(f"tokenmill:{name}", doc, labels=["worker", "role"])
        for w in workers:
            family.add_metric([w["id"], w["role"]], w[key] or 0.0)
        yield family
    for name, doc, key in (("num_requests_running", "Requests running on the role's workers.", "running"),
                           ("num_requests_waiting", "Requests queued on the role's workers.", "waiting")):
        family = GaugeMetricFamily(f"tokenmill:role_{name}", doc, labels=["role"])
        for role in sorted({w["role"] for w in workers}):
            family.add_metric([role], sum((w["load"] or {}).get(key, 0) for w in workers if w["role"] == role))
        yield family


def disagg_metrics(engine):
    """Disaggregated serving: prefill decisions and KV transfers (cluster/disagg.py)."""
    if getattr(engine, "disagg", None) is None:
        return
    from tokenmill.cluster.disagg import DECISIONS

    m = engine.disagg_metrics
    decisions = CounterMetricFamily("tokenmill:disagg_prefill_decisions",
                                    "Where prompts were computed: remote (a prefill worker), local_short "
                                    "(uncached part under --disagg-min-prefill-tokens, or none), local_queue (prefill "
                                    "workers at --disagg-max-prefill-queue), local_no_prefill_worker.",
                                    labels=["decision"])
    for decision in DECISIONS:
        decisions.add_metric([decision], m.decisions.get(decision, 0))
    yield decisions
    for name, doc, value in (
            ("kv_transfers", "KV transfers completed (prefill -> decode worker).", m.transfers),
            ("kv_transfer_bytes", "Bytes of KV blocks transferred.", m.transfer_bytes),
            ("kv_transfer_blocks", "KV blocks transferred.", m.transfer_blocks),
            ("kv_transfer_blocks_skipped", "Prompt blocks not sent: the decode worker already held them.",
             m.blocks_skipped),
            ("kv_transfer_seconds", "Wall time of completed KV transfers, summed.", m.transfer_seconds),
            ("kv_transfer_failures", "KV transfer attempts that failed or timed out (each retried once).",
             m.transfer_failures),
            ("kv_transfer_local_fallbacks", "Requests prefilled on their decode worker after a failed transfer.",
             m.local_fallbacks)):
        yield CounterMetricFamily(f"tokenmill:{name}", doc, value=value)
    yield GaugeMetricFamily("tokenmill:kv_transfer_bandwidth_bytes_per_second",
                            "Mean bandwidth of completed KV transfers (bytes / seconds, both summed).",
                            value=m.bandwidth_bytes_per_s)


class ServerMetrics:
    def __init__(self, engine: EngineClient):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tokenmill:requests", "HTTP requests answered, by route and status code.",
                                ["route", "status"], registry=r)
        self.ttft = Histogram("tokenmill:time_to_first_token_seconds", "Time to first token.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("tokenmill:time_per_output_token_seconds",
                              "Time between consecutive output tokens.", buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("tokenmill:e2e_request_latency_seconds", "Arrival to last token.",
                             buckets=_E2E_BUCKETS, registry=r)
        self.prompt_tokens = Counter("tokenmill:prompt_tokens", "Prompt tokens of served requests.", registry=r)
        self.generation_tokens = Counter("tokenmill:generation_tokens", "Tokens generated for clients.",
                                         registry=r)
        r.register(EngineStatsCollector(engine))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def timer(self) -> RequestTimer:
        return RequestTimer(self)


class RequestTimer:
    """Latency bookkeeping for one generation request; call ``observe`` on
    every output the engine delivers for it."""

    def __init__(self, metrics: ServerMetrics):
        self.m = metrics
        self.start = time.perf_counter()
        self.last: float | None = None

    def observe(self, out: RequestOutput) -> None:
        now = time.perf_counter()
        n = len(out.new_token_ids)
        if self.last is None:
            self.m.ttft.observe(now - self.start)
            self.m.prompt_tokens.inc(out.num_prompt_tokens)
        elif n:
            # A step may deliver several tokens at once; spread the gap over them.
            self.m.tpot.observe((now - self.last) / n)
        if n or self.last is None:
            self.last = now
        self.m.generation_tokens.inc(n)
        if out.finished:
            self.m.e2e.observe(now - self.start)
