"""DeepSeek-V3's next-token-prediction (MTP) modules: the drafter for speculative decoding.

Depth k (``num_mtp_layers`` of them, DeepSeek-V3/R1 ship one) predicts the
token after the one the previous depth (k = 0: the main model) predicted. For
each row t it reads the embedding of the token at position p + 1 and the
previous depth's final hidden state at position p, and runs

    h = eh_proj([enorm(embed(token[p + 1])) | hnorm(hidden[p])])     [T, hidden]
    h = one decoder block (MLA + MoE, its own latent KV cache layer) at position p + 1
    logits = lm_head(shared_head_norm(h))                           (the main model's head)

as in DeepSeek-V3's report and HF transformers' ``MtpLayer``. The embedding
and the head are the main model's (checkpoints carry copies, not loaded).
``hidden`` is what the main model returns: its final hidden states, after
the final norm (HF hands ``hidden_states[-1]``, the same tensor).

Checkpoint names: depth k is ``model.layers.{num_layers + k}.*`` (weight map in
model/deepseek_weights.py). A checkpoint without them (HF's ``save_pretrained``
of ``DeepseekV3ForCausalLM`` writes none) loads with ``model.mtp = None``.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.kernels.attention import AttentionMetadata
from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.llama import RMSNorm
from tokenmill.model.mla import rms_norm


class MTPLayer(nn.Module):
    def __init__(self, arch: DeepseekArch, depth: int):
        super().__init__()
        from tokenmill.model.deepseek import DeepseekDecoderLayer  # the model module imports this one

        h = arch.hidden_size
        self.enorm = RMSNorm(h, arch.rms_norm_eps)
        self.hnorm = RMSNorm(h, arch.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.block = DeepseekDecoderLayer(arch, arch.num_layers + depth)  # an MoE layer: past first_k_dense_replace
        self.shared_head_norm = RMSNorm(h, arch.rms_norm_eps)


class DeepseekMTP(nn.Module):
    def __init__(self, arch: DeepseekArch):
        super().__init__()
        self.arch = arch
        self.layers = nn.ModuleList(MTPLayer(arch, k) for k in range(arch.num_mtp_layers))

    def forward(self, model, depth: int, input_ids: torch.Tensor, prev_hidden: torch.Tensor,
                positions: torch.Tensor, meta: AttentionMetadata, cache: torch.Tensor) -> torch.Tensor:
        """One depth over T rows -> its final hidden states [T, hidden] (model dtype;
        ``model.compute_logits`` turns them into draft logits).

        model: the main DeepseekV3ForCausalLM (embedding, rope tables, fused ops);
        input_ids [T]: the tokens at positions p + 1; prev_hidden [T, hidden]: the
        previous depth's final hidden states at p; positions [T]: p + 1;
        cache: this depth's latent cache layer, [num_blocks, 1, 1, block_size, latent],
        written at meta.slot_mapping like any decoder layer's."""
        layer = self.layers[depth]
        ops, eps = model.ops, self.arch.rms_norm_eps
        emb = model.embed_tokens(input_ids)
        joined = torch.cat([rms_norm(emb, layer.enorm.weight, eps),
                            rms_norm(prev_hidden.to(emb.dtype), layer.hnorm.weight, eps)], dim=-1)
        x = layer.eh_proj(joined).float()  # [T, hidden] residual stream
        rope = model.rope_inputs(positions, emb.dtype)
        pending = layer.block(x, None, rope, meta, cache, ops)
        return layer.shared_head_norm(x, pending, ops)
