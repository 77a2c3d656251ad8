"""Shared steps of every loader: build an uninitialised model on the target
device and dtype, and keep the rope table and tied weights right after that."""

from __future__ import annotations

import torch

from tokenmill.model.arch import ModelArch
from tokenmill.model.llama import LlamaForCausalLM
from tokenmill.model.rope import inverse_frequencies


def build_empty_model(arch: ModelArch, device: torch.device, dtype: torch.dtype,
                      max_positions: int, freq_factors: torch.Tensor | None = None) -> LlamaForCausalLM:
    """Allocate (not initialise) the parameters directly on ``device``."""
    positions = max_positions or arch.max_position_embeddings
    with torch.device("meta"):
        model = LlamaForCausalLM(arch, positions)
    model = model.to_empty(device=device).to(dtype)
    # to_empty() converts the two ends of a tied pair separately: re-tie them.
    if arch.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    # Rope tables are computed, not loaded; keep them float32 on the device.
    inv_freq = inverse_frequencies(arch, freq_factors)
    model.set_rope(inv_freq)
    model.rope_cos = model.rope_cos.to(device)
    model.rope_sin = model.rope_sin.to(device)
    return model.eval().requires_grad_(False)
