"""The models the simulator prices, and their shapes in the cost model's terms.

``get_model(name)`` accepts a name in ``SIM_MODELS`` (real published shapes), any
``dummy:<preset>`` of the model registry, or a path to a HF config.json (or the
directory holding it), parsed by the registry's own config parser
(model/loaders/dummy.py ``dummy_arch``). No weights are ever loaded.

``model_shape(arch)`` turns a ``ModelArch`` (Llama family, Mixtral), a
``DeepseekArch`` (MLA + MoE) or a ``GptOssArch`` (gpt-oss: alternating sliding
window, MXFP4 experts; a description for the simulator only, the engine has no
gpt-oss model) into ``ModelShape``: per-layer parameter counts and matrix
widths, the only thing cost.py reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenmill.model.arch import ModelArch
from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.deepseek_presets import DEEPSEEK_PRESETS
from tokenmill.model.llama_presets import LLAMA_PRESETS
from tokenmill.model.protocol import ArchInfo

_LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _llama31(hidden: int, intermediate: int, layers: int, heads: int) -> ModelArch:
    """Llama 3.1 / 3.3 shape: 8 KV heads, head_dim 128, vocab 128256, untied head."""
    return ModelArch(family="llama", vocab_size=128256, hidden_size=hidden, intermediate_size=intermediate,
                     num_layers=layers, num_heads=heads, num_kv_heads=8, head_dim=hidden // heads,
                     rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
                     tie_word_embeddings=False, rope_scaling=dict(_LLAMA31_SCALING), bos_token_id=128000,
                     eos_token_ids=(128001, 128008, 128009))


@dataclass(frozen=True)
class GptOssArch:
    """gpt-oss (OpenAI): GQA with biases on q/k/v/o and a learned sink logit per head, the
    even layers (0-based) attending over a sliding window; every layer an MoE of top-k
    experts (gated SwiGLU with clamping, biases on both projections, a router with a bias).
    The published checkpoint holds the experts in MXFP4, everything else in bf16.
    Satisfies ``ArchInfo`` for the simulator; no engine model runs it."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    top_k: int
    expert_intermediate: int
    sliding_window: int | None
    """Keys a sliding layer attends (its own token included); None: every layer full."""
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]
    family: str = "gpt_oss"
    bos_token_id: int | None = None
    expert_precision: str = "mxfp4"
    """The experts' checkpoint format, which engines serve as is (cost.py EXPERT_FORMAT_BYTES)."""

    @property
    def num_sliding_layers(self) -> int:
        return (self.num_layers + 1) // 2 if self.sliding_window else 0

    @property
    def attention_params(self) -> int:
        """One layer: q/k/v/o weights and biases, one sink per head."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return h * (q + 2 * kv) + (q + 2 * kv) + q * h + h + self.num_heads

    @property
    def expert_params(self) -> int:
        """One expert: gate+up [h -> 2i] and down [i -> h], with biases."""
        h, i = self.hidden_size, self.expert_intermediate
        return h * 2 * i + 2 * i + i * h + h

    @property
    def router_params(self) -> int:
        return self.num_experts * (self.hidden_size + 1)

    def num_params(self) -> int:
        """Every parameter: untied embedding and LM head, two RMSNorms per layer and a final one."""
        h = self.hidden_size
        layer = self.attention_params + self.num_experts * self.expert_params + self.router_params + 2 * h
        return self.num_layers * layer + 2 * self.vocab_size * h + h

    def flops_per_token(self, context_len: int = 0) -> float:
        """2 x the parameters one token multiplies (top_k experts, LM head; biases and sinks
        counted alike, a negligible excess) plus QK^T and PV over ``context_len`` keys,
        at most ``sliding_window`` of them in the sliding layers."""
        L, q = self.num_layers, self.num_heads * self.head_dim
        matmul = L * (self.attention_params + self.router_params + self.top_k * self.expert_params)
        matmul += self.vocab_size * self.hidden_size
        window = min(context_len, self.sliding_window or context_len)
        attention = 4 * q * ((L - self.num_sliding_layers) * context_len + self.num_sliding_layers * window)
        return 2.0 * matmul + attention


SIM_MODELS: dict[str, ArchInfo] = {
    # config.json of meta-llama/Llama-3.1-8B-Instruct, -3.1-405B-Instruct, -3.3-70B-Instruct on the HF Hub
    # (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads; num_key_value_heads 8,
    # vocab_size 128256, rope_theta 500000, llama3 rope scaling factor 8).
    "llama3.1-8b": _llama31(hidden=4096, intermediate=14336, layers=32, heads=32),
    "llama3.3-70b": _llama31(hidden=8192, intermediate=28672, layers=80, heads=64),
    "llama3.1-405b": _llama31(hidden=16384, intermediate=53248, layers=126, heads=128),
    # meta-llama/Llama-2-70b-hf config.json: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV
    # heads, vocab 32000, 4,096 positions, rope_theta 10000, no rope scaling, untied, bos 1, eos 2
    # (MLPerf's llama2-70b benchmark model).
    "llama2-70b": ModelArch(family="llama", vocab_size=32000, hidden_size=8192, intermediate_size=28672,
                            num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5,
                            rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=False,
                            bos_token_id=1, eos_token_ids=(2,)),
    # deepseek-ai/DeepSeek-R1 config.json, already a registry preset (model/deepseek_presets.py).
    "deepseek-r1": DEEPSEEK_PRESETS["deepseek-r1"],
    # The embedded model (SmolLM2-135M-Instruct): the registry's preset of its shape.
    "smollm2-135m": LLAMA_PRESETS["smollm2-135m"],
    # openai/gpt-oss-120b config.json (transformers' GptOssConfig defaults are its values, and
    # openai/gpt-oss gpt_oss/torch/model.py ModelConfig): 36 layers, hidden 2880, 64 heads of 64,
    # 8 KV heads, 128 experts top-4 of width 2880, vocab 201088, sliding_window 128 on layers
    # 0, 2, 4, ..., untied head, eos 200002. Model card (arXiv 2508.10925) Table 1: 116.83B
    # parameters, MoE weights in MXFP4 (4.25 bits per parameter, sec. 2.1).
    "gpt-oss-120b": GptOssArch(vocab_size=201088, hidden_size=2880, num_layers=36, num_heads=64, num_kv_heads=8,
                               head_dim=64, num_experts=128, top_k=4, expert_intermediate=2880, sliding_window=128,
                               max_position_embeddings=131072, eos_token_ids=(200002,)),
}
"""Published shapes by simulator name."""


def get_model(name: str) -> ArchInfo:
    """A ``SIM_MODELS`` name, ``dummy:<preset>``, or a config.json path (file or directory)."""
    if name in SIM_MODELS:
        return SIM_MODELS[name]
    from tokenmill.model.loaders.dummy import dummy_arch  # imports torch: only when needed

    if name.startswith("dummy:"):
        return dummy_arch(name.removeprefix("dummy:"))
    if Path(name).exists():
        return dummy_arch(name)
    raise ValueError(f"--model: unknown {name!r}; use one of {sorted(SIM_MODELS)}, "
                     "dummy:<preset>, or a path to a HF config.json")


@dataclass(frozen=True)
class ModelShape:
    """One model's per-layer sizes. Parameter counts are elements (not bytes); an
    ``*_io`` width is the sum over a block's GEMMs of input + output widths, i.e.
    activation elements one row reads and writes through that block."""

    num_layers: int
    hidden: int
    vocab: int
    attention_params: int
    """Per layer: every attention projection (MLA: with its two latent norms)."""
    num_dense_layers: int
    dense_mlp_params: int
    """Per dense layer: gate, up, down."""
    num_moe_layers: int
    num_experts: int
    top_k: int
    expert_params: int
    """One routed expert: gate, up, down."""
    shared_params: int
    """Per MoE layer: the shared experts, computed as one dense MLP."""
    router_params: int
    """Per MoE layer: the router gate [num_experts, hidden]."""
    embed_params: int
    lm_head_params: int
    """Read every step even when tied to the embedding (then counted once in memory)."""
    tied: bool
    norm_params: int
    """Every RMSNorm weight outside the attention block (model total)."""
    mla: bool
    kv_heads: int
    """KV heads a tensor-parallel split can shard (MLA: 1, its latent is replicated)."""
    kv_values_per_token: int
    """KV-cache elements one token takes in one layer (GQA: 2 x kv_heads x head_dim;
    MLA: kv_lora_rank + qk_rope_head_dim)."""
    pair_flops_decode: int
    """FLOPs per attended (query row, cached key) pair per layer in decode (MLA: absorbed form)."""
    pair_flops_prefill: int
    """The same for prefill rows (MLA: per-head K/V materialised)."""
    prefix_flops_per_token: int
    """Per layer, per cached token a prefill chunk attends over (MLA: re-expanding the
    latent through kv_b_proj); 0 for GQA, whose cache already holds K and V."""
    attention_io: int
    dense_mlp_io: int
    expert_io: int
    shared_io: int
    num_sliding_layers: int = 0
    """Layers (of ``num_layers``) that attend over at most ``sliding_window`` keys."""
    sliding_window: int | None = None
    expert_precision: str | None = None
    """The routed experts' own format (gpt-oss: "mxfp4"), kept whatever the deployment's
    precision; None: the experts follow it like every other weight."""
    layer_gemms: tuple[tuple[int, int, bool], ...] = ()
    """One decoder layer's GEMMs as (n, k, column_parallel): output width, input width, and
    whether tensor parallelism splits the output (else the input). What the tile rule prices
    (sim/gemm_tiles.py); empty for the MoE and MLA models, whose GEMMs keep the flat fraction."""

    @property
    def dense_params(self) -> int:
        """Non-expert parameters of the decoder layers (attention, dense MLPs, shared experts)."""
        return (self.num_layers * self.attention_params + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * self.shared_params)

    def total_params(self) -> int:
        """Every parameter, embeddings included once when tied (equals ``arch.num_params()``)."""
        moe = self.num_moe_layers * (self.num_experts * self.expert_params + self.router_params)
        head = 0 if self.tied else self.lm_head_params
        return self.dense_params + moe + self.embed_params + head + self.norm_params


_SHAPES: dict[int, tuple[ArchInfo, ModelShape]] = {}
"""model_shape's results by id(arch), with the arch itself (kept alive, so the id is not
reused): the simulator asks once per step, thousands of times per run."""


def model_shape(arch: ArchInfo) -> ModelShape:
    """The shape of a Llama-family, DeepSeek-V3 or gpt-oss arch; ValueError for another family."""
    cached = _SHAPES.get(id(arch))
    if cached is not None and cached[0] is arch:
        return cached[1]
    shape = _shape_of(arch)
    if len(_SHAPES) < 256:
        _SHAPES[id(arch)] = (arch, shape)
    return shape


def _shape_of(arch: ArchInfo) -> ModelShape:
    if isinstance(arch, ModelArch):
        return _llama_shape(arch)
    if isinstance(arch, DeepseekArch):
        return _deepseek_shape(arch)
    if isinstance(arch, GptOssArch):
        return _gpt_oss_shape(arch)
    raise ValueError(f"sim: no cost model for {type(arch).__name__} ({arch.family}); "
                     "supported: ModelArch (Llama family, Mixtral), DeepseekArch, GptOssArch")


def _mlp(h: int, width: int) -> tuple[int, int]:
    """(params, io width) of a gated MLP: gate+up [h -> 2w], down [w -> h]."""
    return 3 * h * width, (h + 2 * width) + (width + h)


def _llama_shape(a: ModelArch) -> ModelShape:
    h, q, kv = a.hidden_size, a.q_size, a.kv_size
    mlp, mlp_io = _mlp(h, a.intermediate_size)
    moe = a.moe
    expert, expert_io = _mlp(h, moe.intermediate_size) if moe else (0, 0)
    return ModelShape(
        num_layers=a.num_layers, hidden=h, vocab=a.vocab_size,
        attention_params=h * (q + 2 * kv) + q * h,
        num_dense_layers=0 if moe else a.num_layers, dense_mlp_params=0 if moe else mlp,
        num_moe_layers=a.num_layers if moe else 0, num_experts=moe.num_experts if moe else 0,
        top_k=moe.top_k if moe else 0, expert_params=expert, shared_params=0,
        router_params=moe.num_experts * h if moe else 0,
        embed_params=a.vocab_size * h, lm_head_params=a.vocab_size * h, tied=a.tie_word_embeddings,
        norm_params=a.num_layers * 2 * h + h, mla=False, kv_heads=a.num_kv_heads,
        kv_values_per_token=2 * kv,
        # QK^T and PV: 2 FLOPs per multiply-add, head_dim each, for every query head.
        pair_flops_decode=4 * q, pair_flops_prefill=4 * q, prefix_flops_per_token=0,
        attention_io=(h + q + 2 * kv) + (q + h), dense_mlp_io=0 if moe else mlp_io,
        expert_io=expert_io, shared_io=0,
        # qkv and gate+up split their outputs over TP, o and down their inputs.
        layer_gemms=() if moe else ((q + 2 * kv, h, True), (h, q, False), (2 * a.intermediate_size, h, True),
                                    (h, a.intermediate_size, False)),
    )


def _deepseek_shape(a: DeepseekArch) -> ModelShape:
    h, H, m = a.hidden_size, a.num_heads, a.moe
    qk, lora, v = a.qk_head_dim, a.kv_lora_rank, a.v_head_dim
    if a.q_lora_rank:
        q_params = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * H * qk
        q_io = (h + a.q_lora_rank) + (a.q_lora_rank + H * qk)
    else:
        q_params, q_io = h * H * qk, h + H * qk
    kv_b = lora * H * (a.qk_nope_head_dim + v)  # latent -> per-head K_nope and V
    mlp, mlp_io = _mlp(h, a.intermediate_size)
    expert, expert_io = _mlp(h, m.intermediate_size)
    shared, shared_io = _mlp(h, m.intermediate_size * m.num_shared_experts)
    moe_layers = a.num_layers - a.first_k_dense_replace
    return ModelShape(
        num_layers=a.num_layers, hidden=h, vocab=a.vocab_size,
        attention_params=q_params + h * a.latent_dim + lora + kv_b + H * v * h,
        num_dense_layers=a.first_k_dense_replace, dense_mlp_params=mlp,
        num_moe_layers=moe_layers, num_experts=m.num_experts, top_k=m.top_k, expert_params=expert,
        shared_params=shared, router_params=m.num_experts * h,
        embed_params=a.vocab_size * h, lm_head_params=a.vocab_size * h, tied=a.tie_word_embeddings,
        norm_params=a.num_layers * 2 * h + h, mla=True, kv_heads=1, kv_values_per_token=a.latent_dim,
        # Absorbed decode (DeepSeek-V2 paper, sec. 2.1.3): scores over the latent + rope dims,
        # values over the latent, per head. Prefill: ordinary attention with qk_head_dim / v_head_dim.
        pair_flops_decode=2 * H * (a.latent_dim + lora), pair_flops_prefill=2 * H * (qk + v),
        prefix_flops_per_token=2 * kv_b,
        attention_io=q_io + (h + a.latent_dim) + (lora + H * (a.qk_nope_head_dim + v)) + (H * v + h),
        dense_mlp_io=mlp_io, expert_io=expert_io, shared_io=shared_io,
    )


def _gpt_oss_shape(a: GptOssArch) -> ModelShape:
    h, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    _, expert_io = _mlp(h, a.expert_intermediate)
    return ModelShape(
        num_layers=a.num_layers, hidden=h, vocab=a.vocab_size, attention_params=a.attention_params,
        num_dense_layers=0, dense_mlp_params=0, num_moe_layers=a.num_layers, num_experts=a.num_experts,
        top_k=a.top_k, expert_params=a.expert_params, shared_params=0, router_params=a.router_params,
        embed_params=a.vocab_size * h, lm_head_params=a.vocab_size * h, tied=False,
        norm_params=a.num_layers * 2 * h + h, mla=False, kv_heads=a.num_kv_heads, kv_values_per_token=2 * kv,
        # As for GQA above; the sink adds one logit per head and row, not counted.
        pair_flops_decode=4 * q, pair_flops_prefill=4 * q, prefix_flops_per_token=0,
        attention_io=(h + q + 2 * kv) + (q + h), dense_mlp_io=0, expert_io=expert_io, shared_io=0,
        num_sliding_layers=a.num_sliding_layers, sliding_window=a.sliding_window,
        expert_precision=a.expert_precision,
    )
