"""GGUF loader: metadata -> arch through the registry entry of the file's
``general.architecture``, tensors dequantized to float32 (Q4_1 and Q8_0 by
model/gguf_dequant.py, other block types by the ``gguf`` package) and handed
to the entry's weight map (which renames them and undoes llama.cpp's layout
changes, see model/llama_weights.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from tokenmill.model.gguf_dequant import dequantize_blocks, has_fast_path
from tokenmill.model.gguf_file import gguf_file
from tokenmill.model.loaders import LoadedModel
from tokenmill.model.loaders.common import build_empty_model
from tokenmill.model.registry import entry_for_gguf


def resolve_gguf_path(source: str) -> Path:
    path = Path(source)
    if path.is_dir():
        files = sorted(path.glob("*.gguf"))
        if not files:
            raise FileNotFoundError(f"model: no .gguf file in {source}")
        return files[0]
    if not path.exists():
        raise FileNotFoundError(f"model: no such file: {source}")
    return path


def dequantize(tensor) -> torch.Tensor:
    """One GGUF tensor as float32 torch, numpy shape order ([out, in] for weights)."""
    from gguf import GGMLQuantizationType, quants

    qtype = tensor.tensor_type
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
        data = np.asarray(tensor.data)
        if qtype == GGMLQuantizationType.BF16:
            return torch.from_numpy(data.view(np.int16).copy()).view(torch.bfloat16).float()
        return torch.from_numpy(np.array(data, dtype=np.float32))
    shape = tuple(int(d) for d in reversed(tensor.shape))
    if has_fast_path(qtype):
        return dequantize_blocks(np.asarray(tensor.data), qtype).reshape(shape)
    try:
        arr = quants.dequantize(tensor.data, qtype)
    except NotImplementedError as exc:
        raise ValueError(f"tensor {tensor.name}: GGUF tensor type {qtype.name} is not supported") from exc
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32).reshape(shape))


def load_gguf(source: str, device: torch.device, dtype: torch.dtype, max_positions: int, seed: int) -> LoadedModel:
    path = resolve_gguf_path(source)
    parsed = gguf_file(path)
    tensors = {t.name: t for t in parsed.tensors}
    fields = parsed.fields
    entry = entry_for_gguf(fields.get("general.architecture"))
    arch = entry.parse_gguf(fields, set(tensors))
    model = build_empty_model(arch, device, dtype, max_positions)

    def named():
        for name, t in tqdm(tensors.items(), desc=f"Loading {path.name}", unit="tensor", leave=False):
            yield entry.weights.from_gguf(arch, name, dequantize(t))

    entry.weights.load(model, named())
    return LoadedModel(model=model, arch=arch, tokenizer_source=str(path), name=path.stem)
