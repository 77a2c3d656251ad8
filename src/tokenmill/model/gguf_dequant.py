"""Whole-tensor dequantizers, in torch, for the GGUF block types llama.cpp's
small-model files mostly hold (Q4_1, Q8_0); the ``gguf`` package does the rest.

The package works through numpy 16 rows at a time, which made dequantizing the
embedded model's 211 quantized tensors about 1.2 s of every engine's start.
Here each tensor is one pass of torch elementwise ops over all its blocks,
computed exactly as the package does (float32, a multiply then an add, no
fused multiply-add), so the weights are bit-identical to its
(tests/test_gguf_dequant.py).

Block layouts (ggml-common.h), 32 weights a block:
- Q4_1, 20 bytes: d (f16), m (f16), 16 bytes of 4-bit codes, weight i in the
  low nibble of byte i for i < 16 and the high nibble of byte i - 16 after;
  w = d * code + m.
- Q8_0, 34 bytes: d (f16), 32 int8 codes; w = code * d.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

FAST_TYPES = (GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0)


def has_fast_path(qtype: int) -> bool:
    return int(qtype) in FAST_TYPES


def dequantize_blocks(raw: np.ndarray, qtype: int) -> torch.Tensor:
    """raw: the tensor's bytes (uint8, any shape whose rows are whole blocks)
    -> float32 [raw.size // block bytes * 32], the weights in file order."""
    qtype = GGMLQuantizationType(int(qtype))
    _, size = GGML_QUANT_SIZES[qtype]  # (weights, bytes) per block
    if raw.dtype != np.uint8 or raw.size % size:
        raise ValueError(f"GGUF tensor data: {raw.size} bytes of {raw.dtype} is not whole {size}-byte blocks")
    blocks = torch.from_numpy(np.array(raw, copy=True).reshape(-1, size))  # a copy: the file's map is read-only
    d = blocks[:, 0:2].contiguous().view(torch.float16).float()  # [n, 1]
    if qtype == GGMLQuantizationType.Q8_0:
        codes = blocks[:, 2:].view(torch.int8).float()  # [n, 32]
        return (codes * d).reshape(-1)
    m = blocks[:, 2:4].contiguous().view(torch.float16).float()  # [n, 1]
    packed = blocks[:, 4:]  # [n, 16]
    codes = torch.cat([packed & 0x0F, packed >> 4], dim=1).float()  # [n, 32]: low nibbles, then high
    return (d * codes + m).reshape(-1)
