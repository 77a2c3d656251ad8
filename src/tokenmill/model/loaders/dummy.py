"""Random weights for any config: measure large shapes without checkpoints.

``dummy:<preset>`` (each registry entry's ``presets``, e.g. model/llama_presets.py)
or ``dummy:/path/to/config.json`` of any registered architecture. Weights are
N(0, 0.02) from a seeded generator, norms are ones; the text is meaningless,
the FLOPs and bytes are real. No tokenizer: prompts must be token ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tokenmill.model.loaders import LoadedModel
from tokenmill.model.loaders.common import build_empty_model
from tokenmill.model.protocol import ArchInfo
from tokenmill.model.registry import entries, entry_for_hf_config


def dummy_arch(spec: str) -> ArchInfo:
    """A preset of any registered architecture, or a registered architecture's config.json."""
    presets = {name: arch for entry in entries().values() for name, arch in entry.presets.items()}
    if spec in presets:
        return presets[spec]
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.exists():
        cfg = json.loads(path.read_text())
        return entry_for_hf_config(cfg).parse_hf_config(cfg)
    raise ValueError(f"model: unknown dummy spec {spec!r}; use one of {sorted(presets)} or a config.json path")


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
