"""The shape of a DeepSeek-V3/R1 decoder, read from HF config.json.

Multi-head latent attention (MLA: a low-rank query, one compressed KV latent
per token plus a shared rotary key), Mixture-of-Experts feed-forward layers
after ``first_k_dense_replace`` dense ones, and optional next-token-prediction
(MTP) layers after the last decoder layer. ``DeepseekArch`` satisfies
``ArchInfo`` (model/protocol.py); registration is in model/deepseek_weights.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenmill.model.moe_config import MoEConfig
from tokenmill.model.yarn import yarn_mscale

DEEPSEEK_HF_ARCHITECTURES = ("DeepseekV3ForCausalLM",)
DEEPSEEK_MODEL_TYPES = ("deepseek_v3",)


@dataclass(frozen=True)
class DeepseekArch:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    """Width of the dense feed-forward layers (the first ``first_k_dense_replace``)."""
    num_layers: int
    num_heads: int
    q_lora_rank: int | None
    """Rank of the compressed query (DeepSeek-V3: 1536); None: one full q projection."""
    kv_lora_rank: int
    """Width of the cached KV latent c_kv (DeepSeek-V3: 512)."""
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    """Width of the rotary part of each query head and of the one shared rotary key."""
    v_head_dim: int
    moe: MoEConfig
    first_k_dense_replace: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    rope_scaling: dict | None = None
    """HF rope parameters for YaRN ({'rope_type': 'yarn', 'factor': 40, 'mscale': 1, ...}); None: plain rope."""
    rope_interleave: bool = True
    """The checkpoint's rotary dims come in interleaved pairs (DeepSeek's layout); the
    weight map reorders them into halves at load time (model/deepseek_weights.py)."""
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    num_mtp_layers: int = 0
    """Next-token-prediction modules after the last layer (``num_nextn_predict_layers``)."""
    weight_block_size: tuple[int, int] | None = None
    """Block shape of an FP8 checkpoint's ``weight_scale_inv`` grid ([128, 128] for
    DeepSeek's); None: the checkpoint is not block-quantized."""
    family: str = "deepseek_v3"
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0 <= self.first_k_dense_replace <= self.num_layers:
            raise ValueError(f"first_k_dense_replace: must be in [0, {self.num_layers}], "
                             f"got {self.first_k_dense_replace}")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values cached per token and layer: c_kv then the rotated shared key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def is_moe_layer(self, index: int) -> bool:
        return index >= self.first_k_dense_replace

    def softmax_scale(self) -> float:
        """HF's: qk_head_dim^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 when rope is scaled."""
        scale = self.qk_head_dim ** -0.5
        s = self.rope_scaling or {}
        if s.get("rope_type", s.get("type", "default")) != "default" and s.get("mscale_all_dim"):
            m = yarn_mscale(s["factor"], s["mscale_all_dim"])
            scale *= m * m
        return scale

    def _attention_params(self) -> int:
        h, H = self.hidden_size, self.num_heads
        q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * H * self.qk_head_dim
             if self.q_lora_rank else h * H * self.qk_head_dim)
        kv = h * self.latent_dim + self.kv_lora_rank + self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + H * self.v_head_dim * h

    def _layer_params(self, index: int, active: bool) -> int:
        """Parameters of decoder layer ``index``; active: only the experts one token uses."""
        h = self.hidden_size
        if not self.is_moe_layer(index):
            ffn = 3 * h * self.intermediate_size
        else:
            m = self.moe
            experts = m.top_k if active else m.num_experts
            ffn = 3 * h * m.intermediate_size * (experts + m.num_shared_experts) + m.num_experts * h
        return self._attention_params() + ffn + 2 * h

    def num_params(self) -> int:
        """Parameter count, embeddings included (tied counted once); MTP layers excluded."""
        emb = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return sum(self._layer_params(i, False) for i in range(self.num_layers)) + emb + self.hidden_size

    def flops_per_token(self, context_len: int = 0) -> float:
        """Forward FLOPs for one token (active experts only, lm_head included), attention
        in the absorbed form over ``context_len`` cached latents (scores over
        kv_lora_rank + rope dims, values over kv_lora_rank, per head)."""
        # kv_b_proj's weights count once: the absorbed form multiplies by them per token too
        # (queries into the latent space, outputs out of it).
        matmul = sum(self._layer_params(i, True) for i in range(self.num_layers)) + self.vocab_size * self.hidden_size
        attention = self.num_layers * 2 * self.num_heads * (self.latent_dim + self.kv_lora_rank) * context_len
        return 2.0 * matmul + attention


def arch_from_hf_config(cfg: dict) -> DeepseekArch:
    """Build from a parsed DeepSeek-V3/R1 config.json; ValueError names what is unsupported."""
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "yarn"):
        raise ValueError(f"rope_scaling: unsupported type {kind!r} for DeepSeek; supported: yarn")
    scoring = cfg.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise ValueError(f"scoring_func: DeepSeek-V3 routes with 'sigmoid', got {scoring!r}")
    if cfg.get("moe_layer_freq", 1) != 1:
        raise ValueError(f"moe_layer_freq: only 1 is supported, got {cfg['moe_layer_freq']}")
    moe = MoEConfig(
        num_experts=cfg["n_routed_experts"],
        top_k=cfg["num_experts_per_tok"],
        intermediate_size=cfg["moe_intermediate_size"],
        scoring="sigmoid",
        num_groups=cfg.get("n_group") or 1,
        topk_groups=cfg.get("topk_group") or 1,
        norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
        routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
        num_shared_experts=cfg.get("n_shared_experts") or 0,
        score_correction_bias=True,
    )
    eos = cfg.get("eos_token_id")
    quant = cfg.get("quantization_config") or {}
    if quant and quant.get("quant_method") != "fp8":
        raise ValueError("quantization_config: only DeepSeek's block FP8 is supported, "
                         f"got {quant.get('quant_method')!r}")
    block = tuple(quant.get("weight_block_size", (128, 128))) if quant else None
    num_heads = cfg["num_attention_heads"]
    if (cfg.get("num_key_value_heads") or num_heads) != num_heads:
        raise ValueError("num_key_value_heads: MLA has one KV latent per token; expected num_attention_heads")
    return DeepseekArch(
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=num_heads,
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=cfg["kv_lora_rank"],
        qk_nope_head_dim=cfg["qk_nope_head_dim"],
        qk_rope_head_dim=cfg["qk_rope_head_dim"],
        v_head_dim=cfg["v_head_dim"],
        moe=moe,
        first_k_dense_replace=cfg.get("first_k_dense_replace") or 0,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        max_position_embeddings=cfg.get("max_position_embeddings", 4096),
        rope_scaling={**{k: v for k, v in rope.items() if k not in ("rope_theta", "type")}, "rope_type": "yarn"}
        if kind == "yarn" else None,
        rope_interleave=bool(cfg.get("rope_interleave", True)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        weight_block_size=block,
        num_mtp_layers=cfg.get("num_nextn_predict_layers", cfg.get("num_mtp_layers", 0)) or 0,
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ()),
    )


def hf_config(arch: DeepseekArch) -> dict:
    """The config.json of ``arch`` (the inverse of ``arch_from_hf_config``): writes
    HF checkpoints of a preset's shape (benchmarks build HF's model from it)."""
    m = arch.moe
    rope = {"rope_type": "default", "rope_theta": arch.rope_theta}
    if arch.rope_scaling:
        rope = {**arch.rope_scaling, "rope_theta": arch.rope_theta}
    cfg = {
        "architectures": list(DEEPSEEK_HF_ARCHITECTURES), "model_type": "deepseek_v3",
        "vocab_size": arch.vocab_size, "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_layers, "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_heads, "q_lora_rank": arch.q_lora_rank, "kv_lora_rank": arch.kv_lora_rank,
        "qk_nope_head_dim": arch.qk_nope_head_dim, "qk_rope_head_dim": arch.qk_rope_head_dim,
        "v_head_dim": arch.v_head_dim, "n_routed_experts": m.num_experts, "num_experts_per_tok": m.top_k,
        "moe_intermediate_size": m.intermediate_size, "n_group": m.num_groups, "topk_group": m.topk_groups,
        "norm_topk_prob": m.norm_topk_prob, "routed_scaling_factor": m.routed_scaling_factor,
        "n_shared_experts": m.num_shared_experts, "first_k_dense_replace": arch.first_k_dense_replace,
        "rms_norm_eps": arch.rms_norm_eps, "max_position_embeddings": arch.max_position_embeddings,
        "rope_parameters": rope, "rope_interleave": arch.rope_interleave,
        "tie_word_embeddings": arch.tie_word_embeddings, "attention_bias": arch.attention_bias,
        "num_nextn_predict_layers": arch.num_mtp_layers, "bos_token_id": arch.bos_token_id,
        "eos_token_id": list(arch.eos_token_ids) if len(arch.eos_token_ids) != 1 else arch.eos_token_ids[0],
    }
    if arch.weight_block_size:
        cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": list(arch.weight_block_size)}
    return cfg
