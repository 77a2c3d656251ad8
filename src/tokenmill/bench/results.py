"""The results of a benchmark run: per-query records, summary metrics, LoadGen's
verdict. Plain dataclasses that round-trip through JSON (``results.json``), so a
saved run can be reported, plotted and compared later without re-running.

Times are seconds on the benchmark client's monotonic clock, relative to the
run's start; latency figures in the summary are milliseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

RESULTS_FILE = "results.json"
SCHEMA_VERSION = 1


@dataclass
class QueryRecord:
    """One query as the client saw it."""

    sample_index: int
    issued_s: float
    """When the query was handed to the system under test."""
    first_token_s: float | None = None
    """When the first content token arrived (None: it never did)."""
    finished_s: float | None = None
    """When the last token (or the error) arrived."""
    output_tokens: int = 0
    """Output tokens counted on the client (the model's tokenizer for HTTP targets)."""
    usage_output_tokens: int | None = None
    """The server's own count (``usage.completion_tokens``); None when not reported."""
    prompt_tokens: int = 0
    error: str | None = None
    """Why the query failed; None when it succeeded."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.finished_s is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.issued_s

    @property
    def latency_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.issued_s

    @property
    def generated_tokens(self) -> int:
        """Tokens the server generated: its own count where it reported one, else
        the client's. Re-encoding an answer's text can merge neighbouring tokens
        (random synthetic prompts draw odd continuations), and a TPOT over the
        merged count would stretch the per-token time of every decode step."""
        return self.usage_output_tokens if self.usage_output_tokens is not None else self.output_tokens

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (LoadGen's definition:
        (end - first token) / (tokens - 1)) over ``generated_tokens``; None with
        fewer than 2 tokens."""
        n = self.generated_tokens
        if self.first_token_s is None or self.finished_s is None or n < 2:
            return None
        return (self.finished_s - self.first_token_s) / (n - 1)


@dataclass
class Percentiles:
    """Milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values_s: list[float]) -> "Percentiles | None":
        """From values in seconds; None when there are none."""
        if not values_s:
            return None
        ms = sorted(v * 1e3 for v in values_s)
        return cls(p50=percentile(ms, 50), p90=percentile(ms, 90), p99=percentile(ms, 99),
                   mean=math.fsum(ms) / len(ms), max=ms[-1])


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Verdict:
    """LoadGen's judgement of a run, read from mlperf_log_summary.txt."""

    result: str
    """'VALID' or 'INVALID' (accuracy runs: 'ACCURACY', not judged)."""
    checks: dict[str, bool] = field(default_factory=dict)
    """e.g. {'Performance constraints satisfied': True, 'Min duration satisfied': False}."""
    reasons: list[str] = field(default_factory=list)
    """Each failed check, and LoadGen's recommendations, in its words."""

    @property
    def valid(self) -> bool:
        return self.result == "VALID"


@dataclass
class Metrics:
    """Summary of one run (client-side measurements unless named loadgen_*)."""

    duration_s: float
    num_queries: int
    num_errors: int
    output_tokens: int
    tokens_per_s: float
    """Output tokens per second over the run."""
    tokens_per_s_per_device: float
    requests_per_s: float
    ttft_ms: Percentiles | None
    tpot_ms: Percentiles | None
    latency_ms: Percentiles | None
    goodput_rps: float
    """Requests per second that met both the TTFT and the TPOT limit."""
    good_fraction: float
    cost_per_million_tokens: float | None
    """USD per million output tokens at price_per_hour x devices; None without a price."""
    usage_mismatches: int = 0
    """Queries whose server-reported token count differs from the client's count."""
    usage_output_tokens: int | None = None
    """The server-reported output tokens summed, when every successful query
    carried a count (else None). Re-encoding random text can count fewer
    tokens than were generated (neighbours merge), so this is the figure to
    set against an in-process engine run, which counts token ids."""
    loadgen: dict = field(default_factory=dict)
    """LoadGen's own figures from its summary (tokens/s, TTFT/TPOT percentiles)."""
    prefix_cache_hit_rate: float | None = None
    """The server's prefix-cache hit rate over the run (its /metrics counters
    read before and after; bench/server_metrics.py); None when not exposed."""
    spec_acceptance_rate: float | None = None
    """Speculative decoding over the run: draft tokens accepted / verified (the
    target's own counters); None without speculation or counters."""
    spec_tokens_per_verification: float | None = None
    """Tokens a verification step appended on average (accepted drafts + one)."""
    engine_steps: int | None = None
    """Engine steps the target ran during the run (its counters, every worker's summed;
    engine/step_stats.py); None when not exposed."""
    engine_busy_s: float | None = None
    """Their wall seconds, summed over workers: over ``duration_s``, the share of the run
    the engines spent in steps."""
    engine_prefill_steps: int | None = None
    engine_prefill_busy_s: float | None = None
    """Of those, the steps that computed prompt tokens (beside any decodes) and their seconds."""
    engine_busy_cpu_s: float | None = None
    """The stepping threads' CPU seconds within those steps, summed over workers: over
    ``engine_busy_s``, the share of the steps' time they were on a core (the rest they waited
    for one: cores shared with other workers, the frontend or this client)."""
    engine_workers: dict | None = None
    """A cluster's workers over the run, each {"role", "busy_s", "busy_cpu_s"}: its steps' wall
    seconds and its stepping thread's CPU seconds within them (the server's per-worker counters);
    None for one engine."""
    client_cpu_s: float | None = None
    """CPU seconds this benchmark's own process used during the run, all its threads: LoadGen and
    the HTTP client, and with the in-process engine (``target.kind`` 'engine') the engine too."""
    host_cpus: int | None = None
    """Logical CPUs of the machine the benchmark ran on (``os.cpu_count()``)."""
    gc_pauses: dict | None = None
    """This process's garbage collections during the run, per generation
    ("gen0".."gen2": collections, total_ms, max_ms; engine/gc_heap.py): with
    the in-process engine, each one stopped the engine's steps too."""


@dataclass
class BenchResult:
    """A whole run; written as results.json in the run's folder."""

    target: dict
    """{'label', 'kind': 'engine' | 'openai', 'url', 'api': 'chat' | 'completions', 'model'}."""
    scenario: str
    """'offline' | 'server' | 'interactive' | 'singlestream'."""
    mode: str
    """'performance' | 'accuracy'."""
    settings: dict
    """Everything the run was configured with: target_qps, ttft_ms, tpot_ms,
    preset, min_duration_s, min_query_count, devices, price_per_hour, ..."""
    workload: dict
    """Workload name, description, params and stats()."""
    verdict: Verdict
    metrics: Metrics
    queries: list[QueryRecord]
    log_dir: str
    """Folder with LoadGen's logs (mlperf_log_summary.txt, mlperf_log_detail.txt, ...)."""
    created: str
    """ISO-8601 UTC time the run started."""
    accuracy: dict | None = None
    """Accuracy-mode scores, when the run was one."""
    t0_unix: float | None = None
    """Wall-clock time (Unix seconds) of the queries' time 0 (their ``*_s``
    fields count from it): lines them up with server logs or injected faults."""
    gc_stalls: list | None = None
    """The run's garbage collections of this process that took 1 ms or more:
    [generation, start (seconds on the queries' clock), milliseconds]."""
    engine_steps_file: str | None = None
    """With the in-process engine: the file in this folder that holds each of its steps during
    the run (``engine_steps.jsonl``, engine/step_log.py; what ``tokenmill sim --replay`` prices
    step by step); None for an HTTP target."""
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BenchResult":
        data = dict(data)
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"results: schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        data["verdict"] = Verdict(**data["verdict"])
        m = dict(data["metrics"])
        for key in ("ttft_ms", "tpot_ms", "latency_ms"):
            m[key] = Percentiles(**m[key]) if m.get(key) else None
        data["metrics"] = Metrics(**m)
        data["queries"] = [QueryRecord(**q) for q in data["queries"]]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / RESULTS_FILE
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path


def load_result(path: str | Path) -> BenchResult:
    """A results.json file, or a run folder holding one. ValueError names the file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"results: no such file {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"results: {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"results: {path} is not a tokenmill results file (not a JSON object)")
    try:
        return BenchResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:  # ValueError: e.g. a schema mismatch
        raise ValueError(f"results: {path} is not a tokenmill results file ({exc})") from None
