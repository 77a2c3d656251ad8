"""What one engine step costs one device: FLOPs, bytes, communication, and time.

``step_cost`` counts work from the model's shape (models.py ``ModelShape``) and one
step's shape (shapes.py ``StepShape``); ``step_time`` turns the counts into seconds
on a hardware profile (hardware.py) with its efficiency factors. Counting follows
LLM-Viewer's roofline accounting; the efficiencies are where AIConfigurator and
Vidur would put measured operator times.

Parallel layout of one model replica (``Parallel``): it spans ``devices = max(tp,
ep)`` devices. Non-expert layers (attention, dense MLPs, shared experts, LM head)
run tensor-parallel over ``attn_tp`` devices (``tp``, or 1 with ``attention_dp``)
and data-parallel over ``dp = devices / attn_tp`` groups, each holding 1/dp of
the step's sequences. Routed experts are split over ``ep`` ranks and each expert
is tensor-parallel over ``etp = devices / ep`` devices. Sequences spread evenly
over dp groups; tokens do not spread evenly over expert-parallel ranks, and the
busiest rank sets the step's pace (``ep_imbalance``): the expert GEMM FLOPs and
the all-to-all traffic are that rank's.

Sliding-window layers (``ModelShape.num_sliding_layers``, gpt-oss's every other
layer) attend over at most ``sliding_window`` keys and read at most that many
cached tokens per sequence; the other layers attend over the whole context.

Units: FLOPs, bytes, seconds; every ``StepCost`` field is per device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from tokenmill.model.protocol import ArchInfo
from tokenmill.sim.expert_routing import ep_imbalance, expected_distinct_experts, remote_ranks_per_token
from tokenmill.sim.gemm_tiles import device_gemms, tile_factor
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.models import ModelShape, model_shape
from tokenmill.sim.shapes import StepShape

PRECISION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}
"""Weight bytes per parameter. fp4 is NVFP4: 4-bit E2M1 values plus one FP8 (E4M3)
scale per 16 values (NVIDIA NVFP4 format); fp8's 128x128 block scales (DeepSeek's)
add 0.02% and are ignored."""
EXPERT_FORMAT_BYTES = {"mxfp4": 0.5 + 1.0 / 32}
"""Weight bytes per parameter of the formats a checkpoint ships its routed experts in
and engines serve as is (``ModelShape.expert_precision``), whatever the deployment's
precision. MXFP4 (OCP Microscaling): 4-bit E2M1 values plus one 8-bit (E8M0) scale
per 32 values, 4.25 bits (gpt-oss model card, sec. 2.1); the experts' biases, kept
in bf16 by the checkpoint, are counted alike (0.03% of the experts). What their GEMMs
compute in: ``expert_compute_precision``."""
ACT_BYTES = 2.0
"""Activations and all-reduce payloads are bf16."""
LOGIT_BYTES = 4.0
"""Logits are written in fp32 for sampling."""


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    """Tensor-parallel degree of the non-expert layers (unless ``attention_dp``)."""
    ep: int = 1
    """Expert-parallel degree: routed experts are split over this many ranks."""
    attention_dp: bool = False
    """Non-expert layers run data-parallel over the replica's devices (full weights
    on each, 1/devices of the sequences) instead of tensor-parallel: DeepSeek's
    decode layout (SGLang's --enable-dp-attention)."""

    def __post_init__(self) -> None:
        if self.tp < 1 or self.ep < 1:
            raise ValueError(f"parallel: tp and ep must be >= 1, got tp={self.tp} ep={self.ep}")
        if max(self.tp, self.ep) % min(self.tp, self.ep):
            raise ValueError(f"parallel: tp={self.tp} and ep={self.ep} must divide one another")

    # Cached (each is read several times a step; the dataclass is frozen, so they never change).
    @cached_property
    def devices(self) -> int:
        return max(self.tp, self.ep)

    @cached_property
    def attn_tp(self) -> int:
        return 1 if self.attention_dp else self.tp

    @cached_property
    def dp(self) -> int:
        return self.devices // self.attn_tp

    @cached_property
    def etp(self) -> int:
        return self.devices // self.ep


@dataclass(frozen=True)
class StepCost:
    """One step's work on one device of the replica."""

    gemm_flops: float
    """Projection, MLP, expert, router and LM-head matmuls (2 x params x rows)."""
    attention_flops: float
    """QK^T and PV over the cached context and the step's own tokens (causal)."""
    weight_bytes: float
    """Weights read once per step (experts: only those some row is routed to)."""
    kv_read_bytes: float
    kv_write_bytes: float
    activation_bytes: float
    """GEMM inputs/outputs in bf16 and the fp32 logits."""
    allreduce_bytes: float
    """Tensor-parallel all-reduce traffic sent by this device (ring: 2(n-1)/n x payload)."""
    alltoall_bytes: float
    """Expert-parallel dispatch + combine traffic sent by this device."""
    num_collectives: int
    """Collective calls in the step (each pays the latency floor)."""
    devices: int
    """Devices in the replica (decides NVLink vs scale-out)."""
    sequences: int = 0
    """Sequences in the step (decodes and prefill chunks): the host's per-sequence work."""
    decode_only: bool = True
    """One token per sequence, no prefill chunk."""
    rows: int = 0
    """Rows of the forward (tokens computed): with ``decode_only``, what decides
    whether our engine replays the step as a CUDA graph (``Efficiency.graph_max_rows``)."""
    expert_weight_bytes: float = 0.0
    """Of ``weight_bytes``, the routed experts': streamed at ``Efficiency.expert_stream``."""
    expert_gemm_flops: float = 0.0
    """Of ``gemm_flops``, the routed experts' (this device's EP rank's share)."""
    expert_format: str | None = None
    """The routed experts' checkpoint format where the model keeps one (``ModelShape.expert_precision``):
    their GEMMs then compute as ``expert_compute_precision`` says, not at the deployment's precision."""
    gemm_shape_args: tuple = ()
    """``device_gemms``' arguments for this step (sim/gemm_tiles.py), kept as they are: most steps are
    priced without the tile rule, so ``tiled_gemms`` is built only when asked; empty for MoE and MLA models."""
    attention_precision: str = "bf16"
    """What attention computes in: 'fp8' over an FP8 KV cache (Q quantized too, FP8
    MMA), else 'bf16' (``step_time`` falls back to bf16 where the device has no FP8)."""

    @property
    def tiled_gemms(self) -> tuple[tuple[int, int, int, int], ...]:
        """The device's GEMMs the tile rule prices, as (rows, n, k, calls): the dense layers' and the
        LM head's; empty for MoE and MLA models."""
        return device_gemms(*self.gemm_shape_args) if self.gemm_shape_args else ()

    @property
    def memory_bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes

    @property
    def comm_bytes(self) -> float:
        return self.allreduce_bytes + self.alltoall_bytes


@dataclass(frozen=True)
class StepTime:
    """Seconds; ``total_s = forward_s + comm_s + overhead_s``, the forward combining
    compute_s and memory_s by ``step_time``'s rule (sqrt(compute^2 + memory^2), or
    their sum where the hardware does not overlap them)."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    total_s: float

    @property
    def forward_s(self) -> float:
        """The forward pass alone: compute and memory as combined, no communication or host overhead."""
        return self.total_s - self.comm_s - self.overhead_s

    @property
    def bound(self) -> str:
        """'compute' or 'memory': the larger of the two overlapped terms."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


def _bytes_per_param(precision: str) -> float:
    try:
        return PRECISION_BYTES[precision]
    except KeyError:
        raise ValueError(f"--precision: unknown {precision!r}; choose from {sorted(PRECISION_BYTES)}") from None


def _expert_bytes(s: ModelShape, bpp: float) -> float:
    """Bytes per routed-expert parameter: the checkpoint's own format where it has one."""
    return bpp if s.expert_precision is None else EXPERT_FORMAT_BYTES[s.expert_precision]


def weight_bytes(arch: ArchInfo, precision: str, parallel: Parallel | None = None) -> float:
    """Weights held (bytes): the whole model, or one device's share under ``parallel``.
    Embeddings, LM head and routers stay at least bf16 (as in FP8/NVFP4 checkpoints)."""
    return shape_weight_bytes(model_shape(arch), precision, parallel)


def shape_weight_bytes(s: ModelShape, precision: str, parallel: Parallel | None = None) -> float:
    """``weight_bytes`` of a model given by its ``ModelShape`` (a pipeline stage's: sim/pipeline.py)."""
    bpp, p = _bytes_per_param(precision), parallel or Parallel()
    high = max(bpp, 2.0)
    head = s.embed_params + (0 if s.tied else s.lm_head_params)
    non_expert = (s.dense_params * bpp + (head + s.num_moe_layers * s.router_params) * high) / p.attn_tp
    experts = s.num_moe_layers * s.num_experts * s.expert_params * _expert_bytes(s, bpp) / p.devices
    return non_expert + experts + s.norm_params * 2.0


def kv_bytes_per_token(arch: ArchInfo, kv_dtype_bytes: float, parallel: Parallel | None = None) -> float:
    """KV-cache bytes one token takes over all layers; with ``parallel``, on each device
    holding it (GQA heads split over at most kv_heads ranks; MLA's latent is replicated).

    Sliding-window layers are left out: a sequence holds at most ``sliding_window``
    tokens of theirs however long it grows (an engine frees the blocks behind the
    window). Capacity thus ignores that fixed amount per sequence (gpt-oss-120b: 128
    tokens x 18 layers, 2.4 MB in fp8, as much as 128 more tokens of the full layers):
    it overstates the tokens that fit by at most window / sequence length."""
    return shape_kv_bytes_per_token(model_shape(arch), kv_dtype_bytes, parallel)


def shape_kv_bytes_per_token(s: ModelShape, kv_dtype_bytes: float, parallel: Parallel | None = None) -> float:
    """``kv_bytes_per_token`` of a model given by its ``ModelShape`` (a pipeline stage's)."""
    shard = min((parallel or Parallel()).attn_tp, s.kv_heads)
    return (s.num_layers - s.num_sliding_layers) * s.kv_values_per_token * kv_dtype_bytes / shard


@dataclass(slots=True)
class _Rows:
    """The step's rows in the terms the counts need (whole replica). Never changed once built
    (``_window_rows`` makes a new one); not frozen only because it is built every step."""

    rows: int
    logit_rows: int
    decode_pairs: int
    prefill_pairs: int
    prefix_tokens: int
    kv_read_tokens: int


def _rows(shape: StepShape) -> _Rows:
    t, decodes, prefills = shape.tokens_per_decode, shape.num_decodes, shape.prefills
    # Row j (1..t) of a decode with context c attends c + j keys; a prefill chunk of n
    # on context c attends n*c + n(n+1)/2 (causal, masked blocks skipped). Summed over
    # the decodes in closed form: a step can hold thousands, and this runs every step.
    contexts = shape.decode_context_sum
    decode_pairs = t * contexts + decodes * (t * (t + 1) // 2)
    if not prefills:  # a decode-only step, the usual one
        return _Rows(decodes * t, decodes * t, decode_pairs, 0, 0, contexts)
    prefill_pairs = sum(p.num_tokens * p.context + p.num_tokens * (p.num_tokens + 1) // 2 for p in prefills)
    prefix = sum(p.context for p in prefills)
    return _Rows(rows=shape.num_tokens, logit_rows=decodes * t + len(prefills),
                 decode_pairs=decode_pairs, prefill_pairs=prefill_pairs, prefix_tokens=prefix,
                 kv_read_tokens=contexts + prefix)


def _window_rows(shape: StepShape, full: _Rows, window: int) -> _Rows:
    """``full`` (the step's ``_rows``) as a sliding-window layer sees it: every row attends
    at most ``window`` keys, and a sequence's cache is read up to ``window`` tokens."""
    def attended(context, rows):
        # Rows k = 1..rows attend context + k keys until that reaches the window, then window.
        below = np.clip(window - context, 0, rows)
        return below * context + below * (below + 1) // 2 + (rows - below) * window

    contexts = shape.decode_context_array()  # vectorized: a step holds up to thousands of decodes
    prefix = sum(min(p.context, window) for p in shape.prefills)
    return replace(full, decode_pairs=int(attended(contexts, shape.tokens_per_decode).sum()),
                   prefill_pairs=sum(int(attended(p.context, p.num_tokens)) for p in shape.prefills),
                   prefix_tokens=prefix, kv_read_tokens=int(np.minimum(contexts, window).sum()) + prefix)


def _flops(s: ModelShape, r: _Rows, window: _Rows, p: Parallel) -> tuple[float, float, float]:
    """(gemm, attention, of gemm the routed experts') FLOPs per device (the busiest EP rank's
    expert share); ``window``: the counts of the sliding-window layers."""
    moe, devices = s.num_moe_layers, p.devices
    expert_per_row = moe * s.top_k * s.expert_params * ep_imbalance(p.ep, s.num_experts)
    per_row = s.dense_params + moe * s.router_params + expert_per_row
    gemm = 2.0 * (r.rows * per_row + r.logit_rows * s.lm_head_params)

    def per_layer(c: _Rows) -> int:
        return (c.decode_pairs * s.pair_flops_decode + c.prefill_pairs * s.pair_flops_prefill
                + c.prefix_tokens * s.prefix_flops_per_token)

    attn = (s.num_layers - s.num_sliding_layers) * per_layer(r) + s.num_sliding_layers * per_layer(window)
    return gemm / devices, attn / devices, 2.0 * r.rows * expert_per_row / devices


def expert_compute_precision(expert_format: str | None, hardware: Hardware, precision: str) -> str:
    """What the routed experts' GEMMs compute in. Experts kept in MXFP4 (gpt-oss) meet
    activations quantized to MXFP8 on a device with FP4 tensor cores (Blackwell: the FP8-class
    MMA, UTCQMMA, priced at the FP8 rate) and in bf16 elsewhere (Hopper: the kernel upcasts the
    weights to bf16 for HGMMA, W4A16), whatever the deployment's precision: the recommended rows
    of TensorRT-LLM's gpt-oss support matrix (examples/models/core/gpt_oss/README.md, its MMA column).
    Other experts compute at the deployment's precision; so does a device with neither rate."""
    if expert_format == "mxfp4":
        wanted = "fp8" if "fp4" in hardware.flops else "bf16"
        return wanted if wanted in hardware.flops else precision
    return precision


def expert_gemm_rate(expert_format: str | None, hardware: Hardware, precision: str) -> float:
    """FLOP/s of the routed experts' GEMMs: their ``expert_compute_precision``'s peak at its GEMM
    fraction, or, for MXFP4 experts upcast to bf16 (no FP4 tensor cores), at
    ``Efficiency.upcast_expert_gemm`` where the profile sets it (hardware.py ``UPCAST_EXPERT_GEMM``)."""
    computed, eff = expert_compute_precision(expert_format, hardware, precision), hardware.efficiency
    upcast = expert_format == "mxfp4" and computed == "bf16" and eff.upcast_expert_gemm is not None
    return hardware.flops[computed] * (eff.upcast_expert_gemm if upcast else eff.gemm_for(computed))


def _weight_read(s: ModelShape, r: _Rows, p: Parallel, bpp: float) -> tuple[float, float]:
    """Weight bytes one device streams in the step, as (its non-expert shard, the experts on
    its EP rank that at least one row is routed to, each read once)."""
    high = max(bpp, 2.0)
    non_expert = (s.dense_params * bpp + (s.lm_head_params + s.num_moe_layers * s.router_params) * high) / p.attn_tp
    touched = expected_distinct_experts(r.rows, s.num_experts, s.top_k) / p.ep
    return non_expert, s.num_moe_layers * touched * s.expert_params * _expert_bytes(s, bpp) / p.etp


def _activations(s: ModelShape, r: _Rows, devices: int) -> float:
    per_row = (s.num_layers * s.attention_io + s.num_dense_layers * s.dense_mlp_io
               + s.num_moe_layers * (s.top_k * s.expert_io + s.shared_io))
    total = ACT_BYTES * r.rows * (per_row + s.hidden) + LOGIT_BYTES * r.logit_rows * s.vocab  # + embedding gather
    return total / devices


def _comm(s: ModelShape, r: _Rows, p: Parallel, precision: str) -> tuple[float, float, int]:
    """(all-reduce bytes, all-to-all bytes, collective calls) per device.

    All-reduce (ring, per device 2(n-1)/n x payload): after attention and after each
    dense MLP over attn_tp for the group's rows/dp; after each MoE layer over etp when
    experts are tensor-split (payload rows x etp/devices). All-to-all per MoE layer
    when ep > 1: each device dispatches its rows/devices tokens once to every other EP
    rank owning one of their top_k experts (``remote_ranks_per_token``: TensorRT-LLM's
    rank-major NVLink all-to-all sends a token at most once per target rank), and gets
    one partial sum per such rank back in combine. Dispatch carries the activations
    quantized as the GEMMs take them (post-quant dispatch: fp8 1 byte, NVFP4 0.5625 bytes
    per element with its scales), combine bf16 (both as TensorRT-LLM's tech blog 18)."""
    def ring(n: int, rows: float) -> float:
        return 2.0 * (n - 1) / n * rows * s.hidden * ACT_BYTES

    ar, calls = 0.0, 0
    if p.attn_tp > 1:
        layers = s.num_layers + s.num_dense_layers
        ar += layers * ring(p.attn_tp, r.rows / p.dp)
        calls += layers
    if s.num_moe_layers and p.etp > 1:
        ar += s.num_moe_layers * ring(p.etp, r.rows * p.etp / p.devices)
        calls += s.num_moe_layers
    a2a = 0.0
    if s.num_moe_layers and p.ep > 1:
        dispatch = min(PRECISION_BYTES[precision], ACT_BYTES)
        # The busiest rank receives (and sends back) ep_imbalance times the mean's tokens.
        sent = (r.rows / p.devices * remote_ranks_per_token(p.ep, s.num_experts, s.top_k) * s.hidden
                * ep_imbalance(p.ep, s.num_experts))
        a2a = s.num_moe_layers * sent * (dispatch + ACT_BYTES)
        calls += 2 * s.num_moe_layers
    return ar, a2a, calls


def step_cost(arch: ArchInfo, shape: StepShape, parallel: Parallel, precision: str,
              kv_dtype_bytes: float) -> StepCost:
    """One step of ``shape`` (the whole replica's rows) as seen by one of its devices."""
    return shape_step_cost(model_shape(arch), shape, parallel, precision, kv_dtype_bytes)


def shape_step_cost(s: ModelShape, shape: StepShape, parallel: Parallel, precision: str,
                    kv_dtype_bytes: float) -> StepCost:
    """``step_cost`` of a model given by its ``ModelShape`` (sim/mtp_module.py prices a
    next-token-prediction module's pass as a one-layer model)."""
    bpp, r, p = _bytes_per_param(precision), _rows(shape), parallel
    window = _window_rows(shape, r, s.sliding_window) if s.num_sliding_layers else r
    gemm, attn, expert_gemm = _flops(s, r, window, p)
    # KV bytes per token of the full layers and of the sliding-window ones (which still
    # write every new token, into the window they keep).
    full_layers = s.num_layers - s.num_sliding_layers
    kv_token = full_layers * s.kv_values_per_token * kv_dtype_bytes / p.dp / min(p.attn_tp, s.kv_heads)
    kv_window = s.num_sliding_layers * s.kv_values_per_token * kv_dtype_bytes / p.dp / min(p.attn_tp, s.kv_heads)
    ar, a2a, calls = _comm(s, r, p, precision)
    non_expert, experts = _weight_read(s, r, p, bpp)
    return StepCost(gemm_flops=gemm, attention_flops=attn, weight_bytes=non_expert + experts,
                    expert_weight_bytes=experts, expert_gemm_flops=expert_gemm, expert_format=s.expert_precision,
                    kv_read_bytes=kv_token * r.kv_read_tokens + kv_window * window.kv_read_tokens,
                    kv_write_bytes=(kv_token + kv_window) * r.rows,
                    activation_bytes=_activations(s, r, p.devices), allreduce_bytes=ar, alltoall_bytes=a2a,
                    num_collectives=calls, devices=p.devices,
                    sequences=shape.num_decodes + len(shape.prefills),
                    decode_only=not shape.prefills and shape.tokens_per_decode == 1, rows=shape.num_tokens,
                    gemm_shape_args=(s.layer_gemms, s.num_layers, (s.vocab, s.hidden), r.rows, r.logit_rows,
                                     p.dp, p.attn_tp) if s.layer_gemms else (),
                    attention_precision="fp8" if kv_dtype_bytes == 1 else "bf16")


def _tiled_gemms_s(cost: StepCost, hardware: Hardware, precision: str) -> float:
    """Seconds to add to the flat-fraction compute for the GEMMs the tile rule prices
    (``cost.tiled_gemms``, sim/gemm_tiles.py): their FLOPs at the tiled fraction over the useful
    share their tiles and waves leave, less what the flat fraction charged them; 0 where the
    profile does not price tiles (``Efficiency.tile_rule`` off, the default; no SM count or tile: CPUs,
    calibrated profiles) or the model lists no GEMM shapes."""
    eff, tile = hardware.efficiency, hardware.gemm_tile
    if not (eff.tile_rule and cost.gemm_shape_args and hardware.sms and tile):
        return 0.0
    gemms = cost.tiled_gemms
    flops = 2.0 * sum(m * n * k * calls for m, n, k, calls in gemms)
    useful = tile_factor(gemms, hardware.sms, tile)
    return flops / hardware.flops[precision] * (1.0 / (eff.tiled_gemm_for(precision) * useful)
                                                - 1.0 / eff.gemm_for(precision))


def step_time(cost: StepCost, hardware: Hardware, precision: str, fused_allreduce: bool = False) -> StepTime:
    """Seconds for ``cost`` on ``hardware``.

    Rule: compute and memory traffic overlap, imperfectly: the forward takes
    sqrt(compute^2 + memory^2), the slower term far from the roofline's ridge
    (+4% where the other is 0.3 of it) and 1.41x it where the two are equal,
    where no kernel reaches both peaks at once (large-batch MoE decode sits there;
    the rule against the plain max, docs/SIMULATOR-LOG.md "Near the ridge"). On
    hardware with ``overlap`` False, a CPU's, they add up;
    communication does not (TP all-reduces and EP all-to-alls sit between layers on
    the critical path; overlap tricks such as two-batch overlap are not modelled), except
    with ``fused_allreduce``: the all-reduces run inside the GEMMs they follow (GEMM +
    all-reduce fusion, as the published Llama-3.1-405B MLPerf runs), overlapping the
    forward by the same imperfect rule, so only sqrt(forward^2 + allreduce^2) - forward
    of them shows (each call's latency floor stays), and
    neither does the host's overhead (per step, plus per sequence in the step).
    A step the engine runs eagerly (``Efficiency.replays`` False, where the profile prices eager
    steps) launches its kernels from the host: its launches (``eager_step_overhead_s`` less
    ``step_overhead_s``) overlap the device's forward and communication by the same rule (the
    host runs ahead of a busy GPU), or add to them where ``overlap`` is False; so a small step
    costs its launches and a large one little more than its device time.
    Routed experts' weights stream at ``eff.expert_stream`` of HBM (grouped GEMMs of a few
    rows per expert read far below the rate dense layers reach), the rest at ``eff.memory``.
    GEMMs run at ``precision``, the routed experts' at ``expert_gemm_rate`` where the
    model keeps its experts' own format; attention at ``cost.attention_precision`` where the
    device has it (FP8 over an FP8 KV cache), else bf16. Under the tile rule (``--tile-rule``) the
    dense layers' GEMMs lose what their tiles and waves leave idle (``_tiled_gemms_s``). A replica larger than the
    NVLink domain communicates at scale-out bandwidth."""
    if precision not in hardware.flops:
        raise ValueError(f"--precision: {hardware.name} has no {precision!r} tensor cores; "
                         f"choose from {sorted(hardware.flops)}")
    eff = hardware.efficiency
    attn = next((p for p in (cost.attention_precision, "bf16") if p in hardware.flops), precision)
    attn_rate = hardware.flops[attn] * eff.attention_for(attn)
    dense_rate = hardware.flops[precision] * eff.gemm_for(precision)
    compute = cost.gemm_flops / dense_rate + cost.attention_flops / attn_rate
    expert_rate = expert_gemm_rate(cost.expert_format, hardware, precision)
    if expert_rate != dense_rate:  # the experts' FLOPs at their own rate
        compute += cost.expert_gemm_flops * (1 / expert_rate - 1 / dense_rate)
    compute += _tiled_gemms_s(cost, hardware, precision)
    experts = cost.expert_weight_bytes / (eff.expert_stream or eff.memory)
    streamed = cost.memory_bytes - cost.expert_weight_bytes
    if eff.kv_read is not None:  # the cached K/V read at a rate of its own: as that many bytes at eff.memory
        streamed += cost.kv_read_bytes * (eff.memory / eff.kv_read - 1)
    memory = (experts + streamed / eff.memory) / hardware.memory_bw
    link = (hardware.interconnect_bw if cost.devices <= hardware.scale_up_size else hardware.scale_out_bw) * eff.comm
    forward = math.hypot(compute, memory) if hardware.overlap else compute + memory
    allreduce = cost.allreduce_bytes / link
    if fused_allreduce:
        allreduce = math.hypot(forward, allreduce) - forward
    comm = allreduce + cost.alltoall_bytes / link + cost.num_collectives * eff.collective_latency_s
    overhead = eff.step_overhead_s + eff.seq_overhead_s * cost.sequences
    if eff.eager_step_overhead_s is not None and not eff.replays(cost):
        # Launching the kernels from the host: what the eager step costs beyond the per-step work,
        # overlapping the device's work (the host runs ahead of a busy GPU) by the same rule.
        launch = max(eff.eager_step_overhead_s - eff.step_overhead_s, 0.0)
        device = forward + comm
        overhead += math.hypot(device, launch) - device if hardware.overlap else launch
    return StepTime(compute_s=compute, memory_s=memory, comm_s=comm, overhead_s=overhead,
                    total_s=forward + comm + overhead)
