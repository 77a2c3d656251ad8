"""The validation table as it stands: every published row of `tokenmill sim validate` at its
latest run, collected from the run files under results/sim-validate/:

    python -m benchmarks.sim_table_current --out results/sim-validate/current.md --plot docs/img/sim-validation.png

The whole table takes hours to simulate on two cores, so sessions rerun the groups of rows a
change touches (benchmarks/sim_mlperf_rows.py, ``tokenmill sim validate --suite``). This script
takes, for each row of sim/published.py, its line in the newest file of ``RUNS`` that ran it
(a row is matched by model, hardware, GPU count, scenario, lengths and published figure) and
prints one table per kind of row, with the file each figure came from, then the counts within
25%. A row that no listed run holds is named with the reason the simulator skips it, or as
not run. Files of opt-in variants (``--tile-rule``) and of superseded rules are not listed.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.sim_mlperf_rows import _round as mlperf_round
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.validate import TOLERANCE, parse_parallel, parse_pools, row_workload

RUN_DIR = Path("results/sim-validate")
# Oldest first: a row in a later file replaces its line from an earlier one. Each file is one
# run of the default simulator of its day, all since the KV cache was sized as TensorRT-LLM sizes
# it (2026-11-29), and each still holds the latest run of some row (tests/test_sim_table_current.py);
# docs/SIMULATOR-LOG.md names the command and the change behind each (the last two: docs/SIMULATOR.md
# "The table as it stands").
RUNS = (
    "trtllm-kv-free.md",
    "mlperf-dense-offline-kv-free.md",
    "mlperf-405b-kv-free.md",
    "mlperf-deepseek-v51-offline-kernels.md",
    "mlperf-deepseek-server-host.md",
    "mlperf-405b-v51-executor.md",
    "mlperf-405b-v51-gb200-server.md",
    "mlperf-405b-v51-h200-server-executor.md",
    "mlperf-deepseek-gb300-fp4.md",
    "mlperf-deepseek-gb300-rack-fp4.md",
    "mlperf-405b-gb300-fp4.md",
    "mlperf-deepseek-server-racks-fp4.md",
    "mlperf-deepseek-interactive-fp4.md",
    "mlperf-h200-nvl.md",
    "mlperf-b300-deepseek-server.md",
    "mlperf-b300.md",
    "trtllm-long.md",
    "mlperf-deepseek-rerun-s37.md",
    "mlperf-llama2-70b-gb300-fp4.md",
    "trtllm-gpt-oss-upcast.md",
    "mlperf-405b-pp.md",
    "mlperf-405b-h200-pp.md",
    "mlperf-8b-host-seq.md",
    "mlperf-70b-host-seq.md",
    "mlperf-deepseek-x288.md",
)


@dataclass(frozen=True)
class Line:
    """One row of a run file's table."""
    layout: str
    simulated: float
    ratio: float
    """Simulated / published, as the file prints it (two decimals)."""
    within: bool
    """The file's own verdict (no "**x**"), taken on the unrounded ratio."""
    run: str


def _round(row: PublishedResult) -> str:
    """'v4.1' / 'v5.1' / 'v6.0' for an MLPerf row, '-' for TensorRT-LLM's."""
    found = mlperf_round(row)
    return "-" if found == "?" else found


def _lengths(row: PublishedResult) -> str:
    return f"{row.isl}/{row.osl}" if row.dataset is None else f"{row.dataset} dataset"


def _key(model: str, hardware: str, gpus: str, scenario: str, lengths: str, published: str) -> tuple[str, ...]:
    return model, hardware, gpus, scenario, lengths, published


def row_key(row: PublishedResult) -> tuple[str, ...]:
    return _key(row.model, row.hardware, str(row.num_gpus), row.scenario, _lengths(row),
                f"{row.tokens_per_s_per_gpu:,.0f}")


def read_run(path: Path) -> dict[tuple[str, ...], Line]:
    """The rows of one run file (validate.table's Markdown), by row_key."""
    lines = {}
    for text in path.read_text().splitlines():
        cells = [c.strip() for c in text.strip().strip("|").split("|")]
        if len(cells) != 11 or cells[0] in ("model", "---"):
            continue
        model, hardware, gpus, _, scenario, layout, lengths, published, simulated, ratio, _ = cells
        lines[_key(model, hardware, gpus, scenario, lengths, published)] = Line(
            layout, float(simulated.replace(",", "")), float(ratio.split()[0]), "**x**" not in ratio, path.name)
    return lines


def latest_lines(run_dir: Path = RUN_DIR, runs: tuple[str, ...] = RUNS) -> dict[tuple[str, ...], Line]:
    found: dict[tuple[str, ...], Line] = {}
    for name in runs:  # oldest first: later files replace earlier lines
        found.update(read_run(run_dir / name))
    return found


def skip_reason(row: PublishedResult) -> str:
    """Why `tokenmill sim validate` does not run ``row``, or '' if it does."""
    try:
        row_workload(row, 1)
        if row.parallel and not parse_pools(row.parallel):
            parse_parallel(row.parallel)
    except ValueError as e:
        return str(e)
    return ""


GROUPS: tuple[tuple[str, Callable[[PublishedResult], bool]], ...] = (
    ("TensorRT-LLM, dense Llama", lambda r: r.dataset is None and r.model.startswith("llama")),
    ("TensorRT-LLM, DeepSeek-R1", lambda r: r.dataset is None and r.model == "deepseek-r1"),
    ("TensorRT-LLM, gpt-oss-120b", lambda r: r.dataset is None and r.model == "gpt-oss-120b"),
    ("MLPerf DeepSeek-R1, Offline", lambda r: r.model == "deepseek-r1" and r.scenario == "offline"),
    ("MLPerf DeepSeek-R1, Server", lambda r: r.model == "deepseek-r1" and r.scenario == "server"),
    ("MLPerf Llama-3.1-405B", lambda r: r.model == "llama3.1-405b" and r.scenario != "interactive"),
    ("MLPerf Llama-2-70B and Llama-3.1-8B, Offline", lambda r: r.scenario == "offline" and r.model.startswith("llama")),
    ("MLPerf Llama-2-70B and Llama-3.1-8B, Server", lambda r: r.scenario == "server" and r.model.startswith("llama")),
    ("MLPerf Interactive", lambda r: r.scenario == "interactive"),
    ("MLPerf gpt-oss-120b", lambda r: r.model == "gpt-oss-120b"),
)


def group_of(row: PublishedResult) -> str:
    return next(name for name, member in GROUPS if member(row))


def _summary(lines: list[Line]) -> str:
    if not lines:
        return "none run"
    ratios = [line.ratio for line in lines]
    within = sum(line.within for line in lines)
    errors = sorted(abs(x - 1.0) for x in ratios)
    logs = sum(abs(math.log(x)) for x in ratios) / len(ratios)
    return (f"{within} of {len(ratios)} within {TOLERANCE:.0%}; median |error| {errors[len(errors) // 2]:.0%}, "
            f"mean |log(sim / published)| {logs:.3f}")


def render(rows: tuple[PublishedResult, ...], found: dict[tuple[str, ...], Line]) -> str:
    out, totals = [], []
    for name, _ in GROUPS:
        members = [r for r in rows if group_of(r) == name]
        if not members:
            continue
        ran = [(r, found[row_key(r)]) for r in members if row_key(r) in found]
        missing = [r for r in members if row_key(r) not in found]
        out += [f"#### {name}", ""]  # headings under docs/SIMULATOR.md's "### The table as it stands"
        if ran:
            out += ["| model | hardware | GPUs | round | scenario | layout | ISL/OSL | published tok/s/GPU | "
                    "simulated | sim / published | run |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, line in ran:
            mark = "" if line.within else " **x**"
            out.append(f"| {r.model} | {r.hardware} | {r.num_gpus} | {_round(r)} | {r.scenario} | "
                       f"{line.layout} | {_lengths(r)} | {r.tokens_per_s_per_gpu:,.0f} | {line.simulated:,.0f} | "
                       f"{line.ratio:.2f}{mark} | {line.run} |")
        out += [""] * bool(ran) + [_summary([line for _, line in ran]) + "."]
        for r in missing:
            why = skip_reason(r) or "not run in any listed file"
            out.append(f"- not in the table: {r.model} {r.hardware} x{r.num_gpus} {r.scenario} "
                       f"{_round(r)} ({r.tokens_per_s_per_gpu:,.0f}): {why}")
        out.append("")
        totals += [line for _, line in ran]
    head = [f"All rows: {_summary(totals)}; {len(rows) - len(totals)} of {len(rows)} published rows not run "
            "(named under their group).", ""]
    return "\n".join(head + out)


def plot(rows: tuple[PublishedResult, ...], found: dict[tuple[str, ...], Line], path: Path) -> Path:
    """Simulated against published tokens/s per GPU, one marker per group of rows, on log axes, with
    the diagonal and the 25% band: a row inside the band is within the issue's tolerance."""
    from tokenmill.bench.plots import _figure, _save

    fig, (ax,) = _figure(1, width_per_panel=8.0, height=6.4)
    markers = "osD^v<>Pp*"
    for (name, _), marker in zip(GROUPS, markers):
        pairs = [(r.tokens_per_s_per_gpu, found[row_key(r)].simulated) for r in rows
                 if group_of(r) == name and row_key(r) in found]
        if pairs:
            ax.scatter(*zip(*pairs), marker=marker, s=34, alpha=0.8, label=f"{name} ({len(pairs)})", zorder=2)
    values = [v for r in rows if row_key(r) in found for v in (r.tokens_per_s_per_gpu, found[row_key(r)].simulated)]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.plot([low, high], [low, high], color="black", linewidth=1.0, zorder=1)
    ax.fill_between([low, high], [low * (1 - TOLERANCE), high * (1 - TOLERANCE)],
                    [low * (1 + TOLERANCE), high * (1 + TOLERANCE)], color="tab:green", alpha=0.12, zorder=0,
                    label=f"within {TOLERANCE:.0%}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("published output tokens/s per GPU")
    ax.set_ylabel("simulated output tokens/s per GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    lines = [found[row_key(r)] for r in rows if row_key(r) in found]
    ax.set_title(f"tokenmill sim against published results: {_summary(lines).split(';')[0]}", fontsize="medium")
    return _save(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--plot", metavar="PNG", help="also draw simulated against published tokens/s per GPU here")
    args = ap.parse_args(argv)
    found = latest_lines()
    text = render(RESULTS, found)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.plot:
        print(f"wrote {plot(RESULTS, found, Path(args.plot))}")


if __name__ == "__main__":
    main()
