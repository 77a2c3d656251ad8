"""Multi-head latent attention (DeepSeek-V2/V3) over the paged latent cache.

Per token and layer the cache holds one row of ``kv_lora_rank + rope_dim``
values (model/kv_cache_spec.py, one part, one head): the RMS-normalised KV
latent c_kv, then the rotated key part shared by all heads. HF's form expands
it into per-head keys and values (``kv_b_proj``: c_kv -> [k_nope | v] per head);
this module never does that over the cache. It runs the *absorbed* form:

    score(h, j) = q_nope[h] . (W_UK[h] c_j) + q_rope[h] . k_rope_j
                = (W_UK[h]^T q_nope[h]) . c_j + q_rope[h] . k_rope_j
    out(h)      = W_UV[h] (sum_j p(h, j) c_j)

so each head's query is projected into the latent space once per token
(``w_uk``), attention is multi-query over the cached rows themselves (key =
the whole row, value = its c_kv part), and the per-head output leaves the
latent space through ``w_uv``. ``w_uk`` [H, nope, kv_lora_rank] and ``w_uv``
[H, v_head_dim, kv_lora_rank] are ``kv_b_proj``'s rows, split at load time.

Layouts set by the weight map (model/deepseek_weights.py), so rope runs in
place on contiguous head rows: the query projection emits
[rope parts of all heads | nope parts of all heads], and rotary dims are in
two halves (HF's rotate_half layout; DeepSeek's interleaved checkpoint pairs
are reordered at load). ``qkv_a_proj`` fuses the two projections that read
the hidden state: [q_a (q_lora_rank) or q (H * qk_head_dim) | c_kv | k_rope].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.kernels.attention import AttentionMetadata, paged_latent_attention
from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.llama import RMSNorm


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm of a sub-vector (float32 math, the weight's dtype out)."""
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(weight.dtype)


class MLAttention(nn.Module):
    def __init__(self, arch: DeepseekArch):
        super().__init__()
        self.arch = arch
        H, h = arch.num_heads, arch.hidden_size
        self.num_heads, self.nope, self.rope_dim = H, arch.qk_nope_head_dim, arch.qk_rope_head_dim
        self.kv_lora_rank, self.v_head_dim, self.eps = arch.kv_lora_rank, arch.v_head_dim, arch.rms_norm_eps
        self.q_width = arch.q_lora_rank or H * arch.qk_head_dim  # first columns of qkv_a_proj
        self.qkv_a_proj = nn.Linear(h, self.q_width + arch.latent_dim, bias=arch.attention_bias)
        if arch.q_lora_rank:
            self.q_a_layernorm = RMSNorm(arch.q_lora_rank, arch.rms_norm_eps)
            self.q_b_proj = nn.Linear(arch.q_lora_rank, H * arch.qk_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(arch.kv_lora_rank, arch.rms_norm_eps)
        self.w_uk = nn.Parameter(torch.empty(H, arch.qk_nope_head_dim, arch.kv_lora_rank))
        self.w_uv = nn.Parameter(torch.empty(H, arch.v_head_dim, arch.kv_lora_rank))
        self.o_proj = nn.Linear(H * arch.v_head_dim, h, bias=arch.attention_bias)
        self.scale = arch.softmax_scale()

    def project(self, x: torch.Tensor, rope, ops) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, hidden] (normed, model dtype) -> q_nope [T, H, nope], q_rope [T, H, rope]
        (rotated), latent [T, 1, kv_lora_rank + rope] (the row the cache stores)."""
        t, H, r = x.shape[0], self.num_heads, self.rope_dim
        a = self.qkv_a_proj(x)  # [T, q_width + kv_lora_rank + rope]
        q = self.q_b_proj(rms_norm(a[:, :self.q_width], self.q_a_layernorm.weight, self.eps)) \
            if self.arch.q_lora_rank else a[:, :self.q_width]  # [T, H * (rope + nope)]
        q_rope = ops.rope(q[:, :H * r].view(t, H, r), *rope)
        q_nope = q[:, H * r:].view(t, H, self.nope)
        c_kv = rms_norm(a[:, self.q_width:self.q_width + self.kv_lora_rank], self.kv_a_layernorm.weight, self.eps)
        k_rope = ops.rope(a[:, self.q_width + self.kv_lora_rank:].view(t, 1, r), *rope)
        return q_nope, q_rope, torch.cat([c_kv, k_rope.view(t, r)], dim=-1).view(t, 1, -1)

    def forward(self, x: torch.Tensor, rope, meta: AttentionMetadata, cache: torch.Tensor, ops) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]; cache: this layer's [num_blocks, 1, 1, block_size, latent_dim]."""
        t = x.shape[0]
        q_nope, q_rope, latent = self.project(x, rope, ops)
        q_latent = torch.bmm(q_nope.transpose(0, 1), self.w_uk)  # [H, T, nope] @ [H, nope, C] -> [H, T, C]
        q = torch.cat([q_latent.transpose(0, 1), q_rope], dim=-1)  # [T, H, C + rope]
        o = paged_latent_attention(q, latent, cache[:, 0], meta, self.scale, self.kv_lora_rank)  # [T, H, C]
        o = torch.bmm(o.transpose(0, 1), self.w_uv.transpose(1, 2))  # [H, T, C] @ [H, C, v] -> [H, T, v]
        return self.o_proj(o.transpose(0, 1).reshape(t, self.num_heads * self.v_head_dim))

    def forward_expanded(self, x: torch.Tensor, rope, ops) -> torch.Tensor:
        """HF's expanded form over one whole sequence, no cache: x [L, hidden] -> [L, hidden].
        Per-head keys [k_nope | k_rope] and values from c_kv, causal attention.
        The reference the absorbed form is tested against (same weights, same
        softmax scale)."""
        q_nope, q_rope, latent = self.project(x, rope, ops)
        t, H = x.shape[0], self.num_heads
        c_kv, k_rope = latent[:, 0, :self.kv_lora_rank], latent[:, :, self.kv_lora_rank:]
        k_nope = torch.einsum("lc,hnc->hln", c_kv, self.w_uk)  # [H, L, nope]
        v = torch.einsum("lc,hvc->hlv", c_kv, self.w_uv)  # [H, L, v]
        k = torch.cat([k_nope, k_rope.transpose(0, 1).expand(H, t, self.rope_dim)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1).transpose(0, 1)  # [H, L, nope + rope]
        o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=self.scale)[0]
        return self.o_proj(o.transpose(0, 1).reshape(t, H * self.v_head_dim))
