"""Hardware profiles: what one device can do, and how much of it an engine achieves.

All figures are per device (one GPU), in SI units: bytes, bytes/s, FLOP/s, seconds,
USD per device-hour. FLOP/s are dense tensor-core rates (NVIDIA quotes sparse 2:4
rates in its headline tables; those are 2x these). ``fp32`` is the non-tensor FP32
rate (TF32 is a different format and is not listed).

A pure roofline is too optimistic: LLM-Viewer (Yuan et al., 2024, "LLM Inference
Unveiled: Survey and Roofline Model Insights") over-predicts decode speed by
1.5-1.9x. The achieved fractions are therefore explicit (``Efficiency``) and are
meant to be calibrated: a ``this-machine`` profile is written elsewhere from a
calibration run and stored with ``to_dict`` / read back with ``from_dict``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from tokenmill.sim.gemm_tiles import BLACKWELL_SMS, BLACKWELL_TILE, BLACKWELL_ULTRA_SMS, HOPPER_SMS, HOPPER_TILE

PRECISIONS = ("fp32", "bf16", "fp8", "fp4")


LOW_PRECISION_GEMM = {"fp8": 0.52, "fp4": 0.30}
"""GEMM fractions of the FP8 and FP4 dense peaks, fitted (benchmarks/sim_fit_gemm.py) on
TensorRT-LLM's published dense Llama throughput tables so that the median simulated /
published ratio is 1: FP8 on 14 H100/H200 rows (all then within 0.88-1.16), FP4 on 6
B200/GB200 rows (0.95-1.24). Refitted 2026-11-28 under the sqrt overlap rule and FP8
attention (were 0.46 and 0.27 under the max rule). Checked on other rows: docs/SIMULATOR.md.
FP4's 0.30 of 9 PFLOP/s (2.7 PFLOP/s on a B200) is only 1.15x FP8's 0.52 of 4.5: these runs
gain little compute from FP4, as the published small-batch FP4 GEMM figures
(docs/SIMULATOR.md) lead to expect."""

TILED_GEMM = {"fp8": 0.52, "fp4": 0.33}
"""The FP8 and FP4 fractions of GEMMs the tile rule prices (the Llama family's: sim/gemm_tiles.py),
before their tiles' and waves' losses, in place of ``LOW_PRECISION_GEMM``, whose flat fractions hold
the fitted rows' typical loss and stay for the GEMMs the rule does not price (MoE experts, MLA).
Fitted the same way on the same source (benchmarks/sim_fit_gemm.py, 2026-11-30, with the rule): FP8
on 16 H100/H200 rows (0.88-1.14; the same 0.52: those rows' steps fill their waves), FP4 on 9
B200/GB200 rows (0.96-1.26; 0.33 where the flat fit is 0.30: at 148 SMs these rows' GEMMs lose about
a tenth of their time to padded tiles and idle SMs, which the flat fraction held)."""

FP8_ATTENTION = 0.4
"""Attention's fraction of the FP8 dense peak where it computes in FP8 (an FP8 KV cache, the
published runs' recipe: MLPerf configs set ``use_fp8_context_fmha`` with ``kv_cache_dtype: fp8``,
and TensorRT-LLM's DeepSeek-R1 throughput blog quantizes Q and KV to FP8 for its generation MQA).
FlashAttention-3 reaches ~0.75 of the H100's bf16 peak and ~0.61 of its FP8 peak (740 TFLOP/s
and 1.2 PFLOP/s; Shah et al., 2024): FP8 keeps 0.81 of bf16's share, so 0.5 (the bf16 default)
x 0.81 = 0.4, i.e. 1.6x the bf16 attention rate. Not measured here."""

GB300_FP4_GEMM = 0.26
"""The GB300's own FP4 GEMM fraction (of 15 PFLOP/s: 3.9), in place of ``LOW_PRECISION_GEMM``'s
0.30, which was fitted on B200 and GB200 rows only. Fitted (benchmarks/sim_fit_gb300.py) on
NVIDIA's MLPerf v6.0 Offline runs of Llama-2-70B and Llama-3.1-405B on its GB300 and GB200 racks
(same submitter, round and software): published, the GB300 rack runs 1.26-1.27x the GB200's per
GPU, and at 0.30 the simulator gave 1.41-1.42x; at 0.26 the two racks' errors agree (0.91 and
0.90-0.92). Published kernel figures do not contradict it: a large FP4 GEMM on SM103 reaches 0.56-0.64
of its peak (CUTLASS at 8192 x 8192 x 33024, two runs in HazyResearch/ThunderKittens' nvfp4_b300 notes),
about a B200's 0.63 (DeepGEMM PR 348), while serving-sized ones were "far from" its limit (flashinfer
PR 2303: 3.9 PFLOP/s at 256 rows) and one port ran slower on a B300 than the SM100 kernel at every
shape (flashinfer PR 4866). Checked on the other GB300 rows: docs/SIMULATOR.md."""

GB300_TILED_FP4 = 0.28
"""The GB300's FP4 fraction of the GEMMs the tile rule prices (``TILED_GEMM``'s FP4 on the GB200 is
0.33), refitted the same way (benchmarks/sim_fit_gb300.py, 2026-11-30, with the rule at 160 SMs
against the GB200's 148): the two racks' errors agree at 0.90 and 0.94 (Llama-2-70B, Llama-3.1-405B;
GB200 0.91 and 0.95). ``GB300_FP4_GEMM`` stays the flat fraction of the GEMMs the rule does not price."""

EXPERT_WEIGHT_STREAM = 0.23
"""The fraction of HBM bandwidth at which MoE layers stream their routed experts' weights
(``Efficiency.expert_stream``). A decode step's grouped GEMMs run each expert on the few rows
routed to it (rows x top_k / experts: tens to a few hundred), where published kernels read their
weights far below the HBM rate: a gpt-oss-120b MoE layer on an H100 (Triton, MXFP4, batch 256)
streams its 1.7 GB in 2.13 ms, 0.24 of 3.35 TB/s (vllm-project/vllm PR 39902); Blackwell FP4
GEMMs at such row counts 0.16-0.32 of 8 TB/s (M = 1: 1.78 TB/s, flashinfer-ai/flashinfer issue
1732; M = 8-32: ~2.5 TB/s, vllm-project/vllm PR 42235; M = 64-256: ~1.25 TB/s, vllm-project/vllm
PR 20646). 0.23 is the median of the four. The published DeepSeek-R1 Server runs' steps agree
(docs/SIMULATOR-LOG.md "The step at the published rates"); DeepGEMM's FP8 masked grouped GEMM reads
faster (0.61 of an H800's HBM at 256 rows per expert): the best kernels beat this figure."""

UPCAST_EXPERT_GEMM = 0.23
"""The fraction of the bf16 peak at which MXFP4 routed experts compute where the kernel upcasts them to
bf16 (Hopper: W4A16, TensorRT-LLM's TRITON MoE backend for gpt-oss; ``Efficiency.upcast_expert_gemm``).
The H100 layer behind ``EXPERT_WEIGHT_STREAM`` took 2.13 ms at 256 tokens and 2.31 ms at 1,024: under the
sqrt rule its 204 GFLOP at 1,024 tokens (top-4 of 128 experts, 2,880 x 5,760 and 2,880 x 2,880) took 0.90 ms
beside the weight stream: 225 TFLOP/s, 0.23 of 989 (docs/SIMULATOR.md, "Where gpt-oss's step goes")."""

EAGER_LAYER_S = 2.5e-4
"""Host time to launch one transformer layer's kernels from Python (no CUDA graph), per step, in
a production engine: ``Efficiency.eager_layer_s`` of the datasheet GPU profiles, what
``--no-cuda-graphs`` prices (sim/cuda_graphs.py). The median of what four published batch-1
eager vs graph pairs imply under the cost model's rule (benchmarks/sim_cuda_graphs.py: 0.16-0.33
ms a layer; vLLM and SGLang on GPT-2 on an H200, deepspeedai/DeepSpeed PR 8352; PyTorch on
Llama-3.1-8B and Qwen2.5-7B on H100s). Our own engine launches more, unfused, kernels: ~1 ms a
layer on the H200 (its eager steps, 30.07 ms for SmolLM2's 30 layers)."""


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet peak that serving kernels achieve (0 < x <= 1).

    The same defaults serve every profile until a calibration replaces them. The
    gemm and memory figures were checked on one H100 SXM (torch 2.11 bf16 matmuls,
    Llama-3.1-8B's 32 layers + LM head replayed as a CUDA graph, no attention):
    batch-1 decode streamed its 15.0 GB in 5.88 ms (0.76 of 3.35 TB/s) and a
    4096-token prefill ran its GEMMs at 0.66 of 989 TFLOP/s. With the step overhead
    the model predicts 6.4 ms for 8B batch-1 decode, 1.4x the bandwidth roofline
    (LLM-Viewer reports 1.5-1.9x for engines with less tuned kernels). Between the
    two regimes (256 decode rows) the measured chain took 8.0 ms against a predicted
    max(6.5, 5.5) ms: the roofline max under-predicts the crossover by ~20%;
    sqrt(6.5^2 + 5.5^2) = 8.5 ms, the rule cost.step_time uses since, over-predicts
    it by 6%."""

    gemm: float = 0.7
    """Large GEMMs reach ~65-75% of the dense tensor-core peak (0.66 measured above;
    an 8192^3 bf16 matmul reaches ~0.8 on the same H100)."""
    gemm_by_precision: dict[str, float] = field(default_factory=lambda: dict(LOW_PRECISION_GEMM), hash=False)
    """The GEMM fraction for the precisions listed, in place of ``gemm``: low-precision
    tensor-core peaks are 2x and 4x bf16's, and kernels reach a smaller share of them
    (activation quantization and block-scale epilogues run beside the MMA). Default:
    ``LOW_PRECISION_GEMM``; empty: ``gemm`` for every precision."""
    tiled_gemm_by_precision: dict[str, float] = field(default_factory=dict, hash=False)
    """Under ``tile_rule``, the fraction for the precisions listed of the GEMMs the rule prices,
    before their tile losses, in place of ``gemm_for``'s flat one: ``TILED_GEMM`` on the datasheet
    GPUs; empty: ``gemm_for``."""
    memory: float = 0.75
    """Weight-streaming GEMV/skinny-GEMM kernels reach ~70-80% of HBM peak (0.76 measured above)."""
    kv_read: float | None = None
    """The fraction of memory bandwidth at which attention reads cached K/V (``StepCost.kv_read_bytes``), in
    place of ``memory``; None: ``memory``. Calibrations fit it on a long-context decode (calibrate.py)."""
    attention: float = 0.5
    """FlashAttention-3 reaches ~75% of H100 bf16 peak on long sequences
    (Shah et al., 2024); causal masks, short chunks and varlen batches cost more."""
    attention_by_precision: dict[str, float] = field(default_factory=lambda: {"fp8": FP8_ATTENTION}, hash=False)
    """Attention's fraction for the precisions listed (of that precision's peak), in place of
    ``attention``, where it computes in them (``StepCost.attention_precision``). Default:
    ``FP8_ATTENTION``."""
    expert_stream: float | None = EXPERT_WEIGHT_STREAM
    """The fraction of HBM bandwidth at which routed-expert weights stream
    (``StepCost.expert_weight_bytes``), in place of ``memory``; None: ``memory``
    (a calibrated profile, whose microbenchmarks time no MoE layer)."""
    upcast_expert_gemm: float | None = UPCAST_EXPERT_GEMM
    """The fraction of the bf16 peak at which MXFP4 routed experts compute where the device has no
    FP4 tensor cores and the kernel upcasts them to bf16 (cost.py ``expert_gemm_rate``), in place of
    ``gemm_for('bf16')``; None: ``gemm_for`` (a calibrated profile)."""
    comm: float = 0.7
    """NCCL all-reduce bus bandwidth on NVLink reaches ~70-85% of the link rate
    for large messages; serving messages are small, so the low end."""
    step_overhead_s: float = 4e-4
    """Fixed cost per engine step outside the forward's roofline: scheduling,
    sampling, input preparation, kernel-launch gaps under CUDA graphs."""
    eager_step_overhead_s: float | None = None
    """Per-step host cost of the steps an engine runs eagerly while it replays
    the others as CUDA graphs (ours: steps of more rows than ``graph_max_rows``,
    or, without it, every step with a prefill chunk or draft verification), in
    place of ``step_overhead_s``: eager PyTorch launches every kernel from
    Python, so a small model's such step costs tens of milliseconds whatever
    its size. Its launches (the part beyond ``step_overhead_s``) overlap the
    device's work (cost.step_time). None: every step costs ``step_overhead_s``
    (engines that capture every step; CPUs)."""
    eager_layer_s: float | None = None
    """Host time per transformer layer to launch a step's kernels eagerly, for a profile that
    prices steps replayed as CUDA graphs (the datasheet GPUs: ``EAGER_LAYER_S``): what
    ``--no-cuda-graphs`` turns into ``eager_step_overhead_s`` (sim/cuda_graphs.py). None: the
    profile has no such figure (a CPU; a calibrated GPU prices its eager steps directly)."""
    graph_max_rows: int | None = None
    """With ``eager_step_overhead_s``: the most rows a replayed step holds
    (our engine's largest CUDA graph size under ``--cuda-graph-mode full``,
    where prompt chunks and verifications replay too); None: only decode-only
    steps replay (``--cuda-graph-mode decode``)."""
    seq_overhead_s: float = 0.0
    """Host cost per sequence in a step (its scheduling, sampling and output
    processing), on top of ``step_overhead_s``. Near 0 for the C++ engines of
    published runs; in a Python engine such as ours it can be what makes a
    small model's step grow with the batch (on the H200, graph decode steps
    grew ~20 us per sequence; ``tokenmill sim calibrate`` fits it)."""
    tile_rule: bool = False
    """Price the dense layers' GEMMs by the tile rule (sim/gemm_tiles.py, ``Hardware.sms`` and
    ``Hardware.gemm_tile``) at ``tiled_gemm_by_precision``: ``tokenmill sim --tile-rule``
    (``with_tile_rule``). Off by default: on the validation table it moves the small Server and
    Interactive steps toward the published ones and the Hopper and small-model rows away, so the mean
    error over the rows it changes does not fall (docs/SIMULATOR-LOG.md "GEMM tiles on the SMs")."""
    collective_latency_s: float = 8e-6
    """Latency floor of one collective call (all-reduce / all-to-all) on NVLink:
    small-message NCCL or custom all-reduce takes a few microseconds regardless
    of size, which dominates TP decode at small batch."""

    def gemm_for(self, precision: str) -> float:
        return self.gemm_by_precision.get(precision, self.gemm)

    def tiled_gemm_for(self, precision: str) -> float:
        return self.tiled_gemm_by_precision.get(precision, self.gemm_for(precision))

    def attention_for(self, precision: str) -> float:
        return self.attention_by_precision.get(precision, self.attention)

    def replays(self, cost) -> bool:
        """Whether the engine replays a step of ``cost`` (a StepCost) as a CUDA graph."""
        if self.graph_max_rows is not None:
            return cost.rows <= self.graph_max_rows
        return cost.decode_only

    def __post_init__(self) -> None:
        values = {name: getattr(self, name) for name in ("gemm", "memory", "attention", "comm")}
        for name in ("expert_stream", "upcast_expert_gemm", "kv_read"):
            if getattr(self, name) is not None:
                values[name] = getattr(self, name)
        for table in ("gemm_by_precision", "tiled_gemm_by_precision", "attention_by_precision"):
            by_precision = getattr(self, table)
            values.update({f"{table}[{k}]": v for k, v in by_precision.items()})
            if set(by_precision) - set(PRECISIONS):
                raise ValueError(f"efficiency.{table}: unknown precisions "
                                 f"{sorted(set(by_precision) - set(PRECISIONS))}; choose from {PRECISIONS}")
        for name, value in values.items():
            if not 0.0 < value <= 1.0:
                raise ValueError(f"efficiency.{name}: must be in (0, 1], got {value}")
        if min(self.step_overhead_s, self.seq_overhead_s, self.collective_latency_s,
               self.eager_step_overhead_s or 0.0, self.eager_layer_s or 0.0) < 0:
            raise ValueError("efficiency: overheads must be >= 0 seconds")


@dataclass(frozen=True)
class Hardware:
    """One device type and its scale-up domain."""

    name: str
    memory_bytes: float
    """Usable HBM per device, bytes."""
    memory_bw: float
    """HBM bandwidth per device, bytes/s."""
    flops: dict[str, float] = field(hash=False)
    """Dense FLOP/s per device by compute dtype ('fp32', 'bf16', 'fp8', 'fp4'); a
    dtype the device cannot compute in is absent."""
    interconnect_bw: float
    """Scale-up (NVLink) bandwidth per device per direction, bytes/s."""
    scale_up_size: int
    """Devices in one NVLink domain (8 for HGX boards, 72 for NVL72 racks)."""
    scale_out_bw: float
    """Network bandwidth per device per direction between NVLink domains, bytes/s."""
    default_precision: str
    """Weight/compute precision the profile's vendor results use by default."""
    price_per_hour: float
    """USD per device-hour: a documented typical on-demand cloud or rental figure."""
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: tuple[str, ...] = ()
    """Where each number comes from (URLs, document names)."""
    kv_cache_bytes: float | None = None
    """KV cache per device that the engine on this device allocates by default (``this-machine``:
    our engine's, 1 GiB on a CPU, read by ``tokenmill sim calibrate``); None: what ``memory_fraction``
    of ``memory_bytes`` leaves after the weights (the datasheet profiles)."""
    sms: int | None = None
    """Streaming multiprocessors per device: the waves of the tile rule (sim/gemm_tiles.py); None
    where the profile has no such figure (CPUs)."""
    gemm_tile: tuple[int, int] | None = None
    """(rows, columns) of the output tile one SM computes in the architecture's serving GEMM kernels:
    the tile rule's tiles; None with ``sms``."""
    overlap: bool = True
    """Compute and memory traffic overlap (GPUs: tensor cores and HBM run at
    once), so a step's forward takes sqrt(compute^2 + memory^2): the larger of
    the two far from the ridge (cost.step_time). False: they add up, which is
    what a CPU with a few cores measures (``tokenmill sim calibrate`` fits both
    rules and keeps the closer one)."""

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "memory_bw", "interconnect_bw", "scale_out_bw"):
            if getattr(self, name) <= 0:
                raise ValueError(f"hardware {self.name}: {name} must be > 0, got {getattr(self, name)}")
        if self.scale_up_size < 1:
            raise ValueError(f"hardware {self.name}: scale_up_size must be >= 1, got {self.scale_up_size}")
        unknown = set(self.flops) - set(PRECISIONS)
        if unknown or not self.flops or any(v <= 0 for v in self.flops.values()):
            raise ValueError(f"hardware {self.name}: flops must map some of {PRECISIONS} to rates > 0, "
                             f"got {self.flops}")
        if self.sms is not None and self.sms < 1:
            raise ValueError(f"hardware {self.name}: sms must be >= 1, got {self.sms}")
        if self.gemm_tile is not None:  # a JSON profile gives a list
            object.__setattr__(self, "gemm_tile", tuple(self.gemm_tile))
            if len(self.gemm_tile) != 2 or min(self.gemm_tile) < 1:
                raise ValueError(f"hardware {self.name}: gemm_tile must be two positive sizes, got {self.gemm_tile}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes <= 0:
            raise ValueError(f"hardware {self.name}: kv_cache_bytes must be > 0, got {self.kv_cache_bytes}")
        if self.default_precision not in self.flops:
            raise ValueError(f"hardware {self.name}: default_precision {self.default_precision!r} "
                             f"not in flops {sorted(self.flops)}")

    def to_dict(self) -> dict:
        """JSON-able form (``from_dict`` reads it back)."""
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Hardware:
        """Inverse of ``to_dict``; ValueError names unknown or missing keys."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"hardware: unknown keys {sorted(unknown)}; expected {sorted(known)}")
        eff = d.get("efficiency") or {}
        eff_known = {f.name for f in fields(Efficiency)}
        if set(eff) - eff_known:
            raise ValueError(f"hardware.efficiency: unknown keys {sorted(set(eff) - eff_known)}")
        try:
            return cls(**{**d, "flops": {k: float(v) for k, v in d["flops"].items()},
                          "efficiency": Efficiency(**eff), "sources": tuple(d.get("sources", ()))})
        except (KeyError, TypeError) as e:
            raise ValueError(f"hardware: incomplete profile ({e})") from e


_GB = 1e9
_GIB = 2**30
_HARNESS_VRAM = ("memory in GiB as NVIDIA's MLPerf harness states it, the rated \"GB\" being GiB "
                 "(closed/NVIDIA/code/common/systems/known_hardware.py, inference_results_v5.1 @965182b and "
                 "v6.0: vram 80 GiB H100 SXM, 141 GiB H200, 180 GiB B200, 186 GiB GB200, 277 GiB GB300; "
                 "nvidia-smi totals 81,559 / 143,771 / 183,359 / 189,471 / 284,208 MiB)")
_TB = 1e12
_T = 1e12  # TFLOP/s
_P = 1e15  # PFLOP/s
_GPU_EFFICIENCY = Efficiency(eager_layer_s=EAGER_LAYER_S, tiled_gemm_by_precision=dict(TILED_GEMM))
"""The datasheet GPUs' factors: the defaults, a price for launches without CUDA graphs, and the
fractions of the tile rule (off unless asked for: ``with_tile_rule``)."""

_HOPPER_FLOPS = {"fp32": 66.9 * _T, "bf16": 989.4 * _T, "fp8": 1978.9 * _T}
_HOPPER_SOURCES = (
    "NVIDIA H100 Tensor Core GPU datasheet / Hopper architecture whitepaper (SXM5: 989.4 TFLOPS bf16 and "
    "1,978.9 TFLOPS fp8 dense, 66.9 TFLOPS fp32), tabulated at https://glennklockwood.com/garden/processors/h100",
    "NVLink 4: 900 GB/s bidirectional per GPU = 450 GB/s per direction "
    "(https://www.saulelectric.com/nvidia-h200.html)",
    "DGX H100 user guide: eight ConnectX-7 400 Gb/s ports, one per GPU = 50 GB/s "
    "(https://www.easymanua.ls/nvidia/dgx-h100/manual?p=19)",
)

H100 = Hardware(
    name="h100", efficiency=_GPU_EFFICIENCY, memory_bytes=80 * _GIB, memory_bw=3.35 * _TB,
    sms=HOPPER_SMS, gemm_tile=HOPPER_TILE,
    flops=dict(_HOPPER_FLOPS),
    interconnect_bw=450 * _GB, scale_up_size=8, scale_out_bw=50 * _GB, default_precision="fp8",
    price_per_hour=2.69,
    sources=_HOPPER_SOURCES + (_HARNESS_VRAM,
        "H100 SXM5: 80 GB HBM3, 3.35 TB/s (https://awesomeagents.ai/hardware/nvidia-h100)",
        "$2.69/GPU-h: RunPod H100 on-demand, quoted at https://deploybase.ai/articles/b200-vs-h200-vs-h100",
    ),
)

H200 = Hardware(
    name="h200", efficiency=_GPU_EFFICIENCY, memory_bytes=141 * _GIB, memory_bw=4.8 * _TB,
    sms=HOPPER_SMS, gemm_tile=HOPPER_TILE,
    flops=dict(_HOPPER_FLOPS),
    interconnect_bw=450 * _GB, scale_up_size=8, scale_out_bw=50 * _GB, default_precision="fp8",
    price_per_hour=4.54,
    sources=_HOPPER_SOURCES + (_HARNESS_VRAM,
        "H200 SXM: 141 GB HBM3e, 4.8 TB/s, same GH100 compute as H100 "
        "(https://www.aiminingco.com/gpu/h200/specs)",
        "$4.54/GPU-h: Spheron on-demand, 17 March 2026 "
        "(https://www.spheron.network/blog/nvidia-h200-vs-b200-vs-gb200)",
    ),
)

H200_NVL_PEAK_SCALE = 1671 / 1979
"""The H200 NVL card's tensor-core peaks against the H200 SXM's: NVIDIA's H200 page lists BF16 1,671 vs
1,979 and FP8 3,341 vs 3,958 TFLOPS (both with sparsity; 0.844), the same GH100 and HBM3e run at up to
600 W on a PCIe card instead of 700 W on an SXM module."""

H200_NVL = Hardware(
    name="h200-nvl", efficiency=_GPU_EFFICIENCY, memory_bytes=141 * _GIB, memory_bw=4.8 * _TB,
    sms=HOPPER_SMS, gemm_tile=HOPPER_TILE,
    flops={"fp32": 60 * _T, **{k: v * H200_NVL_PEAK_SCALE for k, v in _HOPPER_FLOPS.items() if k != "fp32"}},
    interconnect_bw=450 * _GB, scale_up_size=4, scale_out_bw=50 * _GB, default_precision="fp8",
    price_per_hour=2.83,
    sources=(
        "H200 NVL (PCIe, dual-slot, air-cooled): 141 GB HBM3e, 4.8 TB/s; BF16 1,671, FP8 3,341 TFLOPS "
        "with sparsity (835.5 and 1,670.5 dense), FP32 60 TFLOPS; up to 600 W; NVLink bridge 900 GB/s per GPU "
        "(2- or 4-way: scale_up_size 4), PCIe Gen5 128 GB/s (the H200 NVL column of "
        "https://www.nvidia.com/en-us/data-center/h200/, as tabulated in several public spec sheets)",
        "Dell PowerEdge XE7740 (8x H200-NVL-141GB), the MLPerf v6.0 system run on these cards: hw_notes "
        "\"H200 TGP 600W\", 10x 400 Gb/s NICs = 50 GB/s per GPU (closed/Dell/systems/"
        "XE7740_H200_NVL_141GBx8_TRT.json); 141 GiB as the H200 SXM (nvidia-smi reports about 143,771 MiB on "
        "an H200 NVL too)",
        "$2.83/GPU-h: Massed Compute 1x H200 NVL on-demand (vm.massedcompute.com/pricing, as quoted in 2026 "
        "price surveys)",
    ),
)

_NVLINK5 = ("NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction "
            "(https://verda.com/blog/gb300-nvl72-architecture)")

B200 = Hardware(
    name="b200", efficiency=_GPU_EFFICIENCY, memory_bytes=180 * _GIB, memory_bw=8 * _TB,
    sms=BLACKWELL_SMS, gemm_tile=BLACKWELL_TILE,
    flops={"fp32": 75 * _T, "bf16": 2.25 * _P, "fp8": 4.5 * _P, "fp4": 9 * _P},
    interconnect_bw=900 * _GB, scale_up_size=8, scale_out_bw=50 * _GB, default_precision="fp4",
    price_per_hour=6.03,
    sources=(
        "HGX B200 per GPU: 180 GB HBM3e (DGX B200 1,440 GB / 8), 8 TB/s, dense 2.25 PF bf16, 4.5 PF fp8, "
        "9 PF fp4 (https://docs.vultr.com/inference-cookbook/cuda/getting-started/hardware-overview, "
        "https://glennklockwood.com/garden/processors/B200)",
        "B200 fp32 0.075 PF (https://verda.com/blog/gb300-nvl72-architecture)",
        _NVLINK5, _HARNESS_VRAM,
        "DGX B200: eight ConnectX-7 400 Gb/s NICs, one per GPU = 50 GB/s",
        "$6.03/GPU-h: Spheron on-demand, 17 March 2026 "
        "(https://www.spheron.network/blog/nvidia-h200-vs-b200-vs-gb200)",
    ),
)

GB200 = Hardware(
    name="gb200", efficiency=_GPU_EFFICIENCY, memory_bytes=186 * _GIB, memory_bw=8 * _TB,
    sms=BLACKWELL_SMS, gemm_tile=BLACKWELL_TILE,
    flops={"fp32": 90 * _T, "bf16": 2.5 * _P, "fp8": 5 * _P, "fp4": 10 * _P},
    interconnect_bw=900 * _GB, scale_up_size=72, scale_out_bw=50 * _GB, default_precision="fp4",
    price_per_hour=4.54,
    sources=(
        "GB200 NVL72 rack: 72 GPUs, 13.4 TB HBM3e, 576 TB/s, 1,440 PF fp4 / 720 PF fp8 (sparse), 130 TB/s "
        "NVLink (https://aiwiki.ai/wiki/nvidia_gb200_nvl72); per GPU 186 GB as reported in MLPerf "
        "Inference system descriptions (GB200-NVL72_GB200-186GB)",
        "GB200 (1,200 W) dense per GPU: 2.5 PF bf16, 5 PF fp8, 10 PF fp4, 90 TF fp32 "
        "(https://glennklockwood.com/garden/processors/B200)",
        _NVLINK5, _HARNESS_VRAM,
        "ConnectX-7 400 Gb/s per GPU in GB200 NVL72 compute trays = 50 GB/s",
        "$4.54/GPU-h: Spheron $9.08/h per GB200 superchip (2 GPUs), 17 March 2026 "
        "(https://www.spheron.network/blog/nvidia-h200-vs-b200-vs-gb200)",
    ),
)

_BLACKWELL_ULTRA_EFFICIENCY = replace(_GPU_EFFICIENCY,
                                      gemm_by_precision={**LOW_PRECISION_GEMM, "fp4": GB300_FP4_GEMM},
                                      tiled_gemm_by_precision={**TILED_GEMM, "fp4": GB300_TILED_FP4})
"""Blackwell Ultra's (the GB300's and the B300's chip, compute capability 10.3): its own FP4 GEMM fraction."""

GB300 = Hardware(
    name="gb300",
    efficiency=_BLACKWELL_ULTRA_EFFICIENCY, sms=BLACKWELL_ULTRA_SMS, gemm_tile=BLACKWELL_TILE,
    memory_bytes=277 * _GIB, memory_bw=8 * _TB,
    flops={"fp32": 80 * _T, "bf16": 2.5 * _P, "fp8": 5 * _P, "fp4": 15 * _P},
    interconnect_bw=900 * _GB, scale_up_size=72, scale_out_bw=100 * _GB, default_precision="fp4",
    price_per_hour=6.00,
    sources=(
        "GB300 per GPU (dense): 279 GB HBM3e (memory_bytes: the harness's 277 GiB), 8 TB/s, 15 PF fp4, "
        "5 PF fp8, 2.5 PF bf16, 0.08 PF fp32 "
        "(https://verda.com/blog/gb300-nvl72-architecture); rack: 1.1 EF dense fp4, 20 TB HBM at 576 TB/s "
        "(https://glennklockwood.com/garden/processors/B300)",
        _NVLINK5, _HARNESS_VRAM,
        "ConnectX-8 SuperNIC 800 Gb/s per GPU = 100 GB/s "
        "(https://vendordeep.com/report/nvidia-launches-blackwell-ultra-gb300)",
        "$6.00/GPU-h: within Ornn's B300 neocloud on-demand range $5.00-7.25 "
        "(https://www.ornnai.com/research/nvidia-b200-vs-b300-why-use-one-instead-of-the-other)",
    ),
)

B300 = Hardware(
    name="b300",
    efficiency=_BLACKWELL_ULTRA_EFFICIENCY, sms=BLACKWELL_ULTRA_SMS, gemm_tile=BLACKWELL_TILE,
    memory_bytes=268 * _GIB, memory_bw=8 * _TB,
    flops={"fp32": 75 * _T, "bf16": 2.25 * _P, "fp8": 4.5 * _P, "fp4": 13.125 * _P},
    interconnect_bw=900 * _GB, scale_up_size=8, scale_out_bw=100 * _GB, default_precision="fp4",
    price_per_hour=6.00,
    sources=(
        "HGX B300 per GPU, dense: 13.125 PF fp4 (18 with sparsity; 105 / 144 PF per 8 GPUs), 4.5 PF fp8, 2.25 PF "
        "bf16, 0.075 PF fp32 (https://glennklockwood.com/garden/processors/B300: \"the HGX variant of B300 has "
        "similar performance to B200\" but FP4); 8 TB/s HBM3e per GPU, NVLink 5 at 1.8 TB/s per GPU "
        "(https://acecloud.ai/blog/nvidia-hgx-b300)",
        "The GB300's Blackwell Ultra (compute capability 10.3) at 1,100 W where the GB300 runs 1,400 W: its FP4 "
        "GEMM fraction is the GB300's (GB300_FP4_GEMM), fitted on NVIDIA's rack runs, which the B300 rows check",
        _NVLINK5,
        "memory_bytes: 268 GiB, NVIDIA's harness (closed/NVIDIA/code/common/systems/known_hardware.py, v6.0: "
        "B300_SXM_270GB vram \"268 GiB\", compute_sm 10.3, max_power_limit 1100); system description "
        "closed/NVIDIA/systems/B300-SXM-270GBx8_TRT.json: \"B300 TGP 1100W\"",
        "ConnectX-8 SuperNIC 800 Gb/s per GPU = 100 GB/s (https://acecloud.ai/blog/nvidia-hgx-b300)",
        "$6.00/GPU-h: within Ornn's B300 neocloud on-demand range $5.00-7.25 "
        "(https://www.ornnai.com/research/nvidia-b200-vs-b300-why-use-one-instead-of-the-other)",
    ),
)

HARDWARE: dict[str, Hardware] = {hw.name: hw for hw in (H100, H200, H200_NVL, B200, B300, GB200, GB300)}
"""Built-in profiles by ``--hardware`` name."""


def get_hardware(name: str) -> Hardware:
    """The built-in profile ``name``, or a calibrated one (``this-machine`` or another ``tokenmill
    sim calibrate --profile NAME``); ValueError names the ``--hardware`` choices."""
    from tokenmill.sim.calibrate import THIS_MACHINE, has_profile, load_profile

    if name in HARDWARE:
        return HARDWARE[name]
    if name == THIS_MACHINE or has_profile(name):
        return load_profile(name)
    raise ValueError(f"--hardware: unknown {name!r}; choose from {sorted(HARDWARE)}, this-machine or a --profile")


def with_tile_rule(hardware: Hardware) -> Hardware:
    """``hardware`` pricing the dense layers' GEMMs by the tile rule (``Efficiency.tile_rule``,
    sim/gemm_tiles.py): ``tokenmill sim --tile-rule``. ValueError for a profile without an SM
    count, a GEMM tile and fractions fitted under the rule (a CPU; a calibrated profile, whose
    measured fraction already holds its kernels' losses)."""
    if not (hardware.sms and hardware.gemm_tile and hardware.efficiency.tiled_gemm_by_precision):
        raise ValueError(f"--tile-rule: {hardware.name} has no SM count, GEMM tile and tiled fractions to price "
                         f"tiles by (the datasheet GPUs have: {sorted(HARDWARE)})")
    return replace(hardware, efficiency=replace(hardware.efficiency, tile_rule=True))
