"""Plain-text reports of benchmark runs: one run in full (``format_result``) and
a sweep as one row per load point (``format_sweep``).

Everything here reads a saved ``BenchResult`` and tolerates missing settings
keys (older or hand-made results files): a missing figure prints as "-". No
colour codes, so reports paste cleanly into docs and issues.
"""

from __future__ import annotations

from tokenmill.bench.results import BenchResult, Percentiles

MISSING = "-"
# Scenarios in which LoadGen holds the run to the TTFT/TPOT limits; the others
# use the limits for goodput only (offline: not even that, every query counts).
LATENCY_JUDGED = ("server", "interactive")


# ---- shared helpers (also used by compare.py and plots.py) ----------------------------


def target_label(result: BenchResult) -> str:
    """A short name for the target: its label, else its model, else its kind."""
    t = result.target or {}
    return str(t.get("label") or t.get("model") or t.get("kind") or "target")


def unique_labels(results: list[BenchResult]) -> list[str]:
    """Target labels, with '#2', '#3' appended to repeats so columns stay distinct."""
    seen: dict[str, int] = {}
    labels = []
    for r in results:
        label = target_label(r)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return labels


def sweep_point(result: BenchResult) -> tuple[str, float | None]:
    """(axis, value) of a sweep point: ('concurrency', n) for a concurrency
    sweep (max_concurrency set), else ('target QPS', qps or None)."""
    s = result.settings or {}
    if s.get("max_concurrency"):
        return "concurrency", float(s["max_concurrency"])
    return "target QPS", s.get("target_qps")


def failure_reasons(result: BenchResult) -> list[str]:
    """LoadGen's reasons, plus each failed check not already among them."""
    v = result.verdict
    reasons = list(v.reasons)
    for name, ok in v.checks.items():
        if not ok and not any(r.startswith(name) for r in reasons):
            reasons.append(f"{name}: NO")
    return reasons


def fmt_num(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def fmt_limit(value: float | None) -> str:
    """A latency limit as given (2.8 stays 2.8, 200 stays 200)."""
    return MISSING if value is None else f"{value:,g}"


def fmt_pct(p: Percentiles | None, key: str) -> str:
    """One percentile (ms) of a Percentiles, or '-' when there were no values."""
    return MISSING if p is None else f"{getattr(p, key):,.1f}"


def fmt_rate(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1%}"


def fmt_cost(usd: float | None) -> str:
    if usd is None:
        return MISSING
    # Sub-cent figures need more digits to be worth printing at all.
    return f"${usd:,.2f}" if usd >= 0.1 else f"${usd:.4f}"


def format_columns(header: list[str], rows: list[list[str]], indent: str = "  ") -> str:
    """Aligned columns: the first left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [str(cells[0]).ljust(widths[0])]
        parts += [str(c).rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return (indent + "  ".join(parts)).rstrip()

    rule = indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def _pairs(title: str, rows: list[tuple[str, str]]) -> list[str]:
    """A titled block of 'name   value' lines, names padded to one width."""
    width = max((len(name) for name, _ in rows), default=0)
    return [title, *(f"  {name.ljust(width)}  {value}".rstrip() for name, value in rows)]


# ---- one run ----------------------------------------------------------------------------


def format_result(result: BenchResult) -> str:
    """The full report of one run: what ran, how, and what it measured."""
    blocks = [
        _header(result),
        _workload_block(result),
        _settings_block(result),
        _results_block(result),
        _latency_block(result),
    ]
    if result.metrics.loadgen:
        blocks.append(_pairs("LoadGen's figures", sorted((str(k), str(v))
                                                          for k, v in result.metrics.loadgen.items())))
    if result.accuracy:
        blocks.append(_pairs("Accuracy", [(str(k), _plain(v)) for k, v in result.accuracy.items()]))
    blocks.append(_verdict_block(result))
    return "\n\n".join("\n".join(b) if isinstance(b, list) else b for b in blocks) + "\n"


def _header(r: BenchResult) -> list[str]:
    t = r.target or {}
    target = target_label(r)
    details = [x for x in (t.get("kind"), t.get("api"), t.get("url")) if x]
    if details:
        target += f" ({', '.join(str(x) for x in details)})"
    return _pairs(f"tokenmill bench: {r.scenario}, {r.mode}", [
        ("target", target),
        ("model", str(t.get("model") or MISSING)),
        ("started", r.created or MISSING),
        ("logs", r.log_dir or MISSING),
    ])


def _workload_block(r: BenchResult) -> list[str]:
    w = r.workload or {}
    # stats() may be nested under 'stats' or merged into the workload dict.
    stats = w.get("stats") if isinstance(w.get("stats"), dict) else w
    rows = [("name", str(w.get("name") or MISSING))]
    if w.get("description"):
        rows.append(("description", str(w["description"])))
    if "num_samples" in stats:
        rows.append(("samples", str(stats["num_samples"])))
    if "input_tokens_mean" in stats:
        rows.append(("input tokens", f"mean {fmt_num(stats['input_tokens_mean'])}, "
                                     f"max {stats.get('input_tokens_max', MISSING)}"))
    if "output_tokens_mean" in stats:
        rows.append(("output tokens asked", f"mean {fmt_num(stats['output_tokens_mean'])}, "
                                            f"max {stats.get('output_tokens_max', MISSING)}"))
    params = w.get("params") or {}
    if params:
        rows.append(("params", ", ".join(f"{k}={_plain(v)}" for k, v in sorted(params.items()))))
    return _pairs("Workload", rows)


def _settings_block(r: BenchResult) -> list[str]:
    s = r.settings or {}
    judged = r.scenario in LATENCY_JUDGED
    preset = s.get("preset")
    source = f"preset {preset}" if preset else "no preset"
    if s.get("preset_note"):
        source += f": {s['preset_note']}"
    how = "p99, judged by LoadGen" if judged else "goodput only, not judged"
    if r.scenario == "offline":
        how = "not applied offline"
    rows = [
        ("target QPS", fmt_num(s.get("target_qps"), 2)),
        ("TTFT limit", _limit(s.get("ttft_ms"), how, source)),
        ("TPOT limit", _limit(s.get("tpot_ms"), how, source)),
    ]
    if s.get("max_concurrency"):
        rows.append(("max concurrency", str(s["max_concurrency"])))
    rows += [
        ("min duration", f"{fmt_num(s.get('min_duration_s'))} s" if s.get("min_duration_s") else MISSING),
        ("min query count", str(s.get("min_query_count") or MISSING)),
        ("devices", str(s.get("devices") or MISSING)),
        ("price", f"${s['price_per_hour']:,.2f} per device-hour" if s.get("price_per_hour") else MISSING),
    ]
    if s.get("official"):
        rows.append(("run rules", "MLPerf official"))
    return _pairs("Settings", rows)


def _limit(ms: float | None, how: str, source: str) -> str:
    return MISSING if ms is None else f"{fmt_limit(ms)} ms ({how}; {source})"


def _results_block(r: BenchResult) -> list[str]:
    m, s = r.metrics, r.settings or {}
    ok = m.num_queries - m.num_errors
    if r.scenario == "offline":
        good_rule = "offline: every successful query"
    else:
        good_rule = f"TTFT <= {fmt_limit(s.get('ttft_ms'))} ms and TPOT <= {fmt_limit(s.get('tpot_ms'))} ms"
    return _pairs("Results", [
        ("queries", f"{m.num_queries} ({ok} ok, {m.num_errors} failed)"),
        ("duration", f"{m.duration_s:,.2f} s"),
        ("output tokens", _output_tokens_line(m)),
        ("output tokens/s", fmt_num(m.tokens_per_s)),
        ("tokens/s per device", f"{fmt_num(m.tokens_per_s_per_device)} ({s.get('devices', 1)} device(s))"),
        ("requests/s", fmt_num(m.requests_per_s, 2)),
        ("goodput", f"{fmt_num(m.goodput_rps, 2)} req/s ({good_rule})"),
        ("good fraction", f"{m.good_fraction * 100:.1f}% of queries"),
        ("cost / M tokens", _cost_line(r)),
        ("errors", _errors_line(r)),
        ("usage mismatches", f"{m.usage_mismatches} (server's token count != client's)"),
        ("prefix-cache hit rate", "n/a (no counters)" if m.prefix_cache_hit_rate is None
         else f"{fmt_rate(m.prefix_cache_hit_rate)} of prompt tokens (the target's own counters over the run)"),
        ("speculative decoding", "n/a (no drafts verified)" if m.spec_acceptance_rate is None
         else f"{fmt_rate(m.spec_acceptance_rate)} of drafts accepted, {m.spec_tokens_per_verification:.2f} "
              "tokens per verification step"),
        ("engine steps", _steps_line(m)),
        ("client CPU", _client_cpu_line(r)),
        ("GC pauses", _gc_line(m.gc_pauses)),
    ])


def _steps_line(m) -> str:
    """The target's steps over the run and the time it spent in them (its own counters)."""
    if not m.engine_steps or m.engine_busy_s is None:
        return "n/a (no counters)"
    line = (f"{m.engine_steps:,} in {m.engine_busy_s:,.1f} s busy ({m.engine_busy_s / m.duration_s:.0%} of the run; "
            f"{m.engine_busy_s / m.engine_steps * 1e3:,.1f} ms a step")
    prefill, prefill_s = m.engine_prefill_steps, m.engine_prefill_busy_s
    if prefill is not None and prefill_s is not None:
        decode = m.engine_steps - prefill
        line += f"; {prefill:,} with a prompt" + (f", {prefill_s / prefill * 1e3:,.1f} ms each" if prefill else "")
        line += f", {decode:,} decode-only" + (f", {(m.engine_busy_s - prefill_s) / decode * 1e3:,.1f} ms each"
                                                 if decode else "")
    if m.engine_busy_cpu_s is not None and m.engine_busy_s:
        line += f"; on a core {m.engine_busy_cpu_s / m.engine_busy_s:.0%} of that time"
    line += "; the target's counters, workers summed)"
    workers = [f"{name} ({w['role']}) {w['busy_s']:,.1f} s, on a core {w['busy_cpu_s'] / w['busy_s']:.0%}"
               for name, w in sorted((m.engine_workers or {}).items()) if w.get("busy_s") and "busy_cpu_s" in w]
    return line + ("; by worker: " + ", ".join(workers) if workers else "")


def _client_cpu_line(r) -> str:
    """This process's CPU over the run: what a client on the server's own machine takes from it."""
    m = r.metrics
    if m.client_cpu_s is None:
        return "n/a (not recorded)"
    share = f" ({m.client_cpu_s / (m.duration_s * m.host_cpus):.0%} of {m.host_cpus} CPUs)" \
        if m.host_cpus and m.duration_s else ""
    what = "LoadGen, the client and the in-process engine" if r.target.get("kind") == "engine" \
        else "LoadGen and the HTTP client"
    return f"{m.client_cpu_s:,.1f} s{share}: this process ({what})"


def _gc_line(pauses: dict | None) -> str:
    """This process's collections during the run, oldest generation first."""
    if not pauses:
        return "none (or not recorded)"
    return "; ".join(f"{gen}: {row['collections']}, longest {row['max_ms']:.1f} ms"
                     for gen, row in sorted(pauses.items(), reverse=True)) + " (this process, during the run)"


def _output_tokens_line(m) -> str:
    """The client's count (re-encoded text); the server's own where it differs."""
    line = f"{m.output_tokens:,}"
    server = m.usage_output_tokens
    if server is not None and server != m.output_tokens:
        line += f" (server's usage: {server:,}, {server / m.duration_s:,.1f} tok/s)"
    return line


def _cost_line(r: BenchResult) -> str:
    s = r.settings or {}
    price = s.get("price_per_hour")
    if r.metrics.cost_per_million_tokens is None or not price:
        return "n/a (no --price-per-hour)"
    devices = s.get("devices", 1)
    return f"{fmt_cost(r.metrics.cost_per_million_tokens)} (at ${price:,.2f}/h x {devices} device(s))"


def _errors_line(r: BenchResult) -> str:
    if not r.metrics.num_errors:
        return "0"
    # The most common error text is usually the one worth reading.
    counts: dict[str, int] = {}
    for q in r.queries:
        if q.error is not None:
            counts[q.error] = counts.get(q.error, 0) + 1
    if not counts:
        return str(r.metrics.num_errors)
    first, n = max(counts.items(), key=lambda kv: kv[1])
    return f"{r.metrics.num_errors} (most common, x{n}: {first})"


def _latency_block(r: BenchResult) -> str:
    m = r.metrics
    keys = ("p50", "p90", "p99", "mean", "max")
    rows = [[name, *(fmt_pct(p, k) for k in keys)]
            for name, p in (("TTFT", m.ttft_ms), ("TPOT", m.tpot_ms), ("end-to-end", m.latency_ms))]
    return "Latency (ms, client-side)\n" + format_columns(["", *keys], rows)


def _verdict_block(r: BenchResult) -> list[str]:
    v = r.verdict
    lines = [f"LoadGen verdict: {v.result}"]
    if not v.valid:
        lines += [f"  - {reason}" for reason in failure_reasons(r)]
    return lines


def _plain(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---- a sweep ----------------------------------------------------------------------------


def format_sweep(results: list[BenchResult]) -> str:
    """One row per load point, in the order given (the sweep's order)."""
    if not results:
        raise ValueError("sweep: no results to report")
    axes = {sweep_point(r)[0] for r in results}
    axis = axes.pop() if len(axes) == 1 else "point"
    rows = []
    for r in results:
        kind, value = sweep_point(r)
        point = fmt_num(value, 2 if kind == "target QPS" else 0)
        if axis == "point":
            point = f"{kind} {point}"
        m = r.metrics
        rows.append([point, fmt_num(m.tokens_per_s), fmt_num(m.requests_per_s, 2),
                     fmt_pct(m.ttft_ms, "p99"), fmt_pct(m.tpot_ms, "p99"), fmt_num(m.goodput_rps, 2),
                     f"{m.good_fraction * 100:.0f}%", str(m.num_errors), r.verdict.result])
    first = results[0]
    s = first.settings or {}
    title = (f"Sweep: {first.scenario}, {target_label(first)}, workload "
             f"{(first.workload or {}).get('name', MISSING)}; limits TTFT {fmt_limit(s.get('ttft_ms'))} ms, "
             f"TPOT {fmt_limit(s.get('tpot_ms'))} ms (p99)")
    header = [axis, "tokens/s", "req/s", "TTFT p99 ms", "TPOT p99 ms", "goodput req/s", "good", "errors",
              "verdict"]
    return title + "\n" + format_columns(header, rows) + "\n"
