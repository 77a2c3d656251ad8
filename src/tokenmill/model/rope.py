"""Rotary position embeddings: inverse frequencies (with Llama-3 scaling) and
the cos/sin table the attention layers index by position.

We use the Hugging Face layout (rotate_half over two halves of head_dim); GGUF
q/k weights are permuted back to it at load time.

The tables are always computed on CPU (``device="cpu"`` on each arange) and
moved by the caller: a model built on the meta device (loaders/common.py) would
otherwise compute them with torch's Python reference kernels, whose first
call imports torch._dynamo.
"""

from __future__ import annotations

import math

import torch

from tokenmill.model.arch import ModelArch
from tokenmill.model.yarn import yarn_mscale


def inverse_frequencies(arch: ModelArch, freq_factors: torch.Tensor | None = None) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies after any rope scaling."""
    dim = arch.head_dim
    inv_freq = 1.0 / (arch.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device="cpu") / dim))
    scaling = arch.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "llama3":
        inv_freq = _llama3_scale(inv_freq, scaling)
    elif kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "gguf_freq_factors":
        if freq_factors is None:
            raise ValueError("rope_freqs.weight: GGUF declares frequency factors but the tensor is missing")
        inv_freq = inv_freq / freq_factors.to(torch.float64)
    return inv_freq.to(torch.float32)


def _llama3_scale(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    # Long wavelengths are slowed by `factor`, short ones kept, the band between
    # interpolated smoothly (Llama 3.1 recipe).
    factor = s["factor"]
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_len = s.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_mid, mid, scaled)


def cos_sin_table(inv_freq: torch.Tensor, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [max_positions, head_dim] float32, halves duplicated (HF layout)."""
    pos = torch.arange(max_positions, dtype=torch.float32, device="cpu")
    freqs = torch.outer(pos, inv_freq)  # [max_positions, head_dim // 2]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim]; cos/sin: [tokens, 1, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def default_frequencies(dim: int, base: float) -> torch.Tensor:
    """[dim // 2] float32 plain rope inverse frequencies, computed in float32 as HF's
    DeepSeek rotary embedding does (bit-identical tables)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim))


def yarn_frequencies(dim: int, base: float, params: dict, max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    """YaRN (arXiv 2309.00071) as HF computes it: ([dim // 2] float32 inverse
    frequencies, the factor cos and sin are multiplied by). Dimensions that turn
    more than ``beta_fast`` times over the original context keep their
    frequency, those under ``beta_slow`` are slowed by ``factor``, a linear
    ramp blends the band between."""
    factor = params.get("factor") or max_position_embeddings / params["original_max_position_embeddings"]
    original = params["original_max_position_embeddings"]
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = (yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
                            if mscale and mscale_all_dim else yarn_mscale(factor))
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim)
    keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
    return inv_freq, float(attention_factor)
