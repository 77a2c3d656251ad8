"""Llama-family decoder (Llama 2/3.x, SmolLM2, Mistral, Qwen2) over a paged KV cache.

Precision: weights, matmuls, attention and the KV cache run in the model dtype;
the residual stream is always float32 (each norm reads it in float32 and hands
its output to the next matmul in the model dtype). A bf16 residual stream drifts
enough to flip near-ties: on the embedded model it turned "The capital of France
is Paris." into French babble, where the float32 residual keeps the answer at
nearly the same cost (measured: docs/PERFORMANCE.md).

Tokens of all sequences in a step are flattened into one batch ([T, hidden]),
so every linear layer runs once per step; only attention looks at sequence
boundaries (see kernels/attention.py). q/k/v and gate/up are fused into single
matmuls to cut per-step op count.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.kernels.attention import AttentionMetadata, paged_attention
from tokenmill.model.arch import ModelArch
from tokenmill.model.rope import apply_rope, cos_sin_table, inverse_frequencies


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: the float32 residual stream -> normalized, in the weight's dtype.
        One fused op in float32 (HF's formula); .float() is free for fp32 weights."""
        out = nn.functional.rms_norm(x, self.weight.shape, self.weight.float(), self.eps)
        return out.to(self.weight.dtype)


class Attention(nn.Module):
    def __init__(self, arch: ModelArch):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.q_size, self.kv_size = arch.q_size, arch.kv_size
        self.qkv_proj = nn.Linear(arch.hidden_size, self.q_size + 2 * self.kv_size, bias=arch.attention_bias)
        self.o_proj = nn.Linear(self.q_size, arch.hidden_size, bias=False)
        self.scale = self.head_dim**-0.5

    def forward(self, x, cos, sin, meta: AttentionMetadata, k_cache, v_cache):
        t = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, q_size + 2 * kv_size]
        heads = self.num_heads + self.num_kv_heads
        # Rotate q and k heads together: one rope pass instead of two.
        qk = apply_rope(qkv[:, :self.q_size + self.kv_size].view(t, heads, self.head_dim), cos, sin)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)  # [T, Hq, D], [T, Hkv, D]
        v = qkv[:, self.q_size + self.kv_size:].reshape(t, self.num_kv_heads, self.head_dim)
        o = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)  # [T, Hq, D]
        return self.o_proj(o.view(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, arch: ModelArch):
        super().__init__()
        self.intermediate = arch.intermediate_size
        self.gate_up_proj = nn.Linear(arch.hidden_size, 2 * arch.intermediate_size, bias=False)
        self.down_proj = nn.Linear(arch.intermediate_size, arch.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, arch: ModelArch):
        super().__init__()
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.self_attn = Attention(arch)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.mlp = MLP(arch)

    def forward(self, x, cos, sin, meta, k_cache, v_cache):
        """x: [T, hidden] float32 residual; sublayer outputs (model dtype) are added in float32."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, meta, k_cache, v_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, arch: ModelArch, max_positions: int):
        super().__init__()
        self.arch = arch
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(arch) for _ in range(arch.num_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        if arch.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.max_positions = max_positions
        self.set_rope(inverse_frequencies(arch) if arch.rope_scaling is None or
                      arch.rope_scaling.get("rope_type") != "gguf_freq_factors" else None)

    def set_rope(self, inv_freq: torch.Tensor | None) -> None:
        """(Re)build the cos/sin tables; None leaves them unset until the loader
        provides GGUF frequency factors."""
        if inv_freq is None:
            return
        cos, sin = cos_sin_table(inv_freq, self.max_positions)
        self.register_buffer("rope_cos", cos, persistent=False)  # [max_positions, head_dim]
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, input_ids, positions, meta: AttentionMetadata, kv_caches) -> torch.Tensor:
        """input_ids, positions: [T] long; kv_caches: per layer (k_cache, v_cache),
        each [Hkv, num_slots, D]. Returns final hidden states [T, hidden] in the model dtype."""
        x = self.embed_tokens(input_ids)
        dtype = x.dtype
        x = x.float()  # [T, hidden] residual stream
        cos = self.rope_cos[positions].to(dtype).unsqueeze(1)  # [T, 1, head_dim]
        sin = self.rope_sin[positions].to(dtype).unsqueeze(1)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            x = layer(x, cos, sin, meta, k_cache, v_cache)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, hidden] -> logits [N, vocab] in float32."""
        return self.lm_head(hidden).float()
