"""Replay a measured ``tokenmill bench`` run in the simulator (``tokenmill sim --replay RESULTS``).

A Server run's p99 is its few slowest queries, and which queries are slow
depends on the arrival times LoadGen drew: a simulated Poisson stream of the
same rate is another draw, and its p99 differs by as much as the cost model's
error. Replaying the run's own queries removes that: each query arrives when
LoadGen issued it, with the prompt tokens it had and the output tokens it got
(the server's count where it reported one), so simulated and measured
percentiles compare the same requests. It also answers "what would this
measured traffic do on other hardware" (``--hardware``).

Prefix cache: LoadGen issues a dataset's samples again once it has issued
each (a run of more queries than samples), and ``tokenmill serve`` caches
prompts by default. Unless ``prefix_caching`` is off, each sample's prompt is
replayed as a prefix of its own (sim/serving.py ``SimRequest.prefix_group``):
a query whose sample was issued before hits what the replica serving it still
caches of that prompt, in whole blocks and never all of it (the engine computes
at least its last token), evicted as the engine's block pool evicts
(sim/prefix_cache.py) and held only on the replica that computed it; the run's
own measured hit rate is printed beside the simulated one. (Until 2026-12-01,
forty-ninth session, a repeat was replayed with its whole prompt cached, found on
every replica and never evicted: an upper bound.) A run of the shared-prefix
workload (`tokenmill bench --workload shared-prefix`) is replayed with its
prefixes instead: sample i starts with system prompt i mod ``num_prefixes``, as
that workload lays its samples out, of ``prefix_len`` tokens; a request has one
group, and of a shared-prefix prompt all but its question's few blocks are the
shared prefix anyway (those few a repeat would hit are not counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenmill.bench.results import BenchResult, load_result
from tokenmill.engine.step_log import LoggedStep, load_steps
from tokenmill.sim.serving import SimRequest


@dataclass(frozen=True)
class Trace:
    """The queries of one measured run, as the simulator's requests."""

    requests: tuple[SimRequest, ...]
    """In issue order; arrival 0 is the first query's issue."""
    result: BenchResult
    skipped: int
    """Failed queries (or ones that produced no token) left out."""
    repeats: int
    """Queries whose sample had been issued before in the run (replayed as prefix hits when caching is on)."""
    steps: list[LoggedStep] | None = None
    """The engine's own steps during the run (sim/served_steps.py prices them): those the bench kept
    (the in-process engine's engine_steps.jsonl), or a server's step file's within the run; None where
    neither was given."""
    repeated_prompt_tokens: int = 0
    """Prompt tokens of the queries whose sample was issued before: what their hits could reach at most."""
    worker_steps: dict[str, list[LoggedStep]] | None = None
    """With several step files (a cluster's workers'), each file's steps of ``steps``, by the worker
    name its path ends with (``steps.jsonl.prefill-0``: ``prefill-0``); None otherwise."""

    @property
    def repeated_prompt_share(self) -> float:
        """``repeated_prompt_tokens`` over all prompt tokens."""
        total = sum(r.prompt_tokens for r in self.requests)
        return self.repeated_prompt_tokens / total if total else 0.0


def load_trace(path: str | Path, prefix_caching: bool = True, step_log: list | str | Path | None = None) -> Trace:
    """The successful queries of the bench run at ``path`` (results.json or its folder); ``step_log``: a
    server's step file (`tokenmill serve --step-log`), or a cluster's workers' files, whose steps within
    the run take the place of any the run kept."""
    result = load_result(path)
    done = sorted((q for q in result.queries if q.ok and q.first_token_s is not None), key=lambda q: q.issued_s)
    done = [q for q in done if q.generated_tokens >= 1 and q.prompt_tokens >= 1]
    if not done:
        raise ValueError(f"--replay: {path} holds no successful query with its prompt and output token counts")
    params = result.workload.get("params", {})
    prefixes = params["num_prefixes"] if prefix_caching and params.get("workload") == "shared-prefix" else 0
    t0, seen, repeats, repeated_tokens, requests = done[0].issued_s, set(), 0, 0, []
    for q in done:
        repeat = q.sample_index in seen
        seen.add(q.sample_index)
        repeats += repeat
        repeated_tokens += q.prompt_tokens if repeat else 0
        if prefixes:  # the workload's shared prefix
            shared = {"prefix_group": q.sample_index % prefixes,
                      "prefix_tokens": min(params["prefix_len"], q.prompt_tokens)}
        elif prefix_caching:  # the sample's own prompt: a repeat hits what the replica still caches of it
            shared = {"prefix_group": q.sample_index, "prefix_tokens": q.prompt_tokens}
        else:
            shared = {}
        requests.append(SimRequest(q.issued_s - t0, q.prompt_tokens, q.generated_tokens, 0, **shared))
    steps, by_file = _run_steps(path, result, step_log, done)
    return Trace(tuple(requests), result, len(result.queries) - len(done), repeats, steps, repeated_tokens,
                 by_file)


def _run_steps(path, result: BenchResult, step_log, done: list) -> tuple[list[LoggedStep] | None, dict | None]:
    """The engine's steps during the run: a server's step file's that started between the first query's
    issue and the last one's end (its Unix times read on the bench's clock: a server on another machine
    needs the two clocks in step); else those the run kept; None where neither is. Then, with several
    files, each one's steps by its worker name (``Trace.worker_steps``)."""
    if step_log is not None:
        if result.t0_unix is None:
            raise ValueError(f"--step-log: {path} has no t0_unix to place the server's steps on its clock")
        files = [step_log] if isinstance(step_log, (str, Path)) else list(step_log)
        first, last = done[0].issued_s, max(q.finished_s for q in done)
        by_file = {}
        for file in files:
            try:
                steps = load_steps(file, t0_unix=result.t0_unix)
            except FileNotFoundError:
                raise ValueError(f"--step-log: no such file {file}") from None
            by_file.setdefault(Path(file).name.rsplit(".", 1)[-1], []).extend(
                s for s in steps if first <= s.start <= last)  # files of one name suffix: one entry
        within = sorted((s for steps in by_file.values() for s in steps), key=lambda s: s.start)
        if not within:
            raise ValueError(f"--step-log: {', '.join(map(str, files))} hold no step within the run of {path}")
        return within, by_file if len(by_file) > 1 else None
    if not result.engine_steps_file:
        return None, None
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    try:
        return load_steps(folder / result.engine_steps_file), None
    except FileNotFoundError:
        raise ValueError(f"--replay: {path} names {result.engine_steps_file}, which is not in {folder}") from None


def measured_figures(trace: Trace) -> dict:
    """The run's figures in ``predict``'s terms (ms; output tokens/s by the server's count
    where it reported one, as the replayed requests are)."""
    m = trace.result.metrics
    tokens_per_s = m.tokens_per_s if m.usage_output_tokens is None else m.usage_output_tokens / m.duration_s
    return {"tokens_per_s": tokens_per_s,
            "ttft_ms": {"p50": m.ttft_ms.p50, "p99": m.ttft_ms.p99} if m.ttft_ms else None,
            "tpot_ms": {"p50": m.tpot_ms.p50, "p99": m.tpot_ms.p99} if m.tpot_ms else None,
            "prefix_cache_hit_rate": m.prefix_cache_hit_rate,
            "engine_steps": m.engine_steps, "engine_busy_s": m.engine_busy_s,
            "engine_prefill_steps": m.engine_prefill_steps, "engine_prefill_busy_s": m.engine_prefill_busy_s,
            "engine_busy_cpu_s": m.engine_busy_cpu_s}


def comparison_table(trace: Trace, simulated: dict, at_served_prices: dict | None = None) -> str:
    """Markdown: measured vs simulated for the figures both have; with ``at_served_prices`` (the
    replay with each step priced as the run's own steps of its kind took: sim/served_steps.py)
    two more columns for it, beside the latencies and throughput."""
    measured = measured_figures(trace)
    r, hit = trace.result, measured["prefix_cache_hit_rate"]
    more = at_served_prices is not None
    head = "| figure | measured | simulated | sim / measured |" + (
        " at the served steps' prices | / measured |" if more else "")
    lines = [f"replay of {r.scenario} run {r.created} ({len(trace.requests)} queries, {trace.skipped} failed left "
             f"out; {trace.repeats} repeated samples, {trace.repeated_prompt_share:.0%} of prompt tokens; measured "
             f"prefix-cache hit rate {'n/a' if hit is None else format(hit, '.0%')})",
             "", head, "|---|---|---|---|" + ("---|---|" if more else "")]

    def row(name: str, a: float | None, b: float | None, unit: str, c: float | None = None, digits: int = 1) -> None:
        if a is None or b is None:
            return
        line = f"| {name} | {a:,.{digits}f}{unit} | {b:,.{digits}f}{unit} | {_ratio(b, a)} |"
        lines.append(line + (f" {c:,.{digits}f}{unit} | {_ratio(c, a)} |" if more and c is not None else
                             (" | |" if more else "")))

    def fig(f: dict | None, key: str, pct: str | None = None) -> float | None:
        v = f and f[key]
        return v and v[pct] if pct else v

    row("output tokens/s", measured["tokens_per_s"], simulated["tokens_per_s"], "",
        fig(at_served_prices, "tokens_per_s"))
    if hit is not None:
        row("prefix-cache hit rate", hit * 100, simulated["prefix_cache_hit_rate"] * 100, "%")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        for pct in ("p50", "p99"):
            row(f"{label} {pct}", fig(measured, key, pct), fig(simulated, key, pct), " ms",
                fig(at_served_prices, key, pct))
    if measured["engine_steps"] and measured["engine_busy_s"] is not None:
        repriced = dict((name, b) for name, _, b, _, _ in _step_figures(measured, at_served_prices)) if more else {}
        for name, a, b, unit, digits in _step_figures(measured, simulated):
            row(name, a, b, unit, repriced.get(name), digits)
    return "\n".join(lines)


def _ratio(b: float, a: float) -> str:
    return f"{b / a:.2f}" if a else "n/a"


def _step_figures(measured: dict, simulated: dict) -> list[tuple[str, float, float, str, int]]:
    """(name, measured, simulated, unit, decimals) of the server's step counters (engine/step_stats.py,
    workers summed) against the simulated steps: all of them, then those with a prompt chunk and the
    decode-only ones where the run read the split."""
    def kinds(f: dict) -> dict[str, tuple[float, float | None]]:
        steps, busy = f["engine_steps"], f["engine_busy_s"]
        out = {"": (steps, busy)}
        if f.get("engine_prefill_steps") is not None and f.get("engine_prefill_busy_s") is not None:
            out[" with a prompt"] = (f["engine_prefill_steps"], f["engine_prefill_busy_s"])
            out[" decode-only"] = (steps - f["engine_prefill_steps"], busy - f["engine_prefill_busy_s"])
        return out

    rows, sim = [], kinds(simulated)
    for label, (steps, busy) in kinds(measured).items():
        sim_steps, sim_busy = sim[label]
        rows.append((f"engine steps{label}", steps, sim_steps, "", 0))
        if label == "":
            rows.append(("engine busy", busy, sim_busy, " s", 1))
            if measured.get("engine_busy_cpu_s"):
                # A profile is calibrated on an idle machine, where the stepping thread holds its core for the
                # whole step: its price is the steps' time on a core, which this sets it against.
                cpu = measured["engine_busy_cpu_s"]
                rows.append((f"engine busy on a core ({cpu / busy:.0%} of it)", cpu, sim_busy, " s", 1))
        if steps and sim_steps:
            rows.append((f"mean step{label}", busy / steps * 1e3, sim_busy / sim_steps * 1e3, " ms", 1))
    return rows
