"""DeepSeek-V3-shaped presets for random-weight runs (``dummy:<name>``,
model/loaders/dummy.py), registered with the family's entry
(model/deepseek_weights.py).

- ``deepseek-v3-tiny``: for tests; every feature on (a dense first layer,
  16 experts in 4 groups, q_lora, YaRN, an MTP layer), a forward in milliseconds.
- ``deepseek-v3-bench``: sized for a 2-core CPU benchmark (8 layers, 64 experts
  top-6 + 1 shared, hidden 1024; 0.81 B parameters, 0.14 B active per token).
- ``deepseek-r1``: the real shapes (671 B parameters), for memory and FLOP
  accounting; never loaded by tests.
"""

from __future__ import annotations

from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.moe_config import MoEConfig

_R1_YARN = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32,
            "beta_slow": 1, "original_max_position_embeddings": 4096}

DEEPSEEK_PRESETS = {
    "deepseek-v3-tiny": DeepseekArch(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_layers=3, num_heads=4, q_lora_rank=64,
        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        moe=MoEConfig(num_experts=16, top_k=4, intermediate_size=64, scoring="sigmoid", num_groups=4,
                      topk_groups=2, norm_topk_prob=True, routed_scaling_factor=2.5, num_shared_experts=1,
                      score_correction_bias=True),
        first_k_dense_replace=1, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=1024,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "original_max_position_embeddings": 256},
        num_mtp_layers=1, eos_token_ids=(1,), bos_token_id=0),
    "deepseek-v3-bench": DeepseekArch(
        vocab_size=32768, hidden_size=1024, intermediate_size=2816, num_layers=8, num_heads=16, q_lora_rank=384,
        kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
        moe=MoEConfig(num_experts=64, top_k=6, intermediate_size=512, scoring="sigmoid", num_groups=8,
                      topk_groups=4, norm_topk_prob=True, routed_scaling_factor=2.5, num_shared_experts=1,
                      score_correction_bias=True),
        first_k_dense_replace=1, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=4096,
        num_mtp_layers=1, eos_token_ids=(1,), bos_token_id=0),
    "deepseek-r1": DeepseekArch(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_layers=61, num_heads=128,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        moe=MoEConfig(num_experts=256, top_k=8, intermediate_size=2048, scoring="sigmoid", num_groups=8,
                      topk_groups=4, norm_topk_prob=True, routed_scaling_factor=2.5, num_shared_experts=1,
                      score_correction_bias=True),
        first_k_dense_replace=3, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=163840,
        rope_scaling=_R1_YARN, num_mtp_layers=1, eos_token_ids=(1,), bos_token_id=0,
        weight_block_size=(128, 128)),
}
"""Dummy-weight shapes of the family (``dummy:<name>``)."""
