"""Hugging Face directory loader: config.json + *.safetensors (sharded or not)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tqdm import tqdm

from tokenmill.model.loaders import LoadedModel
from tokenmill.model.loaders.common import build_empty_model
from tokenmill.model.registry import entry_for_hf_config


def load_hf_dir(source: str, device: torch.device, dtype: torch.dtype, max_positions: int, seed: int) -> LoadedModel:
    from safetensors import safe_open

    root = Path(source)
    config_path = root / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"model: {config_path} not found")
    cfg = json.loads(config_path.read_text())
    entry = entry_for_hf_config(cfg)
    arch = entry.parse_hf_config(cfg)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"model: no *.safetensors files in {source} (only safetensors are supported)")
    model = build_empty_model(arch, device, dtype, max_positions)

    def named():
        for f in tqdm(files, desc=f"Loading {root.name}", unit="file", leave=False):
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name)

    entry.weights.load(model, named())
    return LoadedModel(model=model, arch=arch, tokenizer_source=str(root), name=root.name)
