"""``tokenmill sim calibrate``: this machine's hardware profile, fitted to our own engine.

Two kinds of measurement, both on this machine's CPU, or its GPU with ``--device cuda``:
1. microbenchmarks: memory read bandwidth (summing a 512 MiB tensor; 1 GiB on
   a GPU) and dense GEMM rate (1024^3 matmuls; 8192^3 on a GPU) in the
   engine's dtype (on a CPU, or float32's where that is faster): the profile's peaks;
2. our engine's own step times as it serves (the embedded model, or
   ``--model``; outputs streamed to consumers on an event loop, as `tokenmill
   bench` and `serve` read them): decode steps at several batch sizes, a
   prompt's prefill alone at each ``--prefill-tokens`` length (64 and 256 by
   default), a prefill chunk beside decodes (the step a request that
   arrives while others decode waits on for its first token: a Server run's
   TTFT), and one beside decodes that continues over a prefix-cache hit
   (``CACHED_STEP``), and decode steps over long contexts (``LONG_DECODE``), each the median of
   repeated steps over alternated rounds.

The profile's efficiency factors (memory, GEMM, host overhead per step and
per sequence, and with CUDA graphs a per-step cost of the eager steps) are
then the ones under which the cost model (cost.py) best reproduces the
measured steps, all but ``CACHED_STEP`` and ``LONG_DECODE``; the largest relative error is
reported. Then the rate at which attention reads cached K/V is fitted on ``LONG_DECODE`` alone
(``fit_kv_read``), and the profile's price of ``CACHED_STEP`` is set beside its measured time
(a check, not fitted). The profile is written to ``~/.cache/tokenmill/sim/this-machine.json``
and read by ``--hardware this-machine`` (``--profile NAME``: ``NAME.json``, read by
``--hardware NAME``; with the engine's kernel flags, e.g. the uplift baseline's torch kernels,
it prices that engine's steps). A GPU's profile keeps its datasheet entry's interconnect and
price (hardware.py) where its name matches one.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path

from tokenmill.sim.hardware import Efficiency, Hardware
from tokenmill.sim.machine_id import cpu_fingerprint, gpu_fingerprint, warn_if_other_machine

PROFILE_DIR = Path(os.environ.get("TOKENMILL_CACHE", Path.home() / ".cache" / "tokenmill")) / "sim"
THIS_MACHINE = "this-machine"
"""The default profile name; ``--profile NAME`` calibrates another (e.g. the engine with other
kernels: the baseline of ``tokenmill sim --uplift --baseline-kernels NAME``)."""
ENGINE_FIELDS = ("attention_backend", "fused_ops", "linear_backend", "enforce_eager")
"""EngineConfig fields ``tokenmill sim calibrate`` takes as flags: what computes the steps it times."""
DECODE_BATCHES = (1, 8, 32)
PREFILL_TOKENS = (64, 256)
MIXED_STEP = (4, 128)
"""(decodes, prefill tokens) of the calibrated step that carries both: the cost
model adds the two parts' costs, and this point checks that the engine does
too (on the AVX2 EPYC its float32 linears once switched kernels past 128 rows,
and a 128-token chunk beside a few decodes cost 1.2x what the chunk did alone)."""
CACHED_STEP = (4, 192)
"""(decodes, prompt tokens computed) of the calibrated step whose prompt continues over cached
context: a prompt of ``CACHED_CONTEXT`` + 192 tokens whose first ``CACHED_CONTEXT`` are a prefix
hit, beside 4 decodes (196 rows: past the largest CUDA graph, so eager on a GPU). Served workloads
have such chunks (prefix hits, prompts cut by the budget). On an H200 our engine's eager steps with
one cost 2.99x the fitted profile's price in an Offline run and 1.11x at the median in a Server run
(docs/SIMULATOR.md "The lent H200"): no one cost per chunk explains both, so this step is timed and
checked against the profile's price, not fitted."""
CACHED_CONTEXT = 64
LATE_SLACK_TOKENS = 1024
"""Tokens the decodes beside a late prompt may run past theirs while it is answered (``_serve``)."""
CONTEXT = 64  # prompt tokens of each decoding request
LONG_DECODE = (4, 0)
"""(decodes, prefill tokens) of the calibrated decode step over long contexts: 4 requests whose
prompts are ``LONG_CONTEXT`` tokens each. The other steps read little cached K/V (64-token
contexts); this one reads 4 x 1,024 tokens' worth, and fits the profile's K/V read rate
(``Efficiency.kv_read``) alone, after the other factors are fitted without it. On a 2-core Xeon at
one thread a profile without it priced such a step at 0.91x its time (the K/V at the memory rate
fitted on the weights' stream), and the steps of served runs over 1,024-token shared prefixes at
0.83-0.91x; the torch attention path, which copies each sequence's blocks out of the paged cache,
fits 0.22 of the memory rate (docs/SIMULATOR.md "Steps over long contexts")."""
LONG_CONTEXT = 1024
ROUNDS = 4  # each shape timed in this many alternated rounds (measure_served_steps)
DEFAULT_PRICE_PER_HOUR = 0.10
"""USD per hour: a nominal small cloud VM; pass --price-per-gpu-hour to tokenmill sim for your own."""


_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A profile's name is a plain file name: no path separators, no leading dot."""


def profile_path(name: str = THIS_MACHINE) -> Path:
    """Where calibrate writes profile ``name``; ValueError unless it is a plain file name."""
    if not _PROFILE_NAME.fullmatch(name):
        raise ValueError(f"--profile: letters, digits, '.', '_' and '-' (a file name), got {name!r}")
    return PROFILE_DIR / f"{name}.json"


def has_profile(name: str) -> bool:
    return _PROFILE_NAME.fullmatch(name) is not None and profile_path(name).is_file()


def load_profile(name: str = THIS_MACHINE, flag: str = "--hardware") -> Hardware:
    """The calibrated profile ``name`` (``tokenmill sim calibrate --profile NAME``); a ValueError
    naming ``flag`` where there is none."""
    path = profile_path(name)
    if not path.is_file():
        named = "" if name == THIS_MACHINE else f" --profile {name}"
        raise ValueError(f"{flag}: no {name} profile at {path}; run `tokenmill sim calibrate{named}` first")
    d = json.loads(path.read_text())
    warn_if_other_machine(name, d.pop("machine", None))  # where calibrate recorded it
    # Profiles written before routed experts had their own stream rate stream them as the rest.
    d.setdefault("efficiency", {}).setdefault("expert_stream", None)
    d["efficiency"].setdefault("upcast_expert_gemm", None)  # nor their own upcast GEMM rate
    return Hardware.from_dict(d)


def _machine(device) -> dict:
    """The machine the profile priced (sim/machine_id.py), recorded in its file."""
    if device.type == "cuda":
        import torch

        return gpu_fingerprint(torch.cuda.get_device_name(device))
    return cpu_fingerprint()


def measure_peaks(dtype, device) -> tuple[float, float]:
    """(memory read bytes/s, GEMM FLOP/s in ``dtype``) on ``device``, best of several runs."""
    import torch

    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    big = torch.ones(1 << (28 if cuda else 27), dtype=torch.float32, device=device)  # 1 GiB / 512 MiB
    best_bw = 0.0
    for _ in range(5):
        sync()
        start = time.perf_counter()
        big.sum()
        sync()
        best_bw = max(best_bw, big.numel() * 4 / (time.perf_counter() - start))
    n, reps = (8192, 20) if cuda else (1024, 4)
    # On a CPU, the engine's bf16 linears widen their weights to float32 in registers where the
    # CPU has no bf16 arithmetic (kernels/csrc), so they run at the float32 FMA rate, which torch's
    # own bf16 matmul does not reach there (measured 49 vs 141 GFLOP/s float32 on a 2-core Xeon
    # without AVX512-BF16): the peak is the faster of the two.
    dtypes = (dtype,) if cuda or dtype == torch.float32 else (dtype, torch.float32)
    best_flops = 0.0
    for kind in dtypes:
        a = torch.randn(n, n, dtype=kind, device=device)
        for _ in range(5):
            sync()
            start = time.perf_counter()
            for _ in range(reps):
                a @ a
            sync()
            best_flops = max(best_flops, reps * 2 * n ** 3 / (time.perf_counter() - start))
    return best_bw, best_flops


def measure_served_steps(engine, batches=DECODE_BATCHES, repeats: int = 12, rounds: int = ROUNDS,
                         prefill_tokens=PREFILL_TOKENS) -> list[tuple[tuple[int, int], float]]:
    """((decode batch, prefill tokens), median seconds) of our engine's steps as
    it serves: ``engine`` is an AsyncEngine, its steps on its own thread, the
    outputs streamed to consumers on this thread's event loop (as `tokenmill
    bench` and `tokenmill serve` read them), each step timed from taking its
    inbox to its outputs ready to hand off (AsyncEngine.step_log). Every shape is
    timed in each of ``rounds`` rounds and its median taken over all of them:
    this VM's speed drifts by tens of percent within minutes, and shapes timed
    one after another once would fit that drift as a bend of the step curve."""
    import asyncio

    def times_of(runs: list[tuple[list[list[int]], int, list[list[int]]]], decodes: int, prefill: int) -> list[float]:
        engine.step_log = []
        for prompts, max_tokens, late in runs:
            asyncio.run(_serve(engine, prompts, max_tokens, late))
        times = [s.seconds for s in engine.step_log if (s.decodes, s.chunk_tokens) == (decodes, prefill)]
        engine.step_log = None
        if not times:
            raise RuntimeError(f"calibrate: no step of {decodes} decodes and {prefill} prefill tokens was seen")
        return times

    rng = random.Random(0)
    vocab = engine.engine.core.arch.vocab_size

    def prompt(n: int) -> list[int]:  # random ids: no prefix-cache hits between prompts
        return [rng.randrange(10, vocab) for _ in range(n)]

    if LONG_DECODE in [(batch, 0) for batch in batches]:
        raise ValueError(f"calibrate: decode batch {LONG_DECODE[0]} is the long-context step's; time other batches")
    shapes = [(batch, 0) for batch in batches] + [(0, tokens) for tokens in prefill_tokens] + [MIXED_STEP,
                                                                                              CACHED_STEP, LONG_DECODE]
    samples: dict[tuple[int, int], list[float]] = {shape: [] for shape in shapes}
    decode_steps = -(-repeats // rounds)  # per round, so that `repeats` or more are timed in all
    prefills = -(-max(3, repeats // 4) // rounds)  # per round, of each prompt length
    for _ in range(rounds):
        for batch, tokens in shapes:
            if not tokens:  # the batch's prompts take a few prefill steps; then decode_steps+ steps of all of them
                context = LONG_CONTEXT if (batch, tokens) == LONG_DECODE else CONTEXT
                runs = [([prompt(context) for _ in range(batch)], decode_steps + 12, [])]
            elif (batch, tokens) == CACHED_STEP:  # a prefix served first, then a prompt that starts with it
                runs = []
                for _ in range(prefills):
                    prefix = prompt(CACHED_CONTEXT)
                    decoding = [prompt(CONTEXT) for _ in range(batch)]
                    runs += [([], 1, [prefix]), (decoding, 14, [prefix + prompt(tokens)])]
            else:  # a prompt alone, or arriving while `batch` others decode (their 2 tokens + 12 to spare)
                runs = [([prompt(CONTEXT) for _ in range(batch)], 14, [prompt(tokens)]) for _ in range(prefills)]
            samples[(batch, tokens)] += times_of(runs, batch, tokens)
    return [(shape, statistics.median(samples[shape])) for shape in shapes]


async def _serve(engine, prompts: list[list[int]], max_tokens: int, late: list[list[int]]) -> None:
    """On ``engine`` (an AsyncEngine): ``prompts`` each decode ``max_tokens``
    tokens; each of ``late`` (one token each) arrives once every one of them has
    its second token, so that its prefill shares a step with their decodes.
    With ``late``, the decodes go on past ``max_tokens`` until every late prompt
    is answered, then are aborted: the engine thread steps on while this loop
    hands out outputs, and in a busy process (the test suite) the loop fell
    more than 12 steps behind, so the decodes had ended before the late prompt
    came in and the step beside them was never taken."""
    import asyncio
    import contextlib

    from tokenmill.sampling_params import SamplingParams

    decoding, answered, started = asyncio.Event(), asyncio.Event(), [0]

    async def one(prompt: list[int], tokens: int, watched: bool) -> None:
        got, until_answered = 0, watched and bool(late)
        budget = min(engine.max_model_len - len(prompt), tokens + LATE_SLACK_TOKENS) if until_answered else tokens
        params = SamplingParams(max_tokens=budget, temperature=0.0, ignore_eos=True)
        async with contextlib.aclosing(engine.generate(prompt, params)) as outputs:
            async for out in outputs:
                got += len(out.new_token_ids)
                if watched and got >= 2 > got - len(out.new_token_ids):
                    started[0] += 1
                    if started[0] == len(prompts):
                        decoding.set()
                if until_answered and got >= tokens and answered.is_set():
                    break  # closing the stream aborts the request and frees its blocks

    async def arrive() -> None:
        await decoding.wait()
        await asyncio.gather(*(one(p, 1, False) for p in late))
        answered.set()

    if not prompts:
        decoding.set()
    await asyncio.gather(*(one(p, max_tokens, True) for p in prompts), arrive())


def fit_efficiency(arch, base: Hardware, precision: str, points: list[tuple[tuple[int, int], float]],
                   eager_steps: bool = False, graph_max_rows: int | None = None) -> tuple[Efficiency, float, bool]:
    """The efficiency under which the cost model's step times best match
    ``points``: the overlap rule (Hardware.overlap) and memory and GEMM
    fractions on a grid, and for each the host overheads (per step, per
    sequence; with ``eager_steps``, a per-step cost of its own for the steps
    the engine runs eagerly beside graph-replayed ones: those with a prefill,
    or with ``graph_max_rows``, those of more rows) by
    non-negative least squares on the relative errors; the one with the
    smallest largest relative error wins. Returns (efficiency, that error,
    overlap)."""
    import numpy as np

    from tokenmill.sim.cost import Parallel, step_cost, step_time

    kv_bytes = 4.0 if precision == "fp32" else 2.0
    costs = [step_cost(arch, point_shape(shape), Parallel(), precision, kv_bytes) for shape, _ in points]
    measured = np.array([m for _, m in points])
    rule = Efficiency(graph_max_rows=graph_max_rows)
    graph = np.array([rule.replays(c) for c in costs], dtype=float)
    # Columns: what one second of each overhead adds to each step.
    overheads = [graph, 1 - graph] if eager_steps else [np.ones(len(costs))]
    columns = np.stack(overheads + [np.array([c.sequences for c in costs], dtype=float)], axis=1)
    best = (float("inf"), None, True)
    grid = [x / 20 for x in range(1, 21)]
    for overlap, mem, gemm in itertools.product((True, False), grid, grid):
        hw = replace(base, overlap=overlap, efficiency=Efficiency(gemm=gemm, memory=mem, attention=gemm, comm=1.0,
                                                                  step_overhead_s=0.0, collective_latency_s=0.0,
                                                                  expert_stream=None, upcast_expert_gemm=None))
        bare = np.array([step_time(c, hw, precision).total_s for c in costs])
        x = _nonnegative_fit(columns / measured[:, None], (measured - bare) / measured)
        error = float(np.max(np.abs((bare + columns @ x) / measured - 1)))
        if error < best[0]:
            per_step, eager, per_seq = (x[0], x[1], x[2]) if eager_steps else (x[0], None, x[1])
            best = (error, Efficiency(gemm=gemm, memory=mem, attention=gemm, comm=1.0, step_overhead_s=float(per_step),
                                      eager_step_overhead_s=None if eager is None else float(eager),
                                      graph_max_rows=graph_max_rows if eager_steps else None,
                                      seq_overhead_s=float(per_seq), collective_latency_s=0.0,
                                      # no MoE layer timed: experts as the rest
                                      expert_stream=None, upcast_expert_gemm=None), overlap)
    return best[1], best[0], best[2]


def _nonnegative_fit(a, b):
    """x >= 0 minimising |a x - b|^2, by least squares on each subset of a's
    columns (a has a handful of them), the others held at 0."""
    import numpy as np

    n = a.shape[1]
    best, best_x = float("inf"), np.zeros(n)
    for subset in itertools.chain.from_iterable(itertools.combinations(range(n), k) for k in range(n + 1)):
        x = np.zeros(n)
        if subset:
            x[list(subset)] = np.linalg.lstsq(a[:, list(subset)], b, rcond=None)[0]
        if (x >= 0).all():
            residual = float(np.sum((a @ x - b) ** 2))
            if residual < best:
                best, best_x = residual, x
    return best_x


def _engine_kv_bytes(engine) -> float:
    """The KV cache the engine allocated by default (``kv_cache_memory_gib`` unset: 1 GiB on a CPU, 85%
    of free memory on a GPU): what its sequences in flight are limited by, not the device's memory."""
    import torch

    core = engine.core
    spec = core.model.kv_cache_spec()
    per_token = spec.bytes_per_token(torch.finfo(core.dtype).bits // 8)
    return float(core.config.num_kv_blocks * core.config.block_size * per_token)


def _gpu_base(name: str) -> Hardware | None:
    """The datasheet profile whose name the GPU's name contains (H100, H200, "H200 NVL" for h200-nvl, ...;
    the longest match), or None."""
    from tokenmill.sim.hardware import HARDWARE

    upper = name.upper()
    return next((hw for key, hw in sorted(HARDWARE.items(), key=lambda kv: -len(kv[0]))
                 if key.upper().replace("-", " ") in upper), None)


def calibrate(dtype_name: str = "auto", num_threads: int | None = None, device: str = "auto",
              model: str | None = None, name: str = THIS_MACHINE, engine: dict | None = None,
              prefill_tokens: tuple[int, ...] = PREFILL_TOKENS) -> tuple[Hardware, list, float, dict]:
    """Measure, fit, write the profile ``name``; returns (profile, measured points, fit error, the
    profile's prices in seconds of the points the main fit leaves out, ``CACHED_STEP`` and ``LONG_DECODE``,
    to set beside their measured times).
    ``model``: what the engine runs (default: the embedded model; ``dummy:<preset>``
    for random weights where no checkpoint is at hand); ``engine``: EngineConfig fields of
    ``ENGINE_FIELDS`` (default: the engine's own choices); ``prefill_tokens``: the lengths of the
    prompts timed alone, each at most the engine's step budget (``max_num_batched_tokens``, 1,024)."""
    from tokenmill.config import EngineConfig
    from tokenmill.sim.hardware import HARDWARE

    if name in HARDWARE:
        raise ValueError(f"--profile: {name!r} is a built-in --hardware profile; name the calibration otherwise")
    path = profile_path(name)
    budget = EngineConfig.max_num_batched_tokens
    if not prefill_tokens or any(not 0 < t <= budget for t in prefill_tokens):
        raise ValueError(f"--prefill-tokens: lengths from 1 to the engine's step budget {budget}, got {prefill_tokens}")
    served = _served_engine(dtype_name, num_threads, device, model, engine)
    try:
        profile, points, error, priced = _calibrate(served, model, name, tuple(prefill_tokens))
        machine = _machine(served.engine.core.device)
    finally:
        served.shutdown()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**profile.to_dict(), "machine": machine}, indent=2))
    return profile, points, error, priced


def _served_engine(dtype_name: str, num_threads: int | None, device: str, model: str | None, engine: dict | None):
    """The AsyncEngine whose steps calibrate (and ``check_profile``) times."""
    from tokenmill.config import EngineConfig
    from tokenmill.engine.async_engine import AsyncEngine

    load_format = "dummy" if model and model.startswith("dummy:") else "auto"
    return AsyncEngine(EngineConfig(model=model, load_format=load_format, device=device, dtype=dtype_name,
                                    num_threads=num_threads, **(engine or {})))


def check_profile(dtype_name: str = "auto", num_threads: int | None = None, device: str = "auto",
                  model: str | None = None, name: str = THIS_MACHINE, engine: dict | None = None,
                  prefill_tokens: tuple[int, ...] = PREFILL_TOKENS) -> tuple[Hardware, list]:
    """``tokenmill sim calibrate --check``: time the calibration's steps again, on an engine built as
    ``calibrate``'s arguments say (give the ones the profile was calibrated with), and price each on the
    saved profile ``name``; writes nothing. Returns (the profile, [(point, measured s, priced s)]).
    The VM's speed drifts (measure_served_steps): a profile fitted an hour or a day before a run may
    price this machine's steps several percent off, and this says by how much before a comparison."""
    profile = load_profile(name, "--profile")
    served = _served_engine(dtype_name, num_threads, device, model, engine)
    try:
        core = served.engine.core
        precision = _precision(core.dtype)
        if precision != profile.default_precision:
            raise ValueError(f"--check: the engine computes in {core.dtype}, the {name} profile was calibrated in "
                             f"{profile.default_precision}; give the --dtype it was calibrated with")
        points = measure_served_steps(served, _decode_batches(core.device), prefill_tokens=tuple(prefill_tokens))
        return profile, [(p, s, point_price_s(core.arch, profile, precision, p)) for p, s in points]
    finally:
        served.shutdown()


def _decode_batches(device) -> tuple[int, ...]:
    """The decode batches calibrate times on ``device`` (a torch.device): 128 too on a GPU."""
    return DECODE_BATCHES + ((128,) if device.type == "cuda" else ())


def _precision(dtype) -> str | None:
    """The profile precision of the engine's torch dtype; None where calibrate does not measure it."""
    import torch

    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype)


def _calibrate(served, model: str | None, name: str,
               prefill_tokens: tuple[int, ...]) -> tuple[Hardware, list, float, dict]:
    import torch

    from tokenmill.model.embedded import EMBEDDED_NAME

    engine = served.engine
    core = engine.core
    dev, dtype = core.device, core.dtype
    precision = _precision(dtype)
    if precision is None:
        raise ValueError(f"--dtype: calibrate measures float32 or bfloat16, got {dtype}")
    # The served steps first: after measure_peaks' large parallel ops on this (the event loop's) thread,
    # the engine's steps on its own thread measured 1.7-2.2x slower on a 2-core AMX Xeon (19.0 ms at
    # batch 1 before, 33.1-41.3 ms after); `tokenmill serve` and `bench` run no such ops.
    points = measure_served_steps(served, _decode_batches(dev), prefill_tokens=prefill_tokens)
    bw, flops = measure_peaks(dtype, dev)
    what = f"{model or EMBEDDED_NAME} in {precision}"
    if dev.type == "cuda":
        gpu = torch.cuda.get_device_name(dev)
        datasheet = _gpu_base(gpu)
        memory = float(torch.cuda.get_device_properties(dev).total_memory)
        price = datasheet.price_per_hour if datasheet else DEFAULT_PRICE_PER_HOUR
        interconnect = datasheet.interconnect_bw if datasheet else bw
        source = f"{gpu}, {what}, attention {core.attention_backend}, fused ops {core.fused_ops}, CUDA graphs " \
                 f"{'on' if core.runner.decode_graphs is not None else 'off'}"
    else:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        price, interconnect = DEFAULT_PRICE_PER_HOUR, bw
        cpu = cpu_fingerprint()["cpu"]
        source = f"{cpu}, {torch.get_num_threads()} threads, {what}, attention {core.attention_backend}, " \
                 f"fused ops {core.fused_ops}, linears {core.linear_backend}, {core.decoder_loop} decoder loop"
    base = Hardware(name=name, memory_bytes=memory, memory_bw=bw, flops={precision: flops},
                    interconnect_bw=interconnect, scale_up_size=1, scale_out_bw=1e9, default_precision=precision,
                    price_per_hour=price, kv_cache_bytes=_engine_kv_bytes(engine),
                    sources=(f"tokenmill sim calibrate, {time.strftime('%Y-%m-%d')}: {source}",))
    runner = core.runner
    graphs = runner.decode_graphs is not None
    max_rows = runner.decode_graphs.batch_sizes[-1] if graphs and runner.graph_multi_token_runs else None
    fitted = [(shape, seconds) for shape, seconds in points if shape not in (CACHED_STEP, LONG_DECODE)]
    efficiency, error, overlap = fit_efficiency(core.arch, base, precision, fitted, eager_steps=graphs,
                                                graph_max_rows=max_rows)
    profile = replace(base, efficiency=efficiency, overlap=overlap)
    profile = fit_kv_read(core.arch, profile, precision, dict(points)[LONG_DECODE])
    priced = {p: point_price_s(core.arch, profile, precision, p) for p in (CACHED_STEP, LONG_DECODE)}
    return profile, points, error, priced


def fit_kv_read(arch, profile: Hardware, precision: str, measured_s: float) -> Hardware:
    """``profile`` with the K/V read fraction (``Efficiency.kv_read``, in hundredths) under which its
    price of ``LONG_DECODE`` is nearest ``measured_s``; the other factors as fitted."""
    def error(kv_read: float) -> float:
        hw = replace(profile, efficiency=replace(profile.efficiency, kv_read=kv_read))
        return abs(point_price_s(arch, hw, precision, LONG_DECODE) / measured_s - 1)

    best = min((x / 100 for x in range(1, 101)), key=error)
    return replace(profile, efficiency=replace(profile.efficiency, kv_read=best))


def point_shape(point: tuple[int, int]):
    """The StepShape of a calibrated step (decodes, prompt tokens): ``CACHED_STEP``, 4 decodes over
    ``CONTEXT`` tokens beside a 192-token chunk over ``CACHED_CONTEXT`` cached ones; ``LONG_DECODE``, 4
    decodes over ``LONG_CONTEXT`` tokens; any other, its decodes over ``CONTEXT`` tokens beside its
    prompt, if any, from its start."""
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    decodes, tokens = point
    if point == LONG_DECODE:
        return StepShape(decode_contexts=(LONG_CONTEXT,) * decodes)
    context = CACHED_CONTEXT if point == CACHED_STEP else 0
    return StepShape(decode_contexts=(CONTEXT,) * decodes, prefills=(PrefillChunk(tokens, context),) if tokens else ())


def point_price_s(arch, profile: Hardware, precision: str, point: tuple[int, int]) -> float:
    """The profile's price of a calibrated step (``point_shape``)."""
    from tokenmill.sim.cost import Parallel, step_cost, step_time

    kv_bytes = 4.0 if precision == "fp32" else 2.0
    return step_time(step_cost(arch, point_shape(point), Parallel(), precision, kv_bytes), profile, precision).total_s
