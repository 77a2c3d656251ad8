"""Shared steps of every loader: build an uninitialised model on the target
device and dtype through its registry entry (model/registry.py)."""

from __future__ import annotations

import torch

from tokenmill.model.protocol import ArchInfo, CausalLM
from tokenmill.model.registry import entry_for_arch


def build_empty_model(arch: ArchInfo, device: torch.device, dtype: torch.dtype, max_positions: int) -> CausalLM:
    """Allocate (not initialise) the parameters directly on ``device``; the
    entry's weight map restores tied parameters and computed buffers."""
    entry = entry_for_arch(arch)
    positions = max_positions or arch.max_position_embeddings
    with torch.device("meta"):
        model = entry.model_class(arch, positions)
    model = model.to_empty(device=device).to(dtype)
    entry.weights.finish_empty(model)
    return model.eval().requires_grad_(False)
