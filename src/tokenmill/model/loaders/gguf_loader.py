"""GGUF loader: metadata -> ModelArch, tensors dequantized with the ``gguf``
package to float32, renamed to HF names, q/k permuted back to HF rope layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from tokenmill.model.arch import arch_from_gguf_fields
from tokenmill.model.loaders import LoadedModel
from tokenmill.model.loaders.common import build_empty_model
from tokenmill.model.weights import load_hf_weights

_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


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


def read_fields(reader) -> dict:
    """GGUF key/value metadata as plain Python values (token arrays skipped)."""
    out = {}
    for key, field in reader.fields.items():
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                   "tokenizer.ggml.scores"):
            out[key] = range(len(field.data))  # only the length is needed here
            continue
        out[key] = field.contents()
    return out


def hf_name(gguf_name: str) -> str | None:
    if gguf_name in _TOP:
        return _TOP[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _BLOCK:
        return f"model.layers.{parts[1]}.{_BLOCK[parts[2]]}.{parts[3]}"
    return None


def dequantize(tensor) -> torch.Tensor:
    """One GGUF tensor as float32 torch, numpy shape order ([out, in] for weights)."""
    from gguf import GGMLQuantizationType, quants

    qtype = tensor.tensor_type
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
        data = np.asarray(tensor.data)
        if qtype == GGMLQuantizationType.BF16:
            return torch.from_numpy(data.view(np.int16).copy()).view(torch.bfloat16).float()
        return torch.from_numpy(np.array(data, dtype=np.float32))
    try:
        arr = quants.dequantize(tensor.data, qtype)
    except NotImplementedError as exc:
        raise ValueError(f"tensor {tensor.name}: GGUF tensor type {qtype.name} is not supported") from exc
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32).reshape(shape))


def unpermute_rope(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (interleaved rope pairs -> two halves)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def load_gguf(source: str, device: torch.device, dtype: torch.dtype, max_positions: int, seed: int) -> LoadedModel:
    from gguf import GGUFReader

    path = resolve_gguf_path(source)
    reader = GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    arch = arch_from_gguf_fields(read_fields(reader), set(tensors))
    freq = dequantize(tensors["rope_freqs.weight"]) if "rope_freqs.weight" in tensors else None
    model = build_empty_model(arch, device, dtype, max_positions, freq)
    # llama.cpp permutes q/k only for the llama family (which includes Mistral).
    permute = arch.family in ("llama", "mistral")

    def named():
        for name, t in tqdm(tensors.items(), desc=f"Loading {path.name}", unit="tensor", leave=False):
            if name == "rope_freqs.weight":
                continue
            target = hf_name(name)
            if target is None:
                raise ValueError(f"unexpected GGUF tensor {name!r}")
            w = dequantize(t)
            if permute and target.endswith(("q_proj.weight", "q_proj.bias")):
                w = unpermute_rope(w, arch.num_heads)
            elif permute and target.endswith(("k_proj.weight", "k_proj.bias")):
                w = unpermute_rope(w, arch.num_kv_heads)
            yield target, w

    load_hf_weights(model, named())
    return LoadedModel(model=model, arch=arch, tokenizer_source=str(path), name=path.stem)
