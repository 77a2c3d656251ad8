"""The shape of a Llama-family decoder, read from HF config.json or GGUF metadata.

Covers Llama 2/3.x (incl. llama3 rope scaling), SmolLM2, Mistral, Qwen2/2.5
(q/k/v bias) and Mixtral (softmax-routed experts, model/moe.py). Everything the
model code needs is here; nothing else is read from the source config after
this point. ``ModelArch`` satisfies the common
``ArchInfo`` (model/protocol.py); the model registry (model/registry.py) maps
config and GGUF architecture names to these parsers (registration in
model/llama_weights.py), so the parsers never see another family.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenmill.model.moe_config import MoEConfig

# HF `architectures` entry -> our family name (sets the family's defaults below).
LLAMA_HF_FAMILIES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "MixtralForCausalLM": "mixtral",
}
# config.json `model_type` and GGUF `general.architecture` values of the family.
LLAMA_FAMILIES = ("llama", "mistral", "qwen2", "mixtral")
LLAMA_GGUF_ARCHITECTURES = ("llama", "mistral", "qwen2")
"""GGUF ``general.architecture`` values read here (dense models only)."""


@dataclass(frozen=True)
class ModelArch:
    family: str
    """llama | mistral | qwen2 | mixtral."""
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    """q/k/v projections carry a bias (Qwen2)."""
    rope_scaling: dict | None = None
    """HF rope scaling dict, e.g. {'rope_type': 'llama3', 'factor': 8.0, ...}."""
    sliding_window: int | None = None
    """Mistral's attention window; we cap max_model_len at it rather than emulate it."""
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default=())
    moe: MoEConfig | None = None
    """Mixtral: every feed-forward layer is a softmax-routed Mixture-of-Experts
    (model/moe.py; ``intermediate_size`` is then one expert's width)."""

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_params(self) -> int:
        """Parameter count, embeddings included (tied counted once)."""
        h, L = self.hidden_size, self.num_layers
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        per_layer = attn + self._ffn_params(active=False) + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + h

    def _ffn_params(self, active: bool) -> int:
        """One layer's feed-forward weights; active: only the experts one token uses (and the router)."""
        h, i = self.hidden_size, self.intermediate_size
        if self.moe is None:
            return 3 * h * i
        return 3 * h * i * (self.moe.top_k if active else self.moe.num_experts) + self.moe.num_experts * h

    def flops_per_token(self, context_len: int = 0) -> float:
        """Forward FLOPs for one token: 2 x matmul weights (lm_head included)
        plus attention over ``context_len`` cached tokens (QK^T and PV)."""
        h, L = self.hidden_size, self.num_layers
        matmul = L * (h * (self.q_size + 2 * self.kv_size) + self.q_size * h + self._ffn_params(active=True))
        matmul += self.vocab_size * h
        attention = L * 2 * 2 * self.q_size * context_len
        return 2.0 * matmul + attention


def arch_from_hf_config(cfg: dict) -> ModelArch:
    """Build from a parsed HF config.json; ValueError names what is unsupported."""
    archs = cfg.get("architectures") or []
    family = next((LLAMA_HF_FAMILIES[a] for a in archs if a in LLAMA_HF_FAMILIES), cfg.get("model_type"))
    if family not in LLAMA_FAMILIES:
        raise ValueError(f"unsupported architecture {archs or family!r}; "
                         f"this parser reads {sorted(LLAMA_HF_FAMILIES)}")
    num_heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    rope = cfg.get("rope_parameters") or {}
    rope_theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind not in ("llama3", "default", "linear"):
            raise ValueError(f"unsupported rope scaling type {kind!r}; supported: llama3, linear")
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
    sliding = cfg.get("sliding_window") if cfg.get("use_sliding_window", family in ("mistral", "mixtral")) else None
    moe = None
    if family == "mixtral":
        moe = MoEConfig(num_experts=cfg["num_local_experts"], top_k=cfg["num_experts_per_tok"],
                        intermediate_size=cfg["intermediate_size"], scoring="softmax", norm_topk_prob=True)
    return ModelArch(
        family=family,
        vocab_size=cfg["vocab_size"],
        hidden_size=hidden,
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
        head_dim=cfg.get("head_dim") or hidden // num_heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope_theta),
        max_position_embeddings=cfg.get("max_position_embeddings", 4096),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", family == "qwen2")),
        rope_scaling=dict(scaling) if scaling else None,
        sliding_window=sliding,
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos_ids,
        moe=moe,
    )


def arch_from_gguf_fields(fields: dict, tensor_names: set[str]) -> ModelArch:
    """Build from GGUF metadata (``fields``: key -> python value)."""
    family = fields.get("general.architecture")
    if family not in LLAMA_GGUF_ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {family!r}; this parser reads {LLAMA_GGUF_ARCHITECTURES}")
    if fields.get(f"{family}.expert_count"):
        raise ValueError("GGUF: Mixture-of-Experts files (expert_count) are not supported; load the HF directory")

    def get(key: str, default=None):
        return fields.get(f"{family}.{key}", default)

    hidden = get("embedding_length")
    num_heads = get("attention.head_count")
    vocab = get("vocab_size") or len(fields.get("tokenizer.ggml.tokens", ()))
    eos = fields.get("tokenizer.ggml.eos_token_id")
    return ModelArch(
        family=family,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=get("feed_forward_length"),
        num_layers=get("block_count"),
        num_heads=num_heads,
        num_kv_heads=get("attention.head_count_kv") or num_heads,
        head_dim=get("attention.key_length") or hidden // num_heads,
        rms_norm_eps=get("attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        max_position_embeddings=get("context_length", 4096),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        # Llama-3 scaling travels in GGUF as a precomputed `rope_freqs` tensor.
        rope_scaling={"rope_type": "gguf_freq_factors"} if "rope_freqs.weight" in tensor_names else None,
        sliding_window=None,
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=(eos,) if eos is not None else (),
    )
