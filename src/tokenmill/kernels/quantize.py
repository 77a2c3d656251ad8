"""Weight-only quantization of a loaded model, in place: one entry per method.

- ``int8``: every decoder linear and the LM head as int8, one scale per output
  channel.
- ``int4``: decoder linears as int4 in groups of 32 (GGUF Q4_1's layout); the
  LM head as per-channel int8, because the logits are the most sensitive
  matmul (GGUF files usually keep it at 6-8 bits too). A linear whose input
  width is not a multiple of 32 falls back to int8.

The input embedding stays in full precision: it is a lookup, not a matmul.
On CPU the int8 matmuls run with bf16 activations (torch's packed kernel is fast
only there), the int4 ones on the C++ int4 kernel with int8 or float
activations (``int4_activations``; kernels/int4_linear.py) or, without its
vector code, torch's with bf16; on other devices weights are dequantized per
call.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.kernels.int4_linear import Int4Linear, dense_copy_dtype, supports_int4
from tokenmill.kernels.int8_linear import Int8Linear

METHODS = ("int8", "int4")
DENSE_COPY_MEMORY_FRACTION = 0.25
"""int4 keeps dense (bf16, or float32 on AVX2-only CPUs) copies of its layers
for prefill when they fit in this share of the memory available at load."""


def _compute_dtype(model: nn.Module) -> torch.dtype:
    p = next(model.parameters())
    return torch.bfloat16 if p.device.type == "cpu" else p.dtype


def _decoder_linear(linear: nn.Linear, method: str, compute: torch.dtype, keep_dense: bool,
                    int4_activations: str) -> nn.Module:
    if method == "int4" and supports_int4(linear):
        return Int4Linear(linear, compute, keep_dense=keep_dense, activations=int4_activations)
    return Int8Linear(linear, compute)


def dense_copy_fits(model: nn.Module, fraction: float = DENSE_COPY_MEMORY_FRACTION,
                    dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether ``dtype`` copies of the decoder linears take at most ``fraction``
    of the memory available now: int4's prefill path (kernels/int4_linear.py,
    in ``dense_copy_dtype()``) and the mixed linears' second layout
    (kernels/mixed_linear.py). CPU only: on other devices neither is a speed path."""
    p = next(model.parameters())
    if p.device.type != "cpu":
        return False
    need = sum(getattr(o, a).weight.numel() * dtype.itemsize for o, a in model.decoder_linears())
    return need <= fraction * _available_memory_bytes()


def int4_dense_copies_fit(model: nn.Module) -> bool:
    """``dense_copy_fits`` for int4's dense copies, in the dtype they take here
    (``dense_copy_dtype``: float32 on AVX2-only CPUs, else bf16)."""
    return dense_copy_fits(model, dtype=dense_copy_dtype())


def _available_memory_bytes() -> int:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # unknown: keep no copy


def quantize_model(model: nn.Module, method: str, keep_dense: bool = False, int4_activations: str = "float") -> None:
    """Swap the model's linears for quantized ones (see the module docstring).
    keep_dense: int4 layers keep a dense copy for prefill (kernels/int4_linear.py);
    int4_activations: float | int8 (EngineConfig.int4_activations)."""
    if method not in METHODS:
        raise ValueError(f"quantization: must be one of {METHODS}, got {method!r}")
    compute = _compute_dtype(model)
    for owner, name in model.decoder_linears():  # the architecture names its own weights
        setattr(owner, name, _decoder_linear(getattr(owner, name), method, compute, keep_dense, int4_activations))
    model.lm_head = Int8Linear(model.lm_head, compute)
