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
matmuls to cut per-step op count. The elementwise ops (residual add + RMSNorm,
rotary embedding, SiLU-and-mul) go through ``self.ops`` (kernels/fused_ops.py):
plain torch, or fused C++ kernels on CPU, set by the engine.

KV cache: one tensor per layer, [num_blocks, 2, Hkv, block_size, D]
(model/kv_cache_spec.py); part 0 holds K, part 1 holds V (``kv_cache_spec``).

Each sublayer's output is added to the residual stream by the norm that reads
it next (vLLM's fused add + norm): a layer returns its MLP output "pending",
and the next layer's input norm (or the final norm) adds it.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.attention import AttentionMetadata, paged_attention
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS, FusedOps
from tokenmill.model.arch import ModelArch
from tokenmill.model.kv_cache_spec import KVCacheSpec
from tokenmill.model.moe import DenseMLP, MoELayer
from tokenmill.model.rope import cos_sin_table, inverse_frequencies

K, V = 0, 1
"""This model's cache parts (index into a layer's cache tensor, dim 1)."""


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, pending: torch.Tensor | None, ops: FusedOps) -> torch.Tensor:
        """x: the float32 residual stream [T, hidden]; adds ``pending`` (a sublayer
        output, or None) into it in place, then returns x normalized, in the
        weight's dtype (HF's formula, in float32)."""
        return ops.add_rms_norm(x, pending, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, arch: ModelArch):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.q_size, self.kv_size = arch.q_size, arch.kv_size
        self.qkv_proj = nn.Linear(arch.hidden_size, self.q_size + 2 * self.kv_size, bias=arch.attention_bias)
        self.o_proj = nn.Linear(self.q_size, arch.hidden_size, bias=False)
        self.scale = self.head_dim**-0.5

    def forward(self, x, rope, meta: AttentionMetadata, cache, ops: FusedOps):
        """cache: this layer's [num_blocks, 2, Hkv, block_size, D]."""
        t = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, q_size + 2 * kv_size]
        heads = self.num_heads + self.num_kv_heads
        # Rotate q and k heads together: one rope pass instead of two.
        qk = ops.rope(qkv[:, :self.q_size + self.kv_size].view(t, heads, self.head_dim), *rope)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)  # [T, Hq, D], [T, Hkv, D]
        v = qkv[:, self.q_size + self.kv_size:].reshape(t, self.num_kv_heads, self.head_dim)
        # Views [num_blocks, Hkv, block_size, D], strided across blocks.
        o = paged_attention(q, k, v, cache[:, K], cache[:, V], meta, self.scale)  # [T, Hq, D]
        return self.o_proj(o.view(t, self.q_size))


class DecoderLayer(nn.Module):
    def __init__(self, arch: ModelArch):
        super().__init__()
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.self_attn = Attention(arch)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        # Mixtral: a Mixture-of-Experts layer (model/moe.py) in place of the dense MLP.
        self.mlp = MoELayer(arch.hidden_size, arch.moe) if arch.moe else DenseMLP(arch.hidden_size,
                                                                                  arch.intermediate_size)

    def forward(self, x, pending, rope, meta, cache, ops: FusedOps):
        """x: [T, hidden] float32 residual stream, updated in place; pending: the
        previous layer's MLP output not yet added to x (model dtype), None before
        the first layer. Returns this layer's MLP output, for the next norm to add."""
        attn_out = self.self_attn(self.input_layernorm(x, pending, ops), rope, meta, cache, ops)
        return self.mlp(self.post_attention_layernorm(x, attn_out, ops), ops)


class LlamaForCausalLM(nn.Module):
    """Satisfies ``CausalLM`` (model/protocol.py); registered by model/llama_weights.py."""

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
        self.cuda_graph_safe = arch.moe is None
        """No op of the forward waits on the host (MoE routing reads its expert
        counts back), so decode steps can be captured as CUDA graphs."""
        self.ops = TORCH_FUSED_OPS  # elementwise ops (kernels/fused_ops.py); the engine picks the backend
        self.native_decoder = None
        """The decoder layers in one C++ call (kernels/native_decoder.py), set by the
        engine on CPU; steps it covers skip the Python layer loop below."""
        self.set_rope(inverse_frequencies(arch) if arch.rope_scaling is None or
                      arch.rope_scaling.get("rope_type") != "gguf_freq_factors" else None)

    def set_rope(self, inv_freq: torch.Tensor | None) -> None:
        """(Re)build the cos/sin tables (float32, on the model's device); None
        leaves them unset until the loader provides GGUF frequency factors."""
        if inv_freq is None:
            return
        cos, sin = cos_sin_table(inv_freq, self.max_positions)
        device = self.embed_tokens.weight.device
        self.register_buffer("rope_cos", cos.to(device), persistent=False)  # [max_positions, head_dim]
        self.register_buffer("rope_sin", sin.to(device), persistent=False)

    def forward(self, input_ids, positions, meta: AttentionMetadata, kv_caches) -> torch.Tensor:
        """input_ids, positions: [T] long; kv_caches: per layer one
        [num_blocks, 2, Hkv, block_size, D] tensor. Returns final hidden states
        [T, hidden] in the model dtype."""
        ops = self.ops
        x = self.embed_tokens(input_ids)  # a fresh tensor: the layers may add into it in place
        dtype = x.dtype
        x = x.float()  # [T, hidden] residual stream
        rope = ops.rope_inputs(self.rope_cos, self.rope_sin, positions, dtype)
        native = self.native_decoder
        if native is not None and native.covers(meta):
            return self.norm(x, native(x, rope, meta, kv_caches), ops)
        pending = None
        for layer, cache in zip(self.layers, kv_caches):
            pending = layer(x, pending, rope, meta, cache, ops)
        return self.norm(x, pending, ops)

    def kv_cache_spec(self) -> KVCacheSpec:
        """Per layer and token: K and V, num_kv_heads x head_dim each."""
        arch = self.arch
        return KVCacheSpec(num_layers=arch.num_layers, parts=("k", "v"), num_heads=arch.num_kv_heads,
                           head_dim=arch.head_dim)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, hidden] -> logits [N, vocab] in the model dtype. Not widened
        here: the sampler's greedy path takes the argmax as it is (exact), and its
        other paths widen to float32 themselves."""
        return self.lm_head(hidden)

    def decoder_linears(self) -> list[tuple[nn.Module, str]]:
        """(owner, attribute) of each layer's fused qkv, o, fused gate_up and down
        projections (Mixtral: every expert's w13 and w2 in their place)."""
        out = []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            out += [(attn, "qkv_proj"), (attn, "o_proj")]
            out += mlp.experts.linears() if isinstance(mlp, MoELayer) else [(mlp, "gate_up_proj"), (mlp, "down_proj")]
        return out

    def exact_head(self) -> ExactHead:
        """The LM head as data for the sampler's bf16 tie rule (engine/exact_head.py).
        Call it after any swap of ``lm_head`` (quantization, deterministic mode)."""
        return ExactHead.of_linear(self.lm_head)

    def exact_logits(self, hidden: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """hidden: [hidden] one row of compute_logits' input; columns: [k] long ->
        float32 [k]: compute_logits before its rounding to the model dtype."""
        return self.exact_head().columns(hidden, columns)
