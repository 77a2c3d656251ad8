"""DeepSeek-V3/R1 from GGUF (``general.architecture = deepseek2``, llama.cpp's converter).

Metadata -> DeepseekArch (``arch_from_gguf_fields``), and llama.cpp tensor
names -> the HF names model/deepseek_weights.py places (``gguf_to_hf_name``).
What llama.cpp's converter changes, and how it is undone:
- ``attention.head_count_kv`` is written as 1 (MLA as multi-query); the real
  head count is ``attention.head_count``;
- MLA files from newer converters split ``kv_b_proj`` into ``attn_k_b``
  [H, kv_lora_rank, nope] (transposed per head) and ``attn_v_b`` [H, v, kv_lora_rank],
  and write key/value lengths of the latent (``key_length`` = kv_lora_rank + rope,
  ``value_length`` = kv_lora_rank) with the per-head sizes in ``*_length_mla``;
  older files keep ``attn_kv_b`` and per-head ``key_length``/``value_length``;
- routed experts are stacked per projection (``ffn_{gate,up,down}_exps``);
- YaRN's ``mscale_all_dim`` travels as ``rope.scaling.yarn_log_multiplier`` =
  0.1 * mscale_all_dim (``mscale`` itself is not stored: DeepSeek's equals it);
- rotary weights keep DeepSeek's interleaved layout (no permutation), and the
  MTP layers are not converted.
Shapes below are torch's (the reverse of GGUF's ne order), as the GGUF loader
hands them over.
"""

from __future__ import annotations

from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.moe_config import MoEConfig

GGUF_ARCHITECTURES = ("deepseek2",)

_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}
_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attn_kv_b.weight": "self_attn.kv_b_proj.weight",
    "attn_k_b.weight": "self_attn.k_b_proj.weight",  # [H, kv_lora_rank, nope]: placed as w_uk transposed
    "attn_v_b.weight": "self_attn.v_b_proj.weight",  # [H, v, kv_lora_rank]: w_uv
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_exps.weight": "mlp.experts.gate_proj",  # [E, I, hidden], stacked
    "ffn_up_exps.weight": "mlp.experts.up_proj",
    "ffn_down_exps.weight": "mlp.experts.down_proj",  # [E, hidden, I]
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
}


def gguf_to_hf_name(name: str) -> str:
    """llama.cpp's tensor name -> the HF-style name the weight map places; ValueError if unknown."""
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _BLOCK:
        return f"model.layers.{parts[1]}.{_BLOCK[parts[2]]}"
    raise ValueError(f"unexpected GGUF tensor {name!r} for a deepseek2 model")


def arch_from_gguf_fields(fields: dict, tensor_names: set[str]) -> DeepseekArch:
    """Build from GGUF metadata (``fields``: key -> python value)."""
    family = fields.get("general.architecture")
    if family not in GGUF_ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {family!r}; this parser reads {GGUF_ARCHITECTURES}")

    def get(key: str, default=None):
        return fields.get(f"{family}.{key}", default)

    rope = get("rope.dimension_count")
    kv_lora = get("attention.kv_lora_rank")
    if get("attention.key_length_mla"):  # newer converters: latent lengths, per-head ones in *_mla
        nope, v = get("attention.key_length_mla") - rope, get("attention.value_length_mla")
    else:
        nope, v = get("attention.key_length") - rope, get("attention.value_length")
    gating = get("expert_gating_func", 2)
    if gating != 2:
        raise ValueError(f"{family}.expert_gating_func: only 2 (sigmoid, DeepSeek-V3) is supported, got {gating}")
    scaling = None
    if get("rope.scaling.type") == "yarn":
        mscale = get("rope.scaling.yarn_log_multiplier", 0.0) / 0.1
        scaling = {"rope_type": "yarn", "factor": get("rope.scaling.factor"),
                   "original_max_position_embeddings": get("rope.scaling.original_context_length"),
                   "beta_fast": get("rope.scaling.yarn_beta_fast", 32.0),
                   "beta_slow": get("rope.scaling.yarn_beta_slow", 1.0),
                   "mscale": mscale, "mscale_all_dim": mscale}
    moe = MoEConfig(num_experts=get("expert_count"), top_k=get("expert_used_count"),
                    intermediate_size=get("expert_feed_forward_length"), scoring="sigmoid",
                    num_groups=get("expert_group_count") or 1, topk_groups=get("expert_group_used_count") or 1,
                    norm_topk_prob=bool(get("expert_weights_norm", False)),
                    routed_scaling_factor=float(get("expert_weights_scale", 1.0)),
                    num_shared_experts=get("expert_shared_count", 0),
                    score_correction_bias="blk.{}.exp_probs_b.bias".format(get("leading_dense_block_count", 0))
                    in tensor_names)
    eos = fields.get("tokenizer.ggml.eos_token_id")
    return DeepseekArch(
        vocab_size=get("vocab_size") or len(fields.get("tokenizer.ggml.tokens", ())),
        hidden_size=get("embedding_length"),
        intermediate_size=get("feed_forward_length"),
        num_layers=get("block_count"),
        num_heads=get("attention.head_count"),
        q_lora_rank=get("attention.q_lora_rank") or None,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v,
        moe=moe,
        first_k_dense_replace=get("leading_dense_block_count", 0),
        rms_norm_eps=get("attention.layer_norm_rms_epsilon", 1e-6),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        max_position_embeddings=get("context_length", 4096),
        rope_scaling=scaling,
        rope_interleave=True,
        tie_word_embeddings="output.weight" not in tensor_names,
        num_mtp_layers=0,  # llama.cpp's converter drops them
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=(eos,) if eos is not None else (),
    )
