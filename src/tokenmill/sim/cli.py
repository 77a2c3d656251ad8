"""``tokenmill sim``: predict one deployment's throughput, latency and cost.

Checked against published results by ``tokenmill sim validate`` (sim/validate.py,
docs/SIMULATOR.md): most of TensorRT-LLM's table and DeepSeek-R1's and
Llama-3.1-405B's MLPerf v6.0 rows within 25%, DeepSeek-R1's v5.1 rows at the v5.1 kernels
(``--kernels``) and, for Server, with the host's response path (``--host-stream-rate``); NVIDIA's
GB300 rack Server row, the Interactive rows and gpt-oss on Hopper not; the figures are the cost
model's and the scheduler simulation's, nothing more.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenmill.sim.cli_args import DEFAULT_NUM_REQUESTS
from tokenmill.sim.disagg_flags import decode_pool, parse_disagg, split_rule
from tokenmill.sim.draws import check_draws, draws_table
from tokenmill.sim.hardware import get_hardware, with_tile_rule
from tokenmill.sim.jobs import check_jobs
from tokenmill.sim.uplift_cli import kernels_flag, run_uplift


def cmd_sim(args: argparse.Namespace) -> int:
    from dataclasses import replace

    if args.action != "predict" and (args.draws != 1 or args.seed != 0):
        raise ValueError(f"--draws and --seed: for a prediction, not {args.action} (which draws its own runs)")
    if args.action == "calibrate":
        from tokenmill.sim.calibrate_cli import run_calibrate
        return run_calibrate(args)
    if args.action == "validate":
        return _validate(args)

    from tokenmill.sim.auto import fewest_gpus, needs_layout_choice
    from tokenmill.sim.models import get_model

    model = args.model or "llama3.1-8b"
    kernels = kernels_flag(args)  # before this-machine's profile is loaded: refused there either way
    arch, hw = get_model(model), get_hardware(args.hardware)
    if args.tile_rule:
        hw = with_tile_rule(hw)
    if args.price_per_gpu_hour is not None:
        hw = replace(hw, price_per_hour=args.price_per_gpu_hour)
    deployment = _deployment(args, hw, kernels)
    if not deployment.cuda_graphs or args.baseline_eager:  # refuse a profile with no eager price up front
        from tokenmill.sim.cuda_graphs import without_cuda_graphs

        without_cuda_graphs(hw, arch.num_layers, deployment.eager_layer_s)
    workload = _workload(args, model)
    if args.step_log and not args.replay:
        raise ValueError("--step-log: a server's steps during a measured run; give the run with --replay")
    if args.replay:
        return _replay(arch, hw, deployment, workload, args)
    check_jobs(args.jobs)
    if args.draws > 1:
        for flag, given in (("--uplift", args.uplift), ("--search", args.search), ("--pareto", args.pareto)):
            if given:
                raise ValueError(f"--draws and {flag}: pick one (--draws repeats one deployment's run)")
    choose = needs_layout_choice(arch, hw, deployment, args)
    if choose and args.num_gpus is None:
        deployment = replace(deployment, num_gpus=fewest_gpus(arch, hw, deployment))
    if args.uplift:
        if args.search or args.pareto:
            raise ValueError(f"--uplift and {'--search' if args.search else '--pareto'}: pick one (--uplift compares "
                             "techniques on the layout given)")
        return run_uplift(arch, hw, deployment, workload, args, choose)
    if args.pareto:
        if args.search:
            raise ValueError("--pareto and --search: pick one (--pareto sweeps the layouts and --max-num-seqs itself)")
        from tokenmill.sim.pareto import front_table, run_pareto

        doc = run_pareto(arch, hw, deployment, workload, args.pareto, model=model,
                         search_layouts=(args.num_gpus is not None or choose) and deployment.disagg is None,
                         jobs=args.jobs)
        print(json.dumps(doc, indent=2) if args.json else front_table(doc))
        return 0
    figures = _figures(arch, hw, deployment, workload, args, choose)
    print(json.dumps(figures, indent=2) if args.json else _table(figures))
    return 0


def _figures(arch, hw, deployment, workload, args: argparse.Namespace, choose: bool) -> dict:
    """One prediction's figures: the best of --search, the layout chosen where none is given, the
    spread over --draws, or the plain run."""
    from tokenmill.sim.auto import choose_layout
    from tokenmill.sim.predict import is_peak_search, predict
    from tokenmill.sim.scenario_run import peak_search_bar

    if args.search:
        splits = args.disagg == "auto"
        return _search(arch, hw, deployment, workload, splits=splits, jobs=args.jobs,
                       rule=split_rule(args) if splits else None)
    if choose:
        deployment, figures = choose_layout(arch, hw, deployment, workload, jobs=args.jobs)
        if args.draws == 1:
            return figures
        # The layout chosen on the first draw, then every draw on it.
        return {**_draws(arch, hw, deployment, workload, args), "searched": figures["searched"],
                "pruned_by_offline_bound": figures.get("pruned_by_offline_bound"), "layout_chosen": True}
    if args.draws > 1:
        return _draws(arch, hw, deployment, workload, args)
    with peak_search_bar(is_peak_search(workload)) as on_run:
        return predict(arch, hw, deployment, workload, on_peak_run=on_run, jobs=args.jobs)


def _draws(arch, hw, deployment, workload, args: argparse.Namespace) -> dict:
    from tqdm import tqdm

    from tokenmill.sim.draws import run_draws

    with tqdm(total=args.draws, desc="Simulating draws", unit="draw", leave=False) as bar:
        return run_draws(arch, hw, deployment, workload, args.draws, jobs=args.jobs, on_done=bar.update)


def _deployment(args: argparse.Namespace, hw, kernels: str):
    """The Deployment the flags describe (``--disagg auto`` leaves the split to ``--search``)."""
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.predict import Deployment

    if args.num_gpus is not None and args.num_gpus < 1:
        raise ValueError(f"--num-gpus: must be >= 1, got {args.num_gpus}")
    parallel = Parallel(1 if args.tp is None else args.tp, 1 if args.ep is None else args.ep, args.attention_dp)
    stages = 1 if args.pp is None else args.pp
    if stages != 1 and args.search:
        raise ValueError("--pp and --search: the search tries pipeline stages itself (it replaces --tp/--pp)")
    if stages != 1 and (args.uplift or args.pareto):
        flag = "--uplift" if args.uplift else "--pareto"
        raise ValueError(f"--pp and {flag}: {flag} does not try pipeline-parallel layouts; simulate the layout alone")
    accepted = args.mtp_acceptance if args.mtp_acceptance is not None else 1 + 0.7 * args.mtp
    search_splits = args.disagg == "auto"
    if search_splits and not args.search:
        raise ValueError("--disagg auto: only with --search (it searches the prefill:decode split); give P:D")
    if args.stream_interval != 1 and args.host_stream_rate is None:
        raise ValueError("--stream-interval: only matters with --host-stream-rate (the responses/s the host "
                         "handles); without it every token is seen when its step ends")
    pool = decode_pool(args, parallel)  # checks the --decode-* and rule flags in every mode
    split = None if search_splits else parse_disagg(args.disagg, pool)
    devices = split.devices(parallel) if split else parallel.devices * stages
    return Deployment(args.num_gpus or devices, parallel, args.precision or hw.default_precision,
                      args.max_num_seqs, args.max_num_batched_tokens, mtp_depth=args.mtp,
                      mtp_tokens_per_step=accepted, fused_allreduce=args.fused_allreduce, router=args.router,
                      overlap_scheduler=args.overlap_scheduler,
                      chunked_prefill=args.chunked_prefill, adp_balance=parse_adp_balance(args), disagg=split,
                      kv_cache_bytes=_kv_cache_bytes(args), kv_free_fraction=_kv_free_fraction(args),
                      kv_cache_dtype=args.kv_cache_dtype, kernels=kernels, host_stream_rate=args.host_stream_rate,
                      stream_interval=args.stream_interval, cuda_graphs=args.cuda_graphs,
                      eager_layer_s=_eager_layer_s(args), pipeline_parallel=stages,
                      host_seq_s=None if args.host_seq_us is None else args.host_seq_us / 1e6)


def _eager_layer_s(args: argparse.Namespace) -> float | None:
    """--eager-layer-ms in seconds, with the flags that price eager steps; ValueError naming the flag."""
    if args.baseline_eager and not args.uplift:
        raise ValueError("--baseline-eager: only with --uplift (it sets the uplift table's baseline)")
    if args.baseline_eager and not args.cuda_graphs:
        raise ValueError("--baseline-eager and --no-cuda-graphs: pick one (the uplift adds CUDA graphs to an eager "
                         "baseline; the full stack needs them)")
    if args.eager_layer_ms is None:
        return None
    if args.cuda_graphs and not args.baseline_eager:
        raise ValueError("--eager-layer-ms: only with --no-cuda-graphs or --baseline-eager (it prices eager steps)")
    if args.eager_layer_ms < 0:
        raise ValueError(f"--eager-layer-ms: must be >= 0, got {args.eager_layer_ms}")
    return args.eager_layer_ms / 1e3


def _workload(args: argparse.Namespace, model: str):
    """The Workload the flags describe; latency limits from the model's bench preset unless given."""
    from tokenmill.bench.presets import PRESETS
    from tokenmill.sim.predict import Workload

    preset = args.preset or (model if model in PRESETS else "llama3.1-8b")
    if args.target_qps is not None and (args.scenario not in ("server", "interactive") or args.target_qps <= 0):
        raise ValueError("--target-qps: a positive QPS, with --scenario server or interactive")
    if args.num_samples is not None and (args.scenario not in ("server", "interactive") or args.num_samples < 1):
        raise ValueError("--num-samples: a positive count, with --scenario server or interactive (their queries draw "
                         "from the sample set)")
    check_draws(args.draws, args.seed)
    isl, osl, osl_max = _lengths(args)
    return Workload(args.scenario, isl, osl, args.num_requests or DEFAULT_NUM_REQUESTS, args.cached_tokens,
                    preset, args.ttft_ms, args.tpot_ms, args.target_qps, dataset=args.dataset, osl_max=osl_max,
                    duration_s=_duration(args), min_queries=_min_queries(args), num_samples=args.num_samples,
                    shared_prefix=_shared_prefix(args.shared_prefix), seed=args.seed)


def _shared_prefix(text: str | None) -> tuple[int, int] | None:
    """--shared-prefix N:TOKENS -> (N, TOKENS); ValueError naming the flag."""
    if text is None:
        return None
    groups, _, tokens = text.partition(":")
    try:
        parsed = int(groups), int(tokens)
    except ValueError:
        raise ValueError(f"--shared-prefix: N:TOKENS (prefixes and their tokens), got {text!r}") from None
    if min(parsed) < 1:
        raise ValueError(f"--shared-prefix: N:TOKENS, both >= 1, got {text!r}")
    return parsed


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


def _kv_cache_bytes(args: argparse.Namespace) -> float | None:
    if args.kv_cache_memory_gib is None:
        return None
    if args.kv_cache_memory_gib <= 0:
        raise ValueError(f"--kv-cache-memory-gib: must be > 0, got {args.kv_cache_memory_gib}")
    return args.kv_cache_memory_gib * 2**30


def _kv_free_fraction(args: argparse.Namespace) -> float | None:
    fraction = args.kv_cache_free_fraction
    if fraction is None:
        return None
    if not 0 < fraction <= 1:
        raise ValueError(f"--kv-cache-free-fraction: a fraction in (0, 1], got {fraction}")
    if args.kv_cache_memory_gib is not None:
        raise ValueError("--kv-cache-free-fraction: not with --kv-cache-memory-gib (each sizes the KV cache)")
    return fraction


def parse_adp_balance(args: argparse.Namespace) -> tuple[int, int] | None:
    """--adp-balance WAIT:TIMEOUT -> (WAIT, TIMEOUT); ValueError naming the flag."""
    text = args.adp_balance
    if text is None:
        return None
    if not (args.attention_dp or args.search):
        raise ValueError("--adp-balance: needs --attention-dp (it balances prompts over attention-DP ranks)")
    wait, sep, timeout = text.partition(":")
    if not (sep and wait.isdigit() and timeout.isdigit()):
        raise ValueError(f"--adp-balance: expected WAIT:TIMEOUT steps (e.g. 3:9), got {text!r}")
    return int(wait), int(timeout)


def _replay(arch, hw, deployment, workload, args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tokenmill.sim import served_steps as served
    from tokenmill.sim.predict import predict
    from tokenmill.sim.replay import comparison_table, load_trace, measured_figures
    from tokenmill.sim.step_price import replica_step_seconds

    for flag, given in (("--uplift", args.uplift), ("--search", args.search), ("--pareto", args.pareto),
                        ("--draws", args.draws > 1), ("--seed", args.seed != 0)):
        if given:
            raise ValueError(f"--replay and {flag}: pick one (--replay simulates one deployment on a measured run's "
                             "own arrivals)")
    trace = load_trace(args.replay, prefix_caching=not args.no_enable_prefix_caching, step_log=args.step_log)
    replayed = replace(workload, scenario=trace.result.scenario, requests=trace.requests,
                       num_requests=len(trace.requests))
    figures = predict(arch, hw, deployment, replayed)
    steps = repriced = workers = None
    if trace.steps:  # the engine's steps were kept: price each, and replay again at their prices
        price = replica_step_seconds(arch, hw, deployment)
        steps = served.price_steps(trace.steps, price)
        if trace.worker_steps:
            workers = served.price_workers(trace.worker_steps, price, trace.result.metrics.engine_workers)
        if deployment.pipeline_parallel == 1:
            repriced = predict(arch, hw, deployment, replayed, reprice=lambda p: served.at_served_prices(p, steps))
    if args.json:
        print(json.dumps({"simulated": figures, "measured": measured_figures(trace), "queries": len(trace.requests),
                          "failed_left_out": trace.skipped, "repeated_samples": trace.repeats,
                          "repeated_prompt_share": trace.repeated_prompt_share, "served_steps": steps,
                          "served_steps_by_worker": workers, "simulated_at_served_prices": repriced}, indent=2))
    else:
        print(comparison_table(trace, figures, repriced))
        if steps:
            print("\n" + served.served_steps_table(steps))
        if workers:
            print("\n" + served.workers_table(workers))
        print()
        print(_table(figures))
    return 0


def _search(arch, hw, deployment, workload, splits: bool = False, jobs: int = 1, rule: dict | None = None) -> dict:
    """The best candidate's figures, with the ten best under "searched" and the
    count of candidates a peak search skipped by their Offline bound (``rule``: each split's, search.search's
    ``split_rule``)."""
    from tqdm import tqdm

    from tokenmill.sim.search import progress_steps, search, searched_figures

    pruned: list = []
    with tqdm(total=progress_steps(arch, hw, deployment.num_gpus, workload, splits), desc="Searching deployments",
              unit="step", leave=False) as bar:
        found = search(arch, hw, deployment, workload, progress=bar.update, splits=splits, pruned=pruned, jobs=jobs,
                       split_rule=rule)
    if not found:
        raise ValueError(f"--num-gpus: no layout of {deployment.num_gpus} x {hw.name} holds the model's weights")
    return searched_figures(found, pruned)


def _table(f: dict) -> str:
    c = f["config"]
    pools = ""
    if p := c.get("disagg"):
        dec = p["decode"]
        pools = (f"; disaggregated: {p['prefill_replicas']} prefill + {p['decode_replicas']} decode of tp {dec['tp']}, "
                 f"ep {dec['ep']}{', attention dp' if dec['attention_dp'] else ''}, max-num-seqs {dec['max_num_seqs']}")
    sched = "" if c.get("chunked_prefill", True) else "; whole prompts"
    if c.get("num_samples"):
        sched += f"; queries drawn from {c['num_samples']:,} samples"
    if c.get("cuda_graphs") is False:
        sched += f"; no CUDA graphs ({c['eager_step_ms']:.1f} ms of host work an eager step)"
    if c.get("adp_balance"):
        sched += f"; attention-DP prompt balancing {c['adp_balance'][0]}:{c['adp_balance'][1]}"
    if c.get("host_seq_s"):
        sched += f"; host {c['host_seq_s'] * 1e6:.0f} us per sequence a step"
    if c.get("host_stream_rate"):
        sched += f"; host {c['host_stream_rate']:,.0f} responses/s, stream interval {c['stream_interval']}"
    stages = f", pp {c['pp']}" if c.get("pp", 1) > 1 else ""
    lines = [f"{c['scenario']} on {c['num_gpus']} x {c['hardware']} ({c['replicas']} replica(s) of tp {c['tp']}, "
             f"ep {c['ep']}{', attention dp' if c['attention_dp'] else ''}{stages}; {c['precision']}"
             f"{', tile rule' if c.get('tile_rule') else ''}{pools}{sched})",
             f"  tokens/s per GPU   {f['tokens_per_s_per_gpu']:,.0f}",
             f"  tokens/s           {f['tokens_per_s']:,.0f}"]
    if f["qps"] == 0.0:
        lines.append("  QPS                none meets the p99 limits (the latencies below are the lowest rate tried's)")
    elif f["qps"] is not None:
        what = "offered" if c.get("target_qps") else "peak meeting the p99 limits"
        lines.append(f"  QPS                {f['qps']:.2f} ({what})")
    timed = ""
    if c.get("duration_s") and f["qps"]:  # the duration, or longer where --min-query-count asks more queries
        span = max(c["duration_s"], f["requests_simulated"] / f["qps"]) if c.get("min_queries") else c["duration_s"]
        timed = f" ({span:,.0f} s of arrivals)"
    lines.append(f"  requests           {f['requests_simulated']:,}{timed}")
    if f.get("prefix_cache_hit_rate"):
        lines.append(f"  prefix-cache hits  {f['prefix_cache_hit_rate']:.1%} of prompt tokens")
    lines.append(f"  TTFT p50 / p99     {f['ttft_ms']['p50']:,.1f} / {f['ttft_ms']['p99']:,.1f} ms")
    if f["tpot_ms"] is not None:
        lines.append(f"  TPOT p50 / p99     {f['tpot_ms']['p50']:,.2f} / {f['tpot_ms']['p99']:,.2f} ms")
    if f["cost_per_million_tokens"] is not None:
        price = c["price_per_gpu_hour"]
        lines.append(f"  $ per 1M tokens    {f['cost_per_million_tokens']:.3f} (at ${price}/GPU-hour)")
    for i, c in enumerate(f.get("searched", ())):
        if i == 0:
            tried = "layouts tried" if f.get("layout_chosen") else "best layouts searched"
            lines.append(f"  {tried} (tokens/s per GPU):")
        pools = f", disagg {c['disagg']}" if c.get("disagg") else ""
        pools += f", pp {c['pp']}" if c.get("pp", 1) > 1 else ""
        lines.append(f"    tp {c['tp']:>2}, ep {c['ep']:>2}{', attention dp' if c['attention_dp'] else '':15} "
                     f"max-num-seqs {c['max_num_seqs']:>5}{pools}: {c['tokens_per_s_per_gpu']:,.0f}")
    if f.get("pruned_by_offline_bound"):
        lines.append(f"    ({f['pruned_by_offline_bound']} more skipped: their Offline figure could not "
                     "reach the best)")
    if f.get("layout_chosen"):
        lines.append("  (layout chosen, as one device does not hold the weights: pin one with --tp/--ep/--attention-dp/"
                     "--pp; --search also tries --max-num-seqs)")
    if f.get("draws"):
        lines.append(draws_table(f["draws"]))
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
        print(json.dumps([{"model": c.run.model, "round": c.run.round, "org": c.run.org, "system": c.run.system,
                           "hardware": c.run.hardware,
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
