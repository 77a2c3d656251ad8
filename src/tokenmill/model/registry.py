"""Model registry: which architectures tokenmill can load, and how.

An entry ties together what a loader needs for one architecture: the model
class, its config parsers (HF config.json -> arch, GGUF metadata -> arch) and
its weight map (checkpoint tensor names -> module parameters). Loaders
(model/loaders/) look entries up here by the HF ``architectures`` names in
config.json or the GGUF ``general.architecture`` value; they know nothing of
any one architecture.

Built-in entries register themselves when their module is imported
(model/llama_weights.py for the Llama family); this module imports those
modules on first lookup. Tests may register and unregister their own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch

from tokenmill.model.protocol import ArchInfo, CausalLM

_BUILTIN_MODULES = ("tokenmill.model.llama_weights", "tokenmill.model.deepseek_weights")
"""Modules whose import registers the built-in architectures."""


class WeightMap(Protocol):
    """How checkpoint tensors become one architecture's parameters and buffers."""

    def finish_empty(self, model: CausalLM) -> None:
        """After ``to_empty()`` on the target device: restore what that cannot
        keep (tied parameters, computed buffers such as rope tables)."""
        ...

    def load(self, model: CausalLM, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors into the model; ValueError names any unknown,
        missing or misshaped tensor."""
        ...

    def from_gguf(self, arch: ArchInfo, name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
        """One GGUF tensor (float32) as (name ``load`` accepts, tensor in that
        name's layout), e.g. undoing llama.cpp's rope row permutation;
        ValueError for a tensor the architecture does not have."""
        ...


@dataclass(frozen=True)
class ModelEntry:
    """One architecture the loaders can build and fill."""

    name: str
    """Registry key (e.g. 'llama'), unique."""
    model_class: Callable[[ArchInfo, int], CausalLM]
    """Built as ``model_class(arch, max_positions)`` on the meta device, then moved."""
    arch_type: type
    """The arch dataclass the parsers return; each arch type belongs to one entry."""
    parse_hf_config: Callable[[dict], ArchInfo]
    """Parsed config.json -> arch; ValueError naming an unsupported setting."""
    weights: WeightMap
    hf_architectures: tuple[str, ...] = ()
    """config.json ``architectures`` values served by this entry."""
    hf_model_types: tuple[str, ...] = ()
    """config.json ``model_type`` values accepted when no ``architectures`` entry matches."""
    gguf_architectures: tuple[str, ...] = ()
    """GGUF ``general.architecture`` values served by this entry."""
    parse_gguf: Callable[[dict, set[str]], ArchInfo] | None = None
    """(GGUF metadata, tensor names) -> arch; None: no GGUF support."""
    presets: Mapping[str, ArchInfo] = field(default_factory=dict)
    """Named shapes for random-weight runs (``dummy:<name>``), unique across entries."""


_ENTRIES: dict[str, ModelEntry] = {}


def register(entry: ModelEntry) -> ModelEntry:
    """Add ``entry``; registering the same entry again is a no-op. ValueError
    when its name, arch type, any of its architecture names or preset names is
    taken by another."""
    current = _ENTRIES.get(entry.name)
    if current == entry:
        return entry
    if current is not None:
        raise ValueError(f"model registry: name {entry.name!r} is already registered")
    for other in _ENTRIES.values():
        taken = (set(entry.hf_architectures) & set(other.hf_architectures)
                 | set(entry.gguf_architectures) & set(other.gguf_architectures)
                 | set(entry.presets) & set(other.presets))
        if entry.arch_type is other.arch_type:
            taken.add(entry.arch_type.__name__)
        if taken:
            raise ValueError(f"model registry: {sorted(taken)} already belong to entry {other.name!r}")
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove an entry (tests that registered their own model)."""
    _ENTRIES.pop(name, None)


def entries() -> dict[str, ModelEntry]:
    """Every registered entry by name, built-ins included."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    return dict(_ENTRIES)


def entry_for_hf_config(cfg: dict) -> ModelEntry:
    """The entry for a parsed config.json: by ``architectures``, else by ``model_type``."""
    known = entries().values()
    archs = cfg.get("architectures") or []
    for name in archs:
        for entry in known:
            if name in entry.hf_architectures:
                return entry
    model_type = cfg.get("model_type")
    for entry in known:
        if model_type in entry.hf_model_types:
            return entry
    supported = sorted(a for e in known for a in e.hf_architectures)
    raise ValueError(f"unsupported architecture {archs or model_type!r}; registered: {supported}")


def entry_for_gguf(architecture: str | None) -> ModelEntry:
    """The entry for a GGUF file's ``general.architecture``."""
    known = entries().values()
    for entry in known:
        if architecture in entry.gguf_architectures and entry.parse_gguf is not None:
            return entry
    supported = sorted(a for e in known if e.parse_gguf is not None for a in e.gguf_architectures)
    raise ValueError(f"unsupported GGUF architecture {architecture!r}; registered: {supported}")


def entry_for_arch(arch: ArchInfo) -> ModelEntry:
    """The entry whose parsers build this arch's type (dummy presets carry no names)."""
    known = entries().values()
    for entry in known:
        if type(arch) is entry.arch_type:
            return entry
    raise ValueError(f"model: no registered architecture takes a {type(arch).__name__}; "
                     f"registered: {sorted(e.name for e in known)}")
