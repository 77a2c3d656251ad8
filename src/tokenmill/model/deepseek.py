"""DeepSeek-V3/R1 decoder over the paged latent KV cache.

Each layer: RMSNorm -> multi-head latent attention (model/mla.py, absorbed
form over the cached latents) -> RMSNorm -> a dense SwiGLU MLP (the first
``first_k_dense_replace`` layers) or the Mixture-of-Experts layer
(model/moe.py: grouped sigmoid router, routed + shared experts).

Precision and the residual stream follow model/llama.py: the stream is
float32, each norm adds the previous sublayer's output into it (fused add +
norm) and hands the model dtype to the next matmul; the router scores in
float32 (DeepSeek keeps its gate weights in float32 too).

KV cache: per layer one [num_blocks, 1, 1, block_size, kv_lora_rank + rope_dim]
tensor (``kv_cache_spec``): one latent row per token, 576 values for
DeepSeek-R1 where expanded keys and values would take 128 heads x (192 + 128).

MTP modules (``num_mtp_layers``, model/deepseek_mtp.py) hang off ``mtp``:
not part of ``forward`` nor of ``kv_cache_spec``; ``mtp_hidden`` runs one
depth over a cache layer of the same shape.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.attention import AttentionMetadata
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS, FusedOps
from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.deepseek_mtp import DeepseekMTP
from tokenmill.model.kv_cache_spec import KVCacheSpec
from tokenmill.model.llama import RMSNorm
from tokenmill.model.mla import MLAttention
from tokenmill.model.moe import DenseMLP, MoELayer
from tokenmill.model.rope import cos_sin_table, default_frequencies, yarn_frequencies


class DeepseekDecoderLayer(nn.Module):
    def __init__(self, arch: DeepseekArch, index: int):
        super().__init__()
        h = arch.hidden_size
        self.input_layernorm = RMSNorm(h, arch.rms_norm_eps)
        self.self_attn = MLAttention(arch)
        self.post_attention_layernorm = RMSNorm(h, arch.rms_norm_eps)
        self.mlp = MoELayer(h, arch.moe) if arch.is_moe_layer(index) else DenseMLP(h, arch.intermediate_size)

    def forward(self, x, pending, rope, meta, cache, ops: FusedOps):
        """x: [T, hidden] float32 residual stream, updated in place; pending: the
        previous layer's MLP output not yet added (model dtype) or None. Returns
        this layer's MLP output, for the next norm to add."""
        attn_out = self.self_attn(self.input_layernorm(x, pending, ops), rope, meta, cache, ops)
        return self.mlp(self.post_attention_layernorm(x, attn_out, ops), ops)


def rope_tables(arch: DeepseekArch, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_positions, rope_dim] float32 for the rotary dims, YaRN's
    attention factor folded in (HF multiplies cos and sin by it)."""
    dim = arch.qk_rope_head_dim
    if arch.rope_scaling:
        inv_freq, factor = yarn_frequencies(dim, arch.rope_theta, arch.rope_scaling, arch.max_position_embeddings)
    else:
        inv_freq, factor = default_frequencies(dim, arch.rope_theta), 1.0
    cos, sin = cos_sin_table(inv_freq, max_positions)
    return cos * factor, sin * factor


class DeepseekV3ForCausalLM(nn.Module):
    """Satisfies ``CausalLM`` (model/protocol.py); registered by model/deepseek_weights.py."""

    def __init__(self, arch: DeepseekArch, max_positions: int):
        super().__init__()
        self.arch = arch
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        self.layers = nn.ModuleList(DeepseekDecoderLayer(arch, i) for i in range(arch.num_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        if arch.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.mtp = DeepseekMTP(arch) if arch.num_mtp_layers else None
        """The next-token-prediction modules (model/deepseek_mtp.py), or None."""
        self.max_positions = max_positions
        self.ops = TORCH_FUSED_OPS  # the engine picks the backend (kernels/fused_ops.py)
        self.set_rope()

    def set_rope(self) -> None:
        """(Re)build the rope tables on the model's device (after ``to_empty``)."""
        cos, sin = rope_tables(self.arch, self.max_positions)
        device = self.embed_tokens.weight.device
        self.register_buffer("rope_cos", cos.to(device), persistent=False)
        self.register_buffer("rope_sin", sin.to(device), persistent=False)

    def rope_inputs(self, positions: torch.Tensor, dtype: torch.dtype):
        return self.ops.rope_inputs(self.rope_cos, self.rope_sin, positions, dtype)

    def forward(self, input_ids, positions, meta: AttentionMetadata, kv_caches) -> torch.Tensor:
        """input_ids, positions: [T] long; kv_caches: per layer one
        [num_blocks, 1, 1, block_size, latent_dim] tensor. Returns the final
        hidden states [T, hidden] in the model dtype."""
        ops = self.ops
        x = self.embed_tokens(input_ids)
        rope = self.rope_inputs(positions, x.dtype)
        x = x.float()  # [T, hidden] residual stream
        pending = None
        for layer, cache in zip(self.layers, kv_caches):
            pending = layer(x, pending, rope, meta, cache, ops)
        return self.norm(x, pending, ops)

    def kv_cache_spec(self) -> KVCacheSpec:
        """Per layer and token: one latent row, c_kv then the rotated shared key."""
        return KVCacheSpec(num_layers=self.arch.num_layers, parts=("latent",), num_heads=1,
                           head_dim=self.arch.latent_dim)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] in the model dtype."""
        return self.lm_head(hidden)

    def mtp_hidden(self, depth: int, input_ids, prev_hidden, positions, meta: AttentionMetadata,
                   cache: torch.Tensor) -> torch.Tensor:
        """MTP depth ``depth``'s final hidden states (see DeepseekMTP.forward);
        ValueError when the checkpoint carried no MTP weights."""
        if self.mtp is None:
            raise ValueError("MTP: this model has no next-token-prediction layers "
                             "(num_nextn_predict_layers is 0, or the checkpoint has none)")
        return self.mtp(self, depth, input_ids, prev_hidden, positions, meta, cache)

    def decoder_linears(self) -> list[tuple[nn.Module, str]]:
        """The decoder's nn.Linear weights: attention projections, dense MLPs,
        routed and shared experts. The latent projections (w_uk, w_uv: batched
        per head) and the float32 router are not linears: weight-only
        quantization leaves them as they are. MTP layers are not included."""
        out = []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            out += [(attn, "qkv_a_proj"), (attn, "o_proj")]
            if self.arch.q_lora_rank:
                out.append((attn, "q_b_proj"))
            dense = mlp.shared_experts if isinstance(mlp, MoELayer) else mlp
            if dense is not None:
                out += [(dense, "gate_up_proj"), (dense, "down_proj")]
            if isinstance(mlp, MoELayer):
                out += mlp.experts.linears()
        return out

    def exact_head(self) -> ExactHead:
        return ExactHead.of_linear(self.lm_head)
