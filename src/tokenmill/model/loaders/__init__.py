"""Weight loaders behind one interface: ``load_model(source, fmt, device, dtype)``.

Each loader returns a ``LoadedModel``: the module on its device and dtype, plus
where the tokenizer comes from. The registry below maps a load format to its
loader; each loader finds the architecture in the model registry
(model/registry.py) and knows nothing of any one architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from tokenmill.model.protocol import ArchInfo, CausalLM


@dataclass
class LoadedModel:
    model: CausalLM
    arch: ArchInfo
    """The model's own ``arch`` (its registry entry's arch type)."""
    tokenizer_source: str | None
    """GGUF file or HF directory holding the tokenizer; None for dummy weights."""
    name: str


Loader = Callable[[str, torch.device, torch.dtype, int, int], LoadedModel]


def _registry() -> dict[str, Loader]:
    from tokenmill.model.loaders.dummy import load_dummy
    from tokenmill.model.loaders.gguf_loader import load_gguf
    from tokenmill.model.loaders.hf_dir import load_hf_dir

    return {"gguf": load_gguf, "hf": load_hf_dir, "dummy": load_dummy}


def detect_format(source: str) -> str:
    if source.startswith("dummy:"):
        return "dummy"
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"model: no such file or directory: {source}")
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir():
        if (path / "config.json").exists():
            return "hf"
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return "gguf"
        raise FileNotFoundError(f"model: {source} has neither config.json nor a .gguf file")
    raise ValueError(f"model: cannot tell the format of {source!r}; use --load-format")


def load_model(source: str, fmt: str, device: torch.device, dtype: torch.dtype,
               max_positions: int = 0, seed: int = 0) -> LoadedModel:
    """Load ``source`` with the loader for ``fmt`` ('auto' detects it).
    ``max_positions`` sizes the rope table (0: the model's context length)."""
    if fmt == "auto":
        fmt = detect_format(source)
    loaders = _registry()
    if fmt not in loaders:
        raise ValueError(f"load_format: unknown {fmt!r}; choose from {sorted(loaders)}")
    return loaders[fmt](source, device, dtype, max_positions, seed)
