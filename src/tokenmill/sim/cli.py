"""``tokenmill sim``: predict one deployment's throughput, latency and cost.

Checked against published results by ``tokenmill sim validate`` (sim/validate.py,
docs/SIMULATOR.md): most of TensorRT-LLM's table and DeepSeek-R1's and
Llama-3.1-405B's MLPerf v6.0 rows within 25%, rack-scale DeepSeek-R1 Server runs,
gpt-oss on Hopper and older software rounds not; the figures are the cost model's
and the scheduler simulation's, nothing more.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenmill.sim.hardware import HARDWARE, get_hardware

SCENARIOS = ("offline", "server", "interactive", "singlestream")
MODEL_NAMES = ("llama3.1-8b", "llama3.3-70b", "llama3.1-405b", "llama2-70b", "deepseek-r1", "smollm2-135m",
               "gpt-oss-120b")
"""sim/models.py's SIM_MODELS, named here so `tokenmill --help` need not import torch (a test keeps them equal)."""
DEFAULT_NUM_REQUESTS = 2000
DATASET_NAMES = ("deepseek-r1", "llama3.1-405b", "llama3.1-8b", "llama2-70b")
"""sim/mlperf_lengths.py's DATASET_DISTRIBUTIONS (a test keeps them equal)."""


def add_sim_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("predict", "calibrate", "validate"), default="predict",
                        help="predict (default): simulate the deployment below; calibrate: measure this machine "
                             "(microbenchmarks and the engine's step times, on --device) and write the "
                             "this-machine profile; validate: simulate every published result the simulator "
                             "can express (sim/published.py) and print simulated vs published "
                             "(--num-requests per replica and batch size; --model: only that model's rows; "
                             "--suite; --jobs; --out; --json; --latency: the published Server runs' TPOT "
                             "and TTFT at their own rates instead)")
    _add_deployment_args(parser.add_argument_group("what to simulate"))
    _add_workload_args(parser.add_argument_group("workload and scheduler"))
    _add_calibrate_args(parser.add_argument_group("calibrate"))
    v = parser.add_argument_group("validate")
    v.add_argument("--jobs", type=int, default=1, help="rows simulated at once, one process each (default 1)")
    v.add_argument("--out", default=None, metavar="PATH",
                   help="also write the Markdown table of the rows finished so far to PATH after every row "
                        "(a long run interrupted keeps what it did)")
    v.add_argument("--suite", choices=("mlperf", "tensorrt-llm"), default=None,
                   help="only the MLPerf rows (on their datasets' lengths) or only TensorRT-LLM's (fixed ISL/OSL)")
    v.add_argument("--latency", action="store_true",
                   help="check latencies instead of throughput: simulate one instance of each published MLPerf "
                        "DeepSeek-R1 Server run (sim/served_latency.py) at its own rate and query count, and "
                        "print TPOT p50, TTFT p99 and the sequences in flight, published vs simulated, and the "
                        "cost model's step with the published run's own sequences in flight against its mean TPOT")


def _add_deployment_args(g) -> None:
    g.add_argument("--model", default=None,
                   help=f"{', '.join(MODEL_NAMES)}, a dummy:<preset>, or a Hugging Face config.json (file or folder); "
                        "default llama3.1-8b. calibrate: the model the engine runs (a GGUF file, HF folder or "
                        "dummy:<preset>; default the embedded one)")
    g.add_argument("--hardware", default="h100",
                   help=f"one of {', '.join(HARDWARE)}, or this-machine (after `tokenmill sim calibrate`)")
    g.add_argument("--num-gpus", type=int, default=None, help="devices in the deployment (default: one replica)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel size of a replica")
    g.add_argument("--ep", type=int, default=1, help="expert-parallel size of a replica (MoE models)")
    g.add_argument("--attention-dp", action="store_true", help="data-parallel attention inside a replica")
    g.add_argument("--disagg", default=None, metavar="P:D",
                   help="disaggregated prefill/decode: P prefill and D decode replicas of the --tp/--ep layout "
                        "(the decode ones of --decode-* where given; KV moved between them over NVLink inside one "
                        "scale-up domain, else the network); --num-gpus defaults to what the pools take. With "
                        "--search: auto, to try prefill:decode splits of every layout beside aggregated replicas")
    g.add_argument("--decode-tp", type=int, default=None, metavar="N",
                   help="with --disagg P:D: tensor-parallel size of each decode replica (default --tp; published "
                        "runs often prefill on small replicas and decode on larger ones)")
    g.add_argument("--decode-ep", type=int, default=None, metavar="N",
                   help="with --disagg P:D: expert-parallel size of each decode replica (default --ep)")
    g.add_argument("--decode-attention-dp", action=argparse.BooleanOptionalAction, default=None,
                   help="with --disagg P:D: data-parallel attention in each decode replica (default --attention-dp)")
    g.add_argument("--decode-max-num-seqs", type=int, default=None, metavar="N",
                   help="with --disagg P:D: batch limit of each decode replica (default --max-num-seqs)")
    g.add_argument("--search", action="store_true",
                   help="search the replica layout (TP, EP, attention DP) and --max-num-seqs for the most tokens/s "
                        "per GPU on --num-gpus (server/interactive: at the peak QPS meeting the limits, skipping "
                        "candidates whose Offline figure cannot reach the best); replaces "
                        "--tp/--ep/--attention-dp/--max-num-seqs")
    g.add_argument("--pareto", default=None, metavar="PATH",
                   help="plot tokens/s per GPU against tokens/s per user (1000 / TPOT p50) over --max-num-seqs "
                        "1..1024 and the layouts --search tries on --num-gpus (else the --tp/--ep layout), with "
                        "the Pareto front; writes PATH (.png) and the points as .json next to it")
    g.add_argument("--precision", default=None, choices=("fp32", "bf16", "fp8", "fp4"),
                   help="weights and GEMMs (default: the hardware's, as published runs use: fp8 Hopper, fp4 Blackwell)")
    g.add_argument("--mtp", type=int, default=0, metavar="N", help="draft tokens verified per decode step")
    g.add_argument("--mtp-acceptance", type=float, default=None, metavar="TOKENS",
                   help="mean tokens accepted per decode step with --mtp (default 1 + 0.7 N)")
    g.add_argument("--fused-allreduce", action="store_true",
                   help="tensor-parallel all-reduces fused into the GEMMs they follow, overlapping them (as the "
                        "published MLPerf Llama-3.1-405B runs: TensorRT-LLM's GEMM + all-reduce fusion); default: "
                        "they run between layers, as in our engine")
    g.add_argument("--uplift", action="store_true",
                   help="what each technique is worth: the deployment above (the full stack) against the same "
                        "GPUs with every technique it uses switched off (--ep/--attention-dp, --mtp, --disagg, "
                        "--cached-tokens, --fused-allreduce), and each switched on alone; a table of tokens/s per "
                        "GPU and latencies")


def _add_workload_args(w) -> None:
    w.add_argument("--scenario", choices=SCENARIOS, default="offline")
    w.add_argument("--isl", type=int, default=None, help="prompt tokens per request (default 1024)")
    w.add_argument("--osl", type=int, default=None,
                   help="output tokens per request (default 1024; with --dataset: the mean a published run generated)")
    w.add_argument("--dataset", default=None, choices=DATASET_NAMES,
                   help="draw each prompt's length from this MLPerf dataset's distribution (sim/mlperf_lengths.py) "
                        "and outputs of --osl tokens on average, shaped like its reference answers (replaces --isl)")
    w.add_argument("--num-requests", type=int, default=None,
                   help="offline: requests, all issued at once (default 2000); server/interactive: a fixed count "
                        "instead of --duration (the QPS then capped at their Offline rate); validate: per replica "
                        "and batch size, for rows without a published count (default 2000)")
    w.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="size the run by time, as MLPerf's LoadGen does: server/interactive issue Poisson arrivals "
                        "for this long (at least 100 queries; default 600, MLPerf's min_duration) and count "
                        "tokens/s as LoadGen's 'Completed tokens per second'; offline issues 1.1 x its rate x "
                        "SECONDS requests (default: --num-requests)")
    w.add_argument("--min-query-count", type=int, default=None, metavar="N",
                   help="with a timed run (--duration; server/interactive by default): issue at least N samples "
                        "(offline) or queries (server/interactive), LoadGen's min_query_count, the whole "
                        "deployment's; published MLPerf runs set 100,000+ (sim validate runs each log's own count)")
    w.add_argument("--cached-tokens", type=int, default=0, help="prompt tokens each request finds in the prefix cache")
    w.add_argument("--preset", default=None, help="latency limits of a bench preset (default: the model's, else "
                                                  "llama3.1-8b's)")
    w.add_argument("--ttft-ms", type=float, default=None, help="p99 TTFT limit (overrides the preset)")
    w.add_argument("--tpot-ms", type=float, default=None, help="p99 TPOT limit (overrides the preset)")
    w.add_argument("--target-qps", type=float, default=None,
                   help="server/interactive: simulate this offered QPS (the whole deployment's) instead of "
                        "searching the peak that meets the p99 limits")
    w.add_argument("--replay", default=None, metavar="RESULTS",
                   help="simulate the queries of a measured `tokenmill bench` run (its results.json or run folder): "
                        "each arrives when LoadGen issued it, with its prompt and output tokens; prints measured vs "
                        "simulated (replaces --scenario, --isl, --osl, --num-requests, --target-qps)")
    w.add_argument("--no-enable-prefix-caching", action="store_true",
                   help="with --replay: the server ran without prefix caching (default: a query whose sample was "
                        "issued before in the run is replayed with its prompt cached)")
    w.add_argument("--max-num-seqs", type=int, default=256)
    w.add_argument("--max-num-batched-tokens", type=int, default=8192,
                   help="rows one engine computes per step (prefill chunks + decodes); under --attention-dp, each "
                        "dp rank's (as vLLM's and TensorRT-LLM's max_num_tokens)")
    w.add_argument("--price-per-gpu-hour", type=float, default=None, help="USD (default: the hardware profile's)")
    w.add_argument("--json", action="store_true", help="print one JSON object")
    w.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error", "trace"))


def _add_calibrate_args(c) -> None:
    c.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    c.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="the engine's dtype (auto: the engine's default on --device)")
    c.add_argument("--num-threads", type=int, default=None, help="CPU threads (default: torch's)")


def cmd_sim(args: argparse.Namespace) -> int:
    from dataclasses import replace

    if args.action == "calibrate":
        return _calibrate(args)
    if args.action == "validate":
        return _validate(args)

    from tokenmill.bench.presets import PRESETS
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.models import get_model
    from tokenmill.sim.predict import Deployment, Workload, predict

    model = args.model or "llama3.1-8b"
    arch, hw = get_model(model), get_hardware(args.hardware)
    if args.price_per_gpu_hour is not None:
        hw = replace(hw, price_per_hour=args.price_per_gpu_hour)
    parallel = Parallel(args.tp, args.ep, args.attention_dp)
    accepted = args.mtp_acceptance if args.mtp_acceptance is not None else 1 + 0.7 * args.mtp
    search_splits = args.disagg == "auto"
    if search_splits and not args.search:
        raise ValueError("--disagg auto: only with --search (it searches the prefill:decode split); give P:D")
    decode = _decode_pool(args, parallel)
    split = None if search_splits else parse_disagg(args.disagg, decode)
    devices = split.devices(parallel) if split else parallel.devices
    deployment = Deployment(args.num_gpus or devices, parallel, args.precision or hw.default_precision,
                            args.max_num_seqs, args.max_num_batched_tokens, mtp_depth=args.mtp,
                            mtp_tokens_per_step=accepted, fused_allreduce=args.fused_allreduce, disagg=split)
    preset = args.preset or (model if model in PRESETS else "llama3.1-8b")
    if args.target_qps is not None and (args.scenario not in ("server", "interactive") or args.target_qps <= 0):
        raise ValueError("--target-qps: a positive QPS, with --scenario server or interactive")
    isl, osl, osl_max = _lengths(args)
    workload = Workload(args.scenario, isl, osl, args.num_requests or DEFAULT_NUM_REQUESTS, args.cached_tokens,
                        preset, args.ttft_ms, args.tpot_ms, args.target_qps, dataset=args.dataset, osl_max=osl_max,
                        duration_s=_duration(args), min_queries=_min_queries(args))
    if args.replay:
        return _replay(arch, hw, deployment, workload, args)
    if args.uplift:
        if args.search or args.pareto:
            raise ValueError(f"--uplift and {'--search' if args.search else '--pareto'}: pick one (--uplift compares "
                             "techniques on the layout given)")
        return _uplift(arch, hw, deployment, workload, args.json)
    if args.pareto:
        if args.search:
            raise ValueError("--pareto and --search: pick one (--pareto sweeps the layouts and --max-num-seqs itself)")
        from tokenmill.sim.pareto import front_table, run_pareto

        doc = run_pareto(arch, hw, deployment, workload, args.pareto, model=model,
                         search_layouts=args.num_gpus is not None and split is None)
        print(json.dumps(doc, indent=2) if args.json else front_table(doc))
        return 0
    if args.search:
        figures = _search(arch, hw, deployment, workload, search_splits)
    else:
        figures = predict(arch, hw, deployment, workload)
    print(json.dumps(figures, indent=2) if args.json else _table(figures))
    return 0


def _duration(args: argparse.Namespace) -> float | None:
    """--duration, with MLPerf's 600 s for server/interactive unless --num-requests fixes the count."""
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f"--duration: must be positive seconds, got {args.duration}")
    if args.scenario not in ("server", "interactive"):
        return args.duration
    if args.duration is not None and args.num_requests is not None:
        raise ValueError("--duration and --num-requests: pick one for server/interactive (a run issues arrivals "
                         "for a time, or a fixed number of them)")
    if args.num_requests is not None:
        return None
    from tokenmill.sim.scenarios import MLPERF_MIN_DURATION_S

    return args.duration or MLPERF_MIN_DURATION_S


def _min_queries(args: argparse.Namespace) -> int | None:
    if args.min_query_count is None:
        return None
    if args.min_query_count < 1:
        raise ValueError(f"--min-query-count: must be >= 1, got {args.min_query_count}")
    if _duration(args) is None:
        raise ValueError("--min-query-count: only for a timed run (--duration, or server/interactive without "
                         "--num-requests); otherwise --num-requests is the count")
    return args.min_query_count


def _lengths(args: argparse.Namespace) -> tuple[int, int, int | None]:
    """(isl, osl, output cap): the flags, or with --dataset its mean prompt, the published
    runs' mean output (unless --osl) and the benchmark's output cap."""
    if not args.dataset:
        return args.isl or 1024, args.osl or 1024, None
    if args.isl is not None:
        raise ValueError("--isl and --dataset: pick one (--dataset draws prompt lengths from the dataset)")
    from tokenmill.sim.mlperf_lengths import dataset_means

    isl, osl, osl_max = dataset_means(args.dataset)
    return isl, args.osl or osl, osl_max


_DECODE_FLAGS = ("decode_tp", "decode_ep", "decode_attention_dp", "decode_max_num_seqs")


def _decode_pool(args: argparse.Namespace, parallel) -> dict:
    """The --decode-* flags as PoolSplit fields (empty when none is given); ValueError naming
    a flag given without --disagg P:D or with an impossible value."""
    given = [f for f in _DECODE_FLAGS if getattr(args, f, None) is not None]
    if not given:
        return {}
    flag = "--" + given[0].replace("_", "-")
    if not args.disagg or args.disagg == "auto" or args.search:
        raise ValueError(f"{flag}: only with --disagg P:D and no --search (the decode replicas' own layout; "
                         "the search tries one layout for both pools)")
    from tokenmill.sim.cost import Parallel

    layout = None
    if any(f != "decode_max_num_seqs" for f in given):
        attention_dp = parallel.attention_dp if args.decode_attention_dp is None else args.decode_attention_dp
        try:
            layout = Parallel(parallel.tp if args.decode_tp is None else args.decode_tp,
                              parallel.ep if args.decode_ep is None else args.decode_ep, attention_dp)
        except ValueError as e:
            raise ValueError(f"--decode-tp/--decode-ep: {e}") from None
    return {"decode_parallel": layout, "decode_max_num_seqs": args.decode_max_num_seqs}


def parse_disagg(text: str | None, decode: dict | None = None):
    """``--disagg P:D`` -> PoolSplit (None when not given), with ``decode``'s PoolSplit fields
    (the decode replicas' own layout and batch limit); ValueError naming the flag."""
    if text is None:
        return None
    from tokenmill.sim.disagg import PoolSplit

    try:
        prefill, decode_replicas = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"--disagg: expected P:D (prefill and decode replicas, e.g. 1:3), got {text!r}") from None
    try:
        return PoolSplit(prefill, decode_replicas, **(decode or {}))
    except ValueError as e:
        raise ValueError(f"--disagg: {e}") from None


def _replay(arch, hw, deployment, workload, args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tokenmill.sim.predict import predict
    from tokenmill.sim.replay import comparison_table, load_trace, measured_figures

    for flag, given in (("--uplift", args.uplift), ("--search", args.search), ("--pareto", args.pareto)):
        if given:
            raise ValueError(f"--replay and {flag}: pick one (--replay simulates one deployment on a measured run)")
    trace = load_trace(args.replay, prefix_caching=not args.no_enable_prefix_caching)
    figures = predict(arch, hw, deployment, replace(workload, scenario=trace.result.scenario, requests=trace.requests,
                                                    num_requests=len(trace.requests)))
    if args.json:
        print(json.dumps({"simulated": figures, "measured": measured_figures(trace), "queries": len(trace.requests),
                          "failed_left_out": trace.skipped, "repeated_samples": trace.repeats,
                          "cached_prompt_share": trace.cached_prompt_share}, indent=2))
    else:
        print(comparison_table(trace, figures))
        print()
        print(_table(figures))
    return 0


def _uplift(arch, hw, deployment, workload, as_json: bool) -> int:
    from tqdm import tqdm

    from tokenmill.sim.uplift import table, techniques, uplift

    n = len(techniques(deployment, workload))
    with tqdm(total=n + 1 + (n > 1), desc="Simulating variants", unit="variant", leave=False) as bar:
        variants = uplift(arch, hw, deployment, workload, progress=bar.update)
    if as_json:
        print(json.dumps([{"variant": v.name, "figures": v.figures, "error": v.error or None} for v in variants],
                         indent=2))
    else:
        print(table(variants))
    return 0


def _search(arch, hw, deployment, workload, splits: bool = False) -> dict:
    """The best candidate's figures, with the ten best under "searched" and the
    count of candidates a peak search skipped by their Offline bound."""
    from tqdm import tqdm

    from tokenmill.sim.search import num_candidates, search

    pruned: list = []
    with tqdm(total=num_candidates(arch, hw, deployment.num_gpus, splits), desc="Searching deployments",
              unit="candidate", leave=False) as bar:
        found = search(arch, hw, deployment, workload, progress=bar.update, splits=splits, pruned=pruned)
    if not found:
        raise ValueError(f"--num-gpus: no layout of {deployment.num_gpus} x {hw.name} holds the model's weights")
    return {**found[0].figures, "pruned_by_offline_bound": len(pruned), "searched": [
        {"tp": c.parallel.tp, "ep": c.parallel.ep, "attention_dp": c.parallel.attention_dp,
         "max_num_seqs": c.max_num_seqs, "tokens_per_s_per_gpu": c.score, "qps": c.figures["qps"],
         "disagg": f"{c.disagg.prefill_replicas}:{c.disagg.decode_replicas}" if c.disagg else None}
        for c in found[:10]]}


def _table(f: dict) -> str:
    c = f["config"]
    pools = ""
    if p := c.get("disagg"):
        dec = p["decode"]
        pools = (f"; disaggregated: {p['prefill_replicas']} prefill + {p['decode_replicas']} decode of tp {dec['tp']}, "
                 f"ep {dec['ep']}{', attention dp' if dec['attention_dp'] else ''}, max-num-seqs {dec['max_num_seqs']}")
    lines = [f"{c['scenario']} on {c['num_gpus']} x {c['hardware']} ({c['replicas']} replica(s) of tp {c['tp']}, "
             f"ep {c['ep']}{', attention dp' if c['attention_dp'] else ''}; {c['precision']}{pools})",
             f"  tokens/s per GPU   {f['tokens_per_s_per_gpu']:,.0f}",
             f"  tokens/s           {f['tokens_per_s']:,.0f}"]
    if f["qps"] is not None:
        what = "offered" if c.get("target_qps") else "peak meeting the p99 limits"
        lines.append(f"  QPS                {f['qps']:.2f} ({what})")
    timed = ""
    if c.get("duration_s") and f["qps"]:  # the duration, or longer where --min-query-count asks more queries
        span = max(c["duration_s"], f["requests_simulated"] / f["qps"]) if c.get("min_queries") else c["duration_s"]
        timed = f" ({span:,.0f} s of arrivals)"
    lines.append(f"  requests           {f['requests_simulated']:,}{timed}")
    lines.append(f"  TTFT p50 / p99     {f['ttft_ms']['p50']:,.1f} / {f['ttft_ms']['p99']:,.1f} ms")
    if f["tpot_ms"] is not None:
        lines.append(f"  TPOT p50 / p99     {f['tpot_ms']['p50']:,.2f} / {f['tpot_ms']['p99']:,.2f} ms")
    if f["cost_per_million_tokens"] is not None:
        price = c["price_per_gpu_hour"]
        lines.append(f"  $ per 1M tokens    {f['cost_per_million_tokens']:.3f} (at ${price}/GPU-hour)")
    for i, c in enumerate(f.get("searched", ())):
        if i == 0:
            lines.append("  best layouts searched (tokens/s per GPU):")
        pools = f", disagg {c['disagg']}" if c.get("disagg") else ""
        lines.append(f"    tp {c['tp']:>2}, ep {c['ep']:>2}{', attention dp' if c['attention_dp'] else '':15} "
                     f"max-num-seqs {c['max_num_seqs']:>5}{pools}: {c['tokens_per_s_per_gpu']:,.0f}")
    if f.get("pruned_by_offline_bound"):
        lines.append(f"    ({f['pruned_by_offline_bound']} more skipped: their Offline figure could not "
                     "reach the best)")
    lines.append("  (the model's estimate; `tokenmill sim validate` and docs/SIMULATOR.md say how far to trust it)")
    return "\n".join(lines)


def _validate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    if args.latency:
        return _validate_latency(args)

    from tokenmill.sim.published import RESULTS
    from tokenmill.sim.validate import table, validate

    rows = tuple(r for r in RESULTS if args.model in (None, r.model)
                 and args.suite in (None, "mlperf" if r.dataset else "tensorrt-llm"))
    if not rows:
        raise ValueError(f"--model/--suite: no published row of {args.model or 'any model'} in "
                         f"{args.suite or 'any suite'}")
    finished: dict[int, object] = {}

    def on_row(i: int, checked) -> None:  # --out: the table so far, so an interrupted run keeps its rows
        finished[i] = checked
        if args.out:
            Path(args.out).write_text(table([finished[k] for k in sorted(finished)]) + "\n")

    with tqdm(total=len(rows), desc="Simulating published rows", unit="row", leave=False) as bar:
        checked = validate(args.num_requests or DEFAULT_NUM_REQUESTS, rows, progress=bar.update, jobs=args.jobs,
                           on_row=on_row)
    if args.json:
        print(json.dumps([{"model": c.row.model, "hardware": c.row.hardware, "num_gpus": c.row.num_gpus,
                           "precision": c.row.precision, "parallel": c.row.parallel, "scenario": c.row.scenario,
                           "isl": c.row.isl, "osl": c.row.osl, "published": c.row.tokens_per_s_per_gpu,
                           "simulated": c.simulated, "error": c.error, "max_num_seqs": c.max_num_seqs,
                           "skipped": c.skipped or None, "source": c.row.source} for c in checked], indent=2))
    else:
        print(table(checked))
    return 0


def _validate_latency(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tokenmill.sim.served_latency import RUNS, check_runs, latency_table

    runs = tuple(r for r in RUNS if args.model in (None, r.model))
    if not runs:
        raise ValueError(f"--model: no published Server run of {args.model} with latencies (sim/served_latency.py)")
    with tqdm(total=len(runs), desc="Simulating published Server runs", unit="run", leave=False) as bar:
        checks = check_runs(runs, jobs=args.jobs, progress=bar.update)
    text = latency_table(checks)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(json.dumps([{"org": c.run.org, "system": c.run.system, "hardware": c.run.hardware,
                           "num_gpus": c.run.num_gpus, "qps": c.run.qps,
                           "published": {"tpot_p50_ms": c.run.tpot_p50_ms, "tpot_p99_ms": c.run.tpot_p99_ms,
                                         "tpot_mean_ms": c.run.tpot_mean_ms, "ttft_p99_ms": c.run.ttft_p99_ms,
                                         "in_flight": c.run.in_flight},
                           "simulated": {"tpot_p50_ms": c.tpot_p50_ms, "tpot_p99_ms": c.tpot_p99_ms,
                                         "ttft_p99_ms": c.ttft_p99_ms, "in_flight": c.in_flight,
                                         "step_at_published_batch_ms": c.step_at_published_ms}}
                          for c in checks], indent=2))
    else:
        print(text)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from tokenmill.sim.calibrate import PROFILE_PATH, calibrate

    profile, points, error = calibrate(args.dtype, args.num_threads, args.device, args.model)
    e = profile.efficiency
    print(f"this-machine ({profile.sources[0].split(': ', 1)[1]}): memory read {profile.memory_bw / 1e9:.1f} GB/s, "
          f"{profile.default_precision} GEMM {profile.flops[profile.default_precision] / 1e9:.0f} GFLOP/s")
    for (batch, tokens), seconds in points:
        what = f"decode step, batch {batch}" if batch else f"prefill of {tokens} tokens"
        print(f"  engine {what}: {seconds * 1e3:.2f} ms")
    eager = "" if e.eager_step_overhead_s is None else f" ({e.eager_step_overhead_s * 1e3:.2f} ms for an eager step)"
    print(f"fitted efficiency: memory {e.memory:.2f}, gemm {e.gemm:.2f}; host overhead {e.step_overhead_s * 1e3:.2f} "
          f"ms per step{eager} + {e.seq_overhead_s * 1e6:.1f} us per sequence; compute and memory "
          f"{'overlapped' if profile.overlap else 'added'}; largest step-time error {error * 100:.1f}%")
    print(f"wrote {PROFILE_PATH}")
    return 0
