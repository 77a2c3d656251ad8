"""One deployment, one scenario -> the figures ``tokenmill sim`` prints.

A deployment is ``num_gpus / devices`` identical replicas (data parallel), each
``Parallel(tp, ep, attention_dp)`` over its devices (times ``pipeline_parallel``
stages: sim/pipeline.py, a scheduler per micro-batch), each running our engine's
scheduler (serving.py) over step times from the cost model (cost.py) on a
hardware profile (hardware.py). Offline and SingleStream load every replica
alike, so one replica is simulated and its figures scaled. Server and
Interactive arrivals go through our router (sim/routed.py: each to the
least-loaded replica), simulated as groups of ``ROUTED_GROUP`` replicas (or all
of them, when fewer), each group fed its share of the arrivals, and scaled.
KV capacity per device is what the memory fraction leaves after the weights
(or, as TensorRT-LLM sizes it, a fraction of what the weights and the runtime's
buffers leave: ``Deployment.kv_free_fraction``).

With ``disagg`` the replicas form a prefill pool and a decode pool
(sim/disagg.py; the decode replicas of their own layout and batch limit where
the split names them); then every replica is simulated and the request count
and QPS are the whole deployment's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial

from tokenmill.sim.adp_balance import AdpBalance
from tokenmill.sim.cost import (
    Parallel,
    shape_kv_bytes_per_token,
    shape_weight_bytes,
)
from tokenmill.sim.cuda_graphs import without_cuda_graphs
from tokenmill.sim.disagg import (
    Pool,
    PoolSplit,
    simulate_disagg,
    split_figures,
    transfer_time,
)
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.host_path import HostPath
from tokenmill.sim.jobs import worker_pool
from tokenmill.sim.kernels import CURRENT as CURRENT_KERNELS
from tokenmill.sim.kernels import step_scale
from tokenmill.sim.models import model_shape
from tokenmill.sim.pipeline import flow_shops, stage_shape
from tokenmill.sim.routed import simulate_routed
from tokenmill.sim.scenario_run import PeakRunReport, run_scenario, server_arrivals
from tokenmill.sim.serving import SimConfig, SimRequest, StepTime, simulate
from tokenmill.sim.sim_result import SimResult
from tokenmill.sim.step_price import host_floor, step_seconds

PRECISION_BYTES_KV = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "fp4": 1.0}
"""KV cache bytes per value by weight precision (FP8 KV with FP8/FP4 weights, as the published runs use)."""


ROUTED_GROUP = 4
"""Replicas simulated together behind the router for Server and Interactive: the
least-load rule's gain over one replica alone is mostly there by 4 (queueing's
pooling), and each replica simulated costs its steps."""


@dataclass(frozen=True)
class Deployment:
    num_gpus: int
    parallel: Parallel
    precision: str
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    """Rows of one engine's step (each dp rank's under attention DP; ``step_budget``)."""
    block_size: int = 16
    memory_fraction: float = 0.9
    """Of each device's memory, for weights + KV cache (the rest: activations, runtime)."""
    kv_cache_bytes: float | None = None
    """KV cache per device (``--kv-cache-memory-gib``); None: the profile's (``Hardware.kv_cache_bytes``),
    else what ``memory_fraction`` leaves after the weights."""
    kv_free_fraction: float | None = None
    """TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` (``--kv-cache-free-fraction``): the KV cache
    takes this fraction of the memory the weights and the runtime's buffers (``runtime_buffer_bytes``)
    leave free. None: ``memory_fraction`` of the whole device holds weights + KV cache, as vLLM's
    ``gpu_memory_utilization`` and our engine size it. At 0.9 TensorRT-LLM's cache is the larger by a
    tenth of the weights less the runtime's buffers: with large weights per device much larger
    (DeepSeek-R1 FP8 on an H200 DEP8: 39.6 vs 33.0 GiB per device), with small ones a little smaller."""
    kv_cache_dtype: str = "auto"
    """The KV cache's values (``--kv-cache-dtype``): "auto" as ``PRECISION_BYTES_KV`` pairs it with the
    precision; "bf16" or "fp8" whatever the weights (gpt-oss's published runs: bf16 weights outside
    the experts, an FP8 cache on Blackwell and a bf16 one on Hopper). An FP8 cache computes attention in FP8."""
    mtp_depth: int = 0
    """Draft tokens verified per decode step (speculative decoding / MTP); a model with an MTP
    module pays its forward once per draft token in every step (sim/mtp_module.py)."""
    mtp_tokens_per_step: float = 1.0
    """Mean tokens accepted per decode step (1 + accepted drafts)."""
    fused_allreduce: bool = False
    """Tensor-parallel all-reduces fused into the GEMMs they follow (cost.step_time), as the
    published MLPerf Llama-3.1-405B runs set (TRTLLM_GEMM_ALLREDUCE_FUSION_ENABLED, the
    gemm_allreduce_plugin); False: they run between layers, as in our engine."""
    chunked_prefill: bool = True
    """False: a prompt waits until it fits one step whole (TensorRT-LLM's ``enable_chunked_context:
    False``, as the published DeepSeek-R1 MLPerf configs set); True: chunked, as our engine."""
    adp_balance: tuple[int, int] | None = None
    """(batching_wait_iters, timeout_iters) of TensorRT-LLM's attention-DP prompt balancing
    (sim/adp_balance.py; the published DeepSeek-R1 MLPerf Server configs: (3, 9), or (2, 6) on some
    B200 systems), for layouts with attention DP; None: off, as our engine."""
    overlap_scheduler: bool = False
    """TensorRT-LLM's overlap scheduler (sim/serving.py): a busy replica admits a request one step
    later. On in the published runs (NVIDIA's harness leaves TensorRT-LLM's default); off in our engine."""
    router: str = "kv"
    """How Server and Interactive arrivals pick an aggregated replica (sim/routed.py
    ``ROUTER_POLICIES``, as ``tokenmill serve --router``); disaggregated pools route by ``kv``."""
    kernels: str = CURRENT_KERNELS
    """The TensorRT-LLM kernel generation, by MLPerf round (sim/kernels.py): every step costs the cost
    model's time x ``step_scale(kernels)`` (v5.1: 1.52x)."""
    host_stream_rate: float | None = None
    """Responses per second each replica's host turns into streamed tokens (sim/host_path.py); None:
    the host keeps up and a token is seen when its step ends."""
    stream_interval: int = 1
    """A streaming sequence responds every this many decoding iterations (TensorRT-LLM's and vLLM's
    ``stream_interval``), besides its first and last token; no effect without ``host_stream_rate``."""
    cuda_graphs: bool = True
    """Steps replay as CUDA graphs where the profile's engine replays them (the published runs, our
    engine's decode steps); False (``--no-cuda-graphs``): every step launches its kernels from the
    host (sim/cuda_graphs.py)."""
    eager_layer_s: float | None = None
    """With ``cuda_graphs`` False: host seconds to launch one layer's kernels (``--eager-layer-ms``);
    None: the profile's (``Efficiency.eager_layer_s``, or a calibrated profile's eager step)."""
    disagg: PoolSplit | None = None
    """Prefill and decode replicas (prefill: of ``parallel`` and ``max_num_seqs``; decode: of
    the split's own layout and batch limit where it names them); None: aggregated replicas."""
    host_seq_s: float | None = None
    """Host seconds per sequence of a step, overlapping the device's work: a step lasts at least this
    times its sequences (``--host-seq-us``; the published Llama Server and Interactive rows, sim/host_rates.py
    ``host_seq_seconds``); None: the host keeps up with any step."""
    pipeline_parallel: int = 1
    """Pipeline stages of a replica (``--pp``), each of ``parallel``'s devices (sim/pipeline.py): the
    replica spans ``parallel.devices x pipeline_parallel`` devices and runs that many micro-batches,
    each scheduled under ``max_num_seqs`` and the token budget."""

    @property
    def kv_dtype_bytes(self) -> float:
        """Bytes per cached value."""
        return PRECISION_BYTES_KV[self.precision if self.kv_cache_dtype == "auto" else self.kv_cache_dtype]

    @property
    def replicas(self) -> int:
        return self.disagg.replicas if self.disagg else self.num_gpus // self.replica_devices

    @property
    def replica_devices(self) -> int:
        """Devices of one aggregated replica: its layout's, times its pipeline stages."""
        return self.parallel.devices * self.pipeline_parallel

    @property
    def engines(self) -> int:
        """Schedulers the deployment runs: one per replica, or per micro-batch of a pipeline."""
        return self.replicas * self.pipeline_parallel

    @property
    def prompt_balance(self) -> AdpBalance | None:
        """``adp_balance`` over this layout's attention-DP ranks; None without attention DP."""
        return AdpBalance(self.parallel.dp, *self.adp_balance) if self.adp_balance and self.parallel.attention_dp \
            else None

    @property
    def decode_parallel(self) -> Parallel:
        """The decode replicas' layout (``parallel`` unless the split names another)."""
        return (self.disagg and self.disagg.decode_parallel) or self.parallel

    @property
    def decode_max_num_seqs(self) -> int:
        return (self.disagg and self.disagg.decode_max_num_seqs) or self.max_num_seqs


@dataclass(frozen=True)
class Workload:
    scenario: str
    """offline | server | interactive | singlestream."""
    isl: int
    osl: int
    num_requests: int = 2000
    cached_tokens: int = 0
    """Prompt tokens each request finds in the prefix cache."""
    preset: str = "llama3.1-8b"
    """Latency limits (bench presets) for server / interactive."""
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    target_qps: float | None = None
    """server / interactive: simulate this QPS (the whole deployment's; each simulated share gets its part) instead
    of searching the peak that meets the limits."""
    requests: tuple[SimRequest, ...] | None = None
    """Simulate exactly these requests (a measured run's, sim/replay.py) instead of
    drawing them; the whole deployment's load: a Server or Interactive run's through the router
    (a routed group of up to ROUTED_GROUP replicas takes every (replicas / group)-th request)."""
    dataset: str | None = None
    """Draw each request's lengths from this MLPerf dataset's distribution
    (sim/mlperf_lengths.py): prompts as the dataset's, outputs of mean ``osl``
    capped at ``osl_max``; ``isl`` is then the dataset's mean, for display."""
    osl_max: int | None = None
    duration_s: float | None = None
    """Size the run by time, as LoadGen does (sim/scenarios.py ``MLPERF_*``): server /
    interactive issue arrivals for this long (at least 100 queries) and no cap on the
    QPS is needed, since an unsustainable rate builds a queue within the window; offline
    issues ``1.1 x rate x duration_s`` requests, the rate from a first run of
    ``num_requests``. None: exactly ``num_requests`` requests."""
    min_queries: int | None = None
    """LoadGen's ``min_query_count`` for a timed run (``duration_s``), the whole deployment's:
    Offline issues at least this many samples, Server / Interactive at least this many queries
    (then for longer than ``duration_s``). Published MLPerf runs set it far above the rules'
    minimum (sim/published_queries.py ``MLPERF_QUERIES``): their figures are long runs'."""
    num_samples: int | None = None
    """server / interactive: each query draws one of this many samples, as LoadGen draws from its
    performance sample set (`tokenmill bench --num-samples`), and a sample drawn before finds its prompt
    in the prefix cache (scenarios.py ``with_sample_repeats``); None: every query a new prompt."""
    qps_hint: float | None = None
    """server / interactive with ``duration_s``: the QPS (the whole deployment's) the peak
    search starts from, e.g. a neighbouring configuration's peak; None: the Offline request
    rate of ``num_requests`` requests (one more run)."""
    shared_prefix: tuple[int, int] | None = None
    """(N, TOKENS): the prompts start with N shared prefixes of TOKENS tokens, in turn, each hit once a
    replica has computed it (sim/scenarios.py ``with_shared_prefixes``); None: no shared prefixes."""
    seed: int = 0
    """The draw's seed: Server / Interactive arrival times, lengths drawn from ``dataset`` and the
    samples queries draw (``num_samples``). One seed serves every QPS a peak search tries (common
    random numbers, sim/peak_qps.py); another seed is another draw of the same workload (sim/draws.py)."""

    def lengths(self):
        """(prompt lengths, output lengths) for sim/scenarios.py: ints, or draws from ``dataset``."""
        if self.dataset is None:
            return self.isl, self.osl
        from tokenmill.sim.mlperf_lengths import length_draws
        return length_draws(self.dataset, self.osl, self.osl_max)


def step_budget(d: Deployment, parallel: Parallel | None = None, max_num_seqs: int | None = None) -> int:
    """Rows one step of the replica computes at most. ``max_num_batched_tokens`` is each
    engine's: under attention DP every dp rank schedules its own (vLLM's per-engine budget,
    TensorRT-LLM's per-rank ``max_num_tokens``), so the replica's is dp times it; and never
    below ``max_num_seqs``, so every running sequence's decode fits one step. ``parallel`` and
    ``max_num_seqs``: another pool's (the decode replicas'), else the deployment's."""
    parallel, max_num_seqs = parallel or d.parallel, max_num_seqs or d.max_num_seqs
    ranks = parallel.dp if parallel.attention_dp else 1
    return max(d.max_num_batched_tokens * ranks, max_num_seqs)


RUNTIME_FIXED_BYTES = 2 * 2**30
"""Per device, beside weights, KV cache and activations: the CUDA context, communication buffers
and CUDA graphs' pools. An order of magnitude, not a measurement (only ``kv_free_fraction`` uses it)."""
ACTIVATION_COPIES = 10
"""Activations of one step at the token budget, in bf16 copies of the hidden state per token: the
order AIConfigurator budgets for TensorRT-LLM's peak activation memory (5-28 copies by model family
and TP size); an estimate, as ``RUNTIME_FIXED_BYTES``."""


def runtime_buffer_bytes(arch, d: Deployment, parallel: Parallel) -> float:
    """One device's memory that is neither weights nor KV cache while it serves: a fixed part and
    the activations of a step of one rank's token budget (what TensorRT-LLM's memory profiling
    run sees before it sizes the cache from the rest)."""
    tokens = max(d.max_num_batched_tokens, d.max_num_seqs // (parallel.dp if parallel.attention_dp else 1))
    return RUNTIME_FIXED_BYTES + tokens * model_shape(arch).hidden * 2.0 * ACTIVATION_COPIES


def kv_blocks(arch, hw: Hardware, d: Deployment, parallel: Parallel, flags: str = "--tp/--ep") -> int:
    """KV blocks of one replica of ``parallel`` (a pipeline's: every micro-batch's together, sized on
    its busiest stage); ValueError naming ``flags`` (the layout's) when its weights do not fit."""
    stage = stage_shape(model_shape(arch), d.pipeline_parallel)
    weights = shape_weight_bytes(stage, d.precision, parallel)
    if d.kv_free_fraction is None:
        usable = hw.memory_bytes * d.memory_fraction
        room = usable - weights
    else:
        usable = hw.memory_bytes - runtime_buffer_bytes(arch, d, parallel)
        room = d.kv_free_fraction * (usable - weights)
    if room <= 0:
        raise ValueError(f"{flags}: {weights / 1e9:.1f} GB of weights per device do not fit in "
                         f"{usable / 1e9:.1f} GB of {hw.name}; raise {flags}")
    # A set KV cache: --kv-cache-memory-gib, else the profile's (the engine's default on this machine)
    # unless a free-memory fraction asks for TensorRT-LLM's sizing instead.
    cache = d.kv_cache_bytes or (hw.kv_cache_bytes if d.kv_free_fraction is None else None)
    if cache:
        if cache > room:
            raise ValueError(f"--kv-cache-memory-gib: {cache / 2**30:.2f} GiB of KV cache per device and "
                             f"{weights / 1e9:.1f} GB of weights do not fit in {hw.name}'s memory")
        room = cache
    per_token = shape_kv_bytes_per_token(stage, d.kv_dtype_bytes, parallel)
    # Under attention DP each of the dp groups caches its own sequences: dp times one device's room.
    return int(room * parallel.dp / (per_token * d.block_size))


def check_deployment(arch, hw: Hardware, d: Deployment) -> int:
    """KV blocks per replica (the prefill replicas' when disaggregated); ValueError naming
    the flag when it cannot run."""
    split = d.disagg
    if d.pipeline_parallel < 1:
        raise ValueError(f"--pp: must be >= 1, got {d.pipeline_parallel}")
    if d.host_seq_s is not None and not (d.host_seq_s > 0 and math.isfinite(d.host_seq_s)):
        raise ValueError(f"--host-seq-us: must be a finite number > 0, got {d.host_seq_s * 1e6}")
    if d.pipeline_parallel > 1 and (split or d.mtp_depth):
        raise ValueError(f"--pp: pipeline parallel with {'--disagg' if split else '--mtp'} is not modelled")
    if split:
        taken = split.devices(d.parallel)
        if taken != d.num_gpus:
            raise ValueError(f"--num-gpus: {d.num_gpus} GPUs, but --disagg {split.prefill_replicas}:"
                             f"{split.decode_replicas} replicas of {d.parallel.devices} (prefill) and "
                             f"{d.decode_parallel.devices} (decode) devices take {taken}")
        kv_blocks(arch, hw, d, d.decode_parallel, "--decode-tp/--decode-ep")
    elif d.num_gpus % d.replica_devices:
        raise ValueError(f"--num-gpus: {d.num_gpus} is not a multiple of the replica's {d.replica_devices} devices")
    return kv_blocks(arch, hw, d, d.parallel)


def predict(arch, hw: Hardware, d: Deployment, w: Workload, on_peak_run: PeakRunReport | None = None,
            jobs: int = 1, reprice: Callable[[StepTime], StepTime] | None = None) -> dict:
    """The figures of one run: throughput, latency percentiles, cost, and the deployment.
    ``on_peak_run``: told each run of a Server peak-QPS search (sim/scenario_run.py); ``jobs``:
    processes for that search's runs (sim/peak_qps.py; the same figures for any number).
    ``reprice``: wraps the replicas' step price (a replay at its run's served prices,
    sim/served_steps.py); given requests only, on a replica of one pipeline stage."""
    if reprice is not None and (w.requests is None or d.pipeline_parallel > 1):
        raise ValueError("reprice: for given requests on replicas without pipeline stages")
    r = _runner(arch, hw, d, w, reprice)
    if d.disagg and w.scenario == "singlestream" and w.requests is None:
        raise ValueError("--disagg: SingleStream runs one query at a time; simulate it aggregated")
    if w.requests is not None:
        result, qps = r.run(list(w.requests if d.disagg else w.requests[::d.engines // r.group])), None  # one share
    else:
        with worker_pool(jobs if is_peak_search(w) else 1) as pool:
            submit = None if pool is None else partial(pool.submit, peak_search_run, arch, hw, d, w)
            result, qps = run_scenario(w, r.run, r.seconds, r.config, r.num_requests, r.share, on_peak_run,
                                       submit, jobs)
    figures = _figures(result, r.hw, d, w, r.blocks, qps, r.share, r.decode_blocks)
    figures["config"]["routed_group"] = r.group if r.group > 1 else None
    figures["config"]["router"] = d.router if r.group > 1 else None
    return figures


def peak_search_run(arch, hw: Hardware, d: Deployment, w: Workload, qps: float) -> SimResult:
    """The peak search's run at one share's ``qps``, as ``predict`` runs it (a worker process's task)."""
    r = _runner(arch, hw, d, w)
    return r.run(server_arrivals(w, qps, r.num_requests, r.share))


def is_peak_search(w: Workload) -> bool:
    """Server or Interactive at no given QPS and on no given requests: the peak QPS is searched."""
    return w.scenario in ("server", "interactive") and w.target_qps is None and w.requests is None


@dataclass(frozen=True)
class _Runner:
    """What one deployment's runs share: ``run(requests)`` simulates one share of the load
    (``share`` of them make the deployment's) on ``num_requests`` requests a run."""
    run: Callable[[list[SimRequest]], SimResult]
    seconds: StepTime
    config: SimConfig
    hw: Hardware
    blocks: int
    decode_blocks: int | None
    group: int
    share: float
    num_requests: int


def _runner(arch, hw: Hardware, d: Deployment, w: Workload,
            reprice: Callable[[StepTime], StepTime] | None = None) -> _Runner:
    blocks = check_deployment(arch, hw, d)
    if not d.cuda_graphs:
        hw = without_cuda_graphs(hw, arch.num_layers, d.eager_layer_s)
    reprice = reprice or (lambda price: price)
    seconds = reprice(step_seconds(arch, hw, d, d.parallel))

    # Each scheduler (a replica, or a pipeline's micro-batch) has its share of the replica's KV blocks.
    config = SimConfig(max_num_seqs=d.max_num_seqs, max_num_batched_tokens=step_budget(d),
                       num_kv_blocks=blocks // d.pipeline_parallel,
                       block_size=d.block_size, tokens_per_step=d.mtp_tokens_per_step,
                       draft_tokens=d.mtp_depth, chunked_prefill=d.chunked_prefill, adp_balance=d.prompt_balance,
                       overlap_scheduler=d.overlap_scheduler, host_path=host_path(d))
    group = _scheduler_group(d, w)
    share = 1 if d.disagg else d.engines / group
    num_requests = w.num_requests * (d.replicas if d.disagg else group)
    decode_blocks = None
    if d.disagg:
        # Published prefill workers switch the overlap scheduler off (disable_overlap_scheduler in
        # NVIDIA's disaggregated configs); their decode workers keep it.
        prefill = Pool(seconds, replace(config, overlap_scheduler=False))
        decode_parallel, decode_seqs = d.decode_parallel, d.decode_max_num_seqs
        decode_blocks = kv_blocks(arch, hw, d, decode_parallel)
        decode = Pool(reprice(step_seconds(arch, hw, d, decode_parallel)), replace(
            config, max_num_seqs=decode_seqs, max_num_batched_tokens=step_budget(d, decode_parallel, decode_seqs),
            num_kv_blocks=decode_blocks, adp_balance=None))  # it admits transferred KV, not prompts
        transfer = transfer_time(arch, hw, d)

        def run(requests):
            return simulate_disagg(requests, d.disagg, prefill, decode, transfer)
    elif d.pipeline_parallel > 1:
        flow_shop = flow_shops(model_shape(arch), d.parallel, d.pipeline_parallel, d.precision, d.kv_dtype_bytes, hw,
                               d.fused_allreduce, step_scale(d.kernels), host_floor(d))

        def run(requests):
            return simulate_routed(requests, group, seconds, config, d.router, pipeline=d.pipeline_parallel,
                                   flow_shop=flow_shop)
    elif group > 1:
        def run(requests):
            return simulate_routed(requests, group, seconds, config, d.router)
    else:
        def run(requests):
            return simulate(requests, seconds, config)
    return _Runner(run, seconds, config, hw, blocks, decode_blocks, group, share, num_requests)


def _scheduler_group(d: Deployment, w: Workload) -> int:
    """Schedulers simulated together: aggregated, one replica (Server and Interactive: a routed group of
    up to ``ROUTED_GROUP``; a pipeline: its micro-batches' schedulers, in whole pipelines); the
    disaggregated pools are simulated whole (their own count)."""
    routed = not d.disagg and w.scenario in ("server", "interactive")  # a replayed Server run too
    pp = d.pipeline_parallel
    if pp > 1:
        return pp * (min(d.replicas, max(1, ROUTED_GROUP // pp)) if routed else 1)
    return min(d.engines, ROUTED_GROUP) if routed else 1


def host_path(d: Deployment) -> HostPath | None:
    """The replicas' response path; None without a host rate (``stream_interval`` then has no effect)."""
    return None if d.host_stream_rate is None else HostPath(d.host_stream_rate, d.stream_interval)


def _figures(result: SimResult, hw: Hardware, d: Deployment, w: Workload, blocks: int, qps: float | None,
             share: float, decode_blocks: int | None = None) -> dict:
    """``share``: how many times the simulated load fits in the deployment (1: all of it was simulated)."""
    # Server runs are counted as LoadGen counts them (SimResult.completed_tokens_per_s); a replayed
    # run as the benchmark measured it (first arrival to last finish).
    loadgen_server = w.scenario in ("server", "interactive") and w.requests is None
    total = (result.completed_tokens_per_s if loadgen_server else result.output_tokens_per_s) * share
    total = 0.0 if qps == 0.0 else total  # a peak search met the limits at no rate: the run is a failing one
    per_gpu = total / d.num_gpus
    cost = hw.price_per_hour * d.num_gpus / (total * 3600) * 1e6 if total else None
    tpot = result.tpot_ms
    return {
        "tokens_per_s_per_gpu": per_gpu, "tokens_per_s": total,
        "ttft_ms": {"p50": result.ttft_ms.p50, "p99": result.ttft_ms.p99},
        "tpot_ms": {"p50": tpot.p50, "p99": tpot.p99, "mean": tpot.mean} if tpot is not None else None,
        "qps": qps * share if qps is not None else None,
        "cost_per_million_tokens": cost,
        "config": {"hardware": hw.name, "num_gpus": d.num_gpus, "replicas": d.replicas,
                   **asdict(d.parallel), "pp": d.pipeline_parallel, "precision": d.precision,
                   "kv_cache_dtype": d.kv_cache_dtype, "max_num_seqs": d.max_num_seqs,
                   "max_num_batched_tokens": d.max_num_batched_tokens, "kv_blocks_per_replica": blocks,
                   "kv_free_fraction": d.kv_free_fraction,
                   "mtp_depth": d.mtp_depth, "mtp_tokens_per_step": d.mtp_tokens_per_step,
                   "fused_allreduce": d.fused_allreduce, "chunked_prefill": d.chunked_prefill,
                   "overlap_scheduler": d.overlap_scheduler, "kernels": d.kernels,
                   "cuda_graphs": d.cuda_graphs, "tile_rule": hw.efficiency.tile_rule,
                   "eager_step_ms": None if d.cuda_graphs else hw.efficiency.eager_step_overhead_s * 1e3,
                   "host_stream_rate": d.host_stream_rate, "host_seq_s": d.host_seq_s,
                   "stream_interval": d.stream_interval if d.host_stream_rate else None,
                   "adp_balance": list(d.adp_balance) if d.prompt_balance else None,
                   "disagg": split_figures(d, decode_blocks) if d.disagg else None,
                   "scenario": w.scenario, "isl": w.isl, "osl": w.osl, "dataset": w.dataset,
                   "num_requests": w.num_requests, "duration_s": w.duration_s, "min_queries": w.min_queries,
                   "num_samples": w.num_samples, "cached_tokens": w.cached_tokens,
                   "shared_prefix": list(w.shared_prefix) if w.shared_prefix else None,
                   "target_qps": w.target_qps, "seed": w.seed,
                   "price_per_gpu_hour": hw.price_per_hour},
        "mean_batch_size": result.mean_batch_size,
        "engine_steps": round(result.steps * share), "engine_busy_s": result.busy_s * share,
        "engine_prefill_steps": round(result.prefill_steps * share),
        "engine_prefill_busy_s": result.prefill_busy_s * share,
        "prefix_cache_hit_rate": result.prefix_cache_hit_rate,
        "requests_simulated": round(len(result.arrival_s) * share),
    }
