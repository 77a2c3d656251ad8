"""``tokenmill bench`` flags. No heavy imports: ``--help`` must not load torch."""

from __future__ import annotations

import argparse

from tokenmill.bench.presets import DEFAULT_PRESET, PRESETS
from tokenmill.bench.settings import DEFAULT_MIN_DURATION_S, MODES, SCENARIOS

ENGINE_TARGET = "engine"


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    _add_target_args(parser)
    _add_scenario_args(parser)
    _add_sweep_args(parser)
    _add_report_args(parser)


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    t = parser.add_argument_group("targets")
    t.add_argument("--url", action="append", default=None, metavar="URL",
                   help="OpenAI-compatible server to benchmark (e.g. http://127.0.0.1:8000); repeat to compare "
                        f"several in one run; '{ENGINE_TARGET}' is the in-process engine. Default: the engine, "
                        "built from the model and engine flags")
    t.add_argument("--api", choices=("chat", "completions"), default="chat",
                   help="route for URL targets: /v1/chat/completions or /v1/completions (default chat)")
    t.add_argument("--api-key", default=None, help="Bearer key for URL targets")
    t.add_argument("--extra-body", type=_json_object, default=None, metavar="JSON",
                   help="fields merged into every URL request; null removes one, e.g. "
                        "'{\"ignore_eos\": null, \"generation_config\": \"{\\\"eos_token_id\\\": -1}\"}' "
                        "for HF transformers serve, which rejects ignore_eos")
    t.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a URL query fails")


def _add_scenario_args(parser: argparse.ArgumentParser) -> None:
    s = parser.add_argument_group("scenario (MLPerf LoadGen)")
    s.add_argument("--scenario", choices=SCENARIOS, default="offline",
                   help="offline: all queries at once; server: Poisson arrivals at --target-qps; interactive: "
                        "server with the tighter limits; singlestream: one query at a time")
    s.add_argument("--mode", choices=MODES, default="performance",
                   help="performance: timed and judged; accuracy: every sample once, outputs scored")
    s.add_argument("--preset", choices=tuple(PRESETS), default=DEFAULT_PRESET,
                   help="TTFT/TPOT limits: MLPerf v6.0's per model, or smollm2-cpu (scaled for the "
                        f"embedded model on CPU; default {DEFAULT_PRESET})")
    s.add_argument("--ttft-ms", type=float, default=None, help="p99 time-to-first-token limit (overrides the preset)")
    s.add_argument("--tpot-ms", type=float, default=None, help="p99 time-per-output-token limit (overrides the preset)")
    s.add_argument("--target-qps", type=float, default=None,
                   help="server/interactive arrival rate (required unless --find-peak or --sweep-qps); "
                        "offline: LoadGen's expected QPS")
    s.add_argument("--min-duration", type=float, default=None,
                   help=f"seconds the test must last (default {DEFAULT_MIN_DURATION_S:g}; --official: 600)")
    s.add_argument("--min-query-count", type=int, default=None,
                   help="queries the test must issue (default: offline the whole workload, server 460, "
                        "singlestream 64: the least LoadGen's early stopping accepts)")
    s.add_argument("--max-duration", type=float, default=None, help="stop issuing after this many seconds")
    s.add_argument("--official", action="store_true",
                   help="MLPerf's run-length rules: 600 s minimum and the preset model's Offline query count")
    s.add_argument("--max-concurrency", type=int, default=None,
                   help="most queries in flight at the target; the rest wait on the client (their wait counts)")
    s.add_argument("--loadgen-seed", type=int, default=0, help="LoadGen's sample-order and arrival seed")


def _add_sweep_args(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("peak search and sweeps")
    p.add_argument("--find-peak", action="store_true",
                   help="server/interactive: search the highest target QPS that LoadGen judges VALID "
                        "(starts at --target-qps or 1)")
    p.add_argument("--peak-max-runs", type=int, default=8, help="LoadGen runs the peak search may use")
    p.add_argument("--peak-tolerance", type=float, default=0.05,
                   help="stop bisecting when the bracket is narrower than this fraction of its top")
    p.add_argument("--sweep-qps", type=_float_list, default=None, metavar="Q1,Q2,...",
                   help="one server/interactive run per target QPS (throughput-vs-latency curve)")
    p.add_argument("--sweep-concurrency", type=int_list, default=None, metavar="C1,C2,...",
                   help="one run per --max-concurrency value (offline arrivals, closed loop)")
    p.add_argument("--uplift", action="store_true",
                   help="what each technique is worth: the workload on a baseline engine (no prefix caching, "
                        "torch kernels, no CUDA graphs, no speculative decoding), on the baseline plus each "
                        "technique alone, and on the full stack (the engine flags as given); one table of ratios "
                        "to the baseline, uplift.json and uplift.png")


def _add_report_args(parser: argparse.ArgumentParser) -> None:
    r = parser.add_argument_group("report")
    r.add_argument("--output-dir", default="bench-results",
                   help="folder for run folders (results.json, LoadGen logs, plots)")
    r.add_argument("--devices", type=int, default=1, help="devices the target uses (per-device figures, cost)")
    r.add_argument("--price-per-hour", type=float, default=None,
                   help="USD per device-hour for cost per million tokens (default: not reported)")
    r.add_argument("--compare", nargs="+", default=None, metavar="RESULTS",
                   help="no run: compare saved results (results.json files or run folders) side by side")
    r.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")


def _json_object(text: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values
