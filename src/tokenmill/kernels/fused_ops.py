"""The forward pass's elementwise ops (and greedy sampling's row argmax)
behind one interface, in two implementations with the same signatures:

- ``TORCH_FUSED_OPS``: plain torch, any device (CUDA's path, and CPU's when the
  C++ kernels cannot be built);
- ``cpp_fused_ops(module)``: fused C++ kernels for CPU (kernels/csrc/fused_ops.cpp),
  one pass over the data per op, float32 math rounded once to the model dtype;
- ``compiled_fused_ops`` (kernels/compiled_ops.py): the torch ops compiled by
  TorchInductor, each op's torch ops fused into generated kernels (Triton on
  CUDA, under CUDA graphs).

Each fused op replaces 3-6 torch ops and their temporaries (about 20 fewer
dispatches per layer per step); the argmax reads bf16 logits as they are, where
torch's bf16 argmax is scalar on CPU. Measured against the torch ops in
docs/PERFORMANCE.md ("Fused CPU kernels").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch.nn.functional as F

from tokenmill.model.rope import apply_rope


@dataclass(frozen=True)
class FusedOps:
    name: str
    """"torch", "cpp" or "compiled"."""
    add_rms_norm: Callable
    """(residual [T, H] float32, delta [T, H] or None, weight [H], eps) -> [T, H] in
    the weight's dtype. Adds delta into residual in place, then RMSNorm."""
    silu_and_mul: Callable
    """(gate_up [T, 2I]) -> [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]."""
    rope_inputs: Callable
    """(cos_table, sin_table [max_positions, D] float32, positions [T], dtype) ->
    (cos, sin) in the form ``rope`` takes; computed once per forward pass."""
    rope: Callable
    """(x [T, heads, D], cos, sin) -> x rotated (HF layout). May rotate x in place
    and return it; callers use the returned tensor."""
    argmax: Callable
    """(logits [R, V]) -> (index [R] long: each row's first maximal column, ties [R]
    long: how many columns hold that maximum). Greedy sampling; ties > 1 in a
    bf16 row are usually rounding, which the sampler resolves (sampler.py)."""


def _torch_add_rms_norm(residual, delta, weight, eps):
    if delta is not None:
        residual.add_(delta)
    return F.rms_norm(residual, weight.shape, weight.float(), eps).to(weight.dtype)


def _torch_silu_and_mul(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def _torch_rope_inputs(cos_table, sin_table, positions, dtype):
    return cos_table[positions].to(dtype).unsqueeze(1), sin_table[positions].to(dtype).unsqueeze(1)  # [T, 1, D]


def _torch_argmax(logits):
    index = logits.argmax(dim=-1)
    return index, (logits == logits.gather(1, index[:, None])).sum(dim=-1)


TORCH_FUSED_OPS = FusedOps("torch", _torch_add_rms_norm, _torch_silu_and_mul, _torch_rope_inputs, apply_rope,
                           _torch_argmax)


def _cpp_rope_inputs(cos_table, sin_table, positions, dtype):
    return cos_table[positions], sin_table[positions]  # [T, D] float32: the kernel rotates in float32


def cpp_fused_ops(module: ModuleType) -> FusedOps:
    """The fused ops of the compiled CPU module (kernels/cpu_kernels.py)."""
    return FusedOps("cpp", module.add_rms_norm, module.silu_and_mul, _cpp_rope_inputs, module.rotary_embedding,
                    module.argmax_rows)

