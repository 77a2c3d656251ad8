"""DeepSeek-V3 from GGUF (``deepseek2``): the tiny HF model written the way
llama.cpp's converter writes it (metadata keys, tensor names, MQA head count,
stacked experts, kv_b split into k_b/v_b in newer files or kept whole in
older ones, YaRN's mscale as a log multiplier), loaded by tokenmill's GGUF
loader, must give HF's logits."""

from __future__ import annotations

import pytest
import torch
from _reference import paged_logits
from test_deepseek import hf_tiny  # noqa: F401  (module fixture)

from tokenmill.model.loaders import load_model

gguf = pytest.importorskip("gguf")

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight", "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}


def write_gguf(hf, path, split_kv_b: bool) -> None:
    cfg = hf.config
    arch = "deepseek2"
    w = gguf.GGUFWriter(str(path), arch)
    rope = cfg.qk_rope_head_dim
    ints = {"block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
            "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
            "attention.head_count": cfg.num_attention_heads, "attention.head_count_kv": 1,
            "leading_dense_block_count": cfg.first_k_dense_replace, "vocab_size": cfg.vocab_size,
            "attention.q_lora_rank": cfg.q_lora_rank, "attention.kv_lora_rank": cfg.kv_lora_rank,
            "expert_feed_forward_length": cfg.moe_intermediate_size, "expert_count": cfg.n_routed_experts,
            "expert_used_count": cfg.num_experts_per_tok, "expert_shared_count": cfg.n_shared_experts,
            "expert_group_count": cfg.n_group, "expert_group_used_count": cfg.topk_group,
            "expert_gating_func": 2, "rope.dimension_count": rope,
            "rope.scaling.original_context_length": cfg.rope_parameters["original_max_position_embeddings"]}
    if split_kv_b:
        ints |= {"attention.key_length": cfg.kv_lora_rank + rope, "attention.value_length": cfg.kv_lora_rank,
                 "attention.key_length_mla": cfg.qk_nope_head_dim + rope, "attention.value_length_mla": cfg.v_head_dim}
    else:
        ints |= {"attention.key_length": cfg.qk_nope_head_dim + rope, "attention.value_length": cfg.v_head_dim}
    for key, value in ints.items():
        w.add_uint32(f"{arch}.{key}", value)
    for key, value in {"rope.freq_base": cfg.rope_parameters["rope_theta"], "attention.layer_norm_rms_epsilon":
                       cfg.rms_norm_eps, "expert_weights_scale": cfg.routed_scaling_factor,
                       "rope.scaling.factor": cfg.rope_parameters["factor"],
                       "rope.scaling.yarn_log_multiplier": 0.1 * cfg.rope_parameters["mscale_all_dim"]}.items():
        w.add_float32(f"{arch}.{key}", value)
    w.add_bool(f"{arch}.expert_weights_norm", cfg.norm_topk_prob)
    w.add_string(f"{arch}.rope.scaling.type", "yarn")
    sd = hf.state_dict()
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"],
               "output.weight": sd["lm_head.weight"]}
    H, nope, v = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for hf_name, g in BLOCK_NAMES.items():
            if p + hf_name in sd:
                tensors[f"blk.{i}.{g}"] = sd[p + hf_name]
        kv_b = sd[p + "self_attn.kv_b_proj.weight"]
        if split_kv_b:  # per head: k_b transposed [H, kv_lora_rank, nope], v_b [H, v, kv_lora_rank]
            k_b, v_b = kv_b.view(H, nope + v, -1).split([nope, v], dim=1)
            tensors[f"blk.{i}.attn_k_b.weight"] = k_b.transpose(1, 2)
            tensors[f"blk.{i}.attn_v_b.weight"] = v_b
        else:
            tensors[f"blk.{i}.attn_kv_b.weight"] = kv_b
        if p + "mlp.experts.gate_up_proj" in sd:  # HF's in-memory layout: stacked [E, 2I, hidden]
            gate, up = sd[p + "mlp.experts.gate_up_proj"].chunk(2, dim=1)
            tensors[f"blk.{i}.ffn_gate_exps.weight"] = gate
            tensors[f"blk.{i}.ffn_up_exps.weight"] = up
            tensors[f"blk.{i}.ffn_down_exps.weight"] = sd[p + "mlp.experts.down_proj"]
    for name, t in tensors.items():
        w.add_tensor(name, t.float().contiguous().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("split_kv_b", [True, False])
def test_deepseek2_gguf_matches_hf(hf_tiny, tmp_path, split_kv_b):  # noqa: F811
    hf, _ = hf_tiny
    path = tmp_path / "tiny-deepseek2.gguf"
    write_gguf(hf, path, split_kv_b)
    loaded = load_model(str(path), "auto", torch.device("cpu"), torch.float32)
    assert loaded.arch.family == "deepseek_v3" and loaded.arch.qk_nope_head_dim == hf.config.qk_nope_head_dim
    ids = torch.randint(3, 512, (60,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(paged_logits(loaded.model, ids, chunk=17), ref, atol=2e-5, rtol=1e-4)
