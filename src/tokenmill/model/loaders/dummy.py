"""Random weights for any config: measure large shapes without checkpoints.

``dummy:<preset>`` (see PRESETS) or ``dummy:/path/to/config.json``. Weights are
N(0, 0.02) from a seeded generator, norms are ones; the text is meaningless,
the FLOPs and bytes are real. No tokenizer: prompts must be token ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tokenmill.model.arch import ModelArch, arch_from_hf_config
from tokenmill.model.loaders import LoadedModel
from tokenmill.model.loaders.common import build_empty_model

_LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
PRESETS = {
    "llama3-8b": dict(family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5,
                      rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
                      rope_scaling=_LLAMA3_SCALING, eos_token_ids=(128009,)),
    "llama3-1b": dict(family="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                      num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5,
                      rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
                      rope_scaling=_LLAMA3_SCALING, eos_token_ids=(128009,)),
    # For tests: a forward pass in well under a millisecond.
    "tiny": dict(family="llama", vocab_size=512, hidden_size=128, intermediate_size=256,
                 num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, rms_norm_eps=1e-5,
                 rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=True,
                 eos_token_ids=(2,)),
    "smollm2-135m": dict(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5,
                         rope_theta=100000.0, max_position_embeddings=8192, tie_word_embeddings=True,
                         eos_token_ids=(2,)),
}


def dummy_arch(spec: str) -> ModelArch:
    if spec in PRESETS:
        return ModelArch(**PRESETS[spec])
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.exists():
        return arch_from_hf_config(json.loads(path.read_text()))
    raise ValueError(f"model: unknown dummy spec {spec!r}; use one of {sorted(PRESETS)} or a config.json path")


def load_dummy(source: str, device: torch.device, dtype: torch.dtype, max_positions: int, seed: int) -> LoadedModel:
    spec = source.removeprefix("dummy:")
    arch = dummy_arch(spec)
    model = build_empty_model(arch, device, dtype, max_positions)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return LoadedModel(model=model, arch=arch, tokenizer_source=None, name=f"dummy-{Path(spec).stem}")
