"""Weight-only int8 linear layers (symmetric, one scale per output channel).

For batch-1 decode on CPU the step is bound by weight bytes: int8 moves a
quarter of fp32's. Inputs are cast to the compute dtype (bf16 on CPU) for the
matmul and the result back to the model dtype; this loses a little precision
(quality is checked against the fp32 reference in tests/test_quantization.py
and docs/PERFORMANCE.md). The matmul: on builds of the C++ kernels with
AVX-512 or AVX2, their ``int8_linear`` (kernels/csrc/int8_linear.cpp: the int8 rows
widened in registers, read in place, batch-invariant); elsewhere torch's
``_weight_int8pack_mm`` (fast on CPU only with bf16 activations, hence the
cast).
Applied by kernels/quantize.py (``--quantization int8``, and the LM head of
``int4``).
"""

from __future__ import annotations

import torch
from torch import nn


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [out, in] -> (int8 [out, in], scales [out] float32)."""
    w = weight.float()
    scales = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scales


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype):
        super().__init__()
        q, scales = quantize_per_channel(linear.weight.data)
        self.register_buffer("qweight", q)                               # [out, in] int8
        self.register_buffer("scales", scales.to(compute_dtype))         # [out]
        self.bias = linear.bias
        self.compute_dtype = compute_dtype
        self.in_features, self.out_features = linear.in_features, linear.out_features
        kernels = _vector_int8_kernels() if q.device.type == "cpu" and self.in_features % 16 == 0 else None
        # The kernel function, not the module: copy.deepcopy shares a builtin function, a module it cannot copy.
        self._int8_linear = kernels.int8_linear if kernels is not None else None

    @property
    def uses_cpp_kernel(self) -> bool:
        """Whether forward runs the C++ int8_linear (else torch's kernel or, off CPU, a dequantized matmul)."""
        return self._int8_linear is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(self.compute_dtype)
        if self._int8_linear is not None:
            y = self._int8_linear(x2.contiguous(), self.qweight, self.scales, None)
        elif x.device.type == "cpu":
            y = torch._weight_int8pack_mm(x2, self.qweight, self.scales)
        else:  # CUDA: dequantize on the fly (memory saving, not a speed path)
            y = x2 @ (self.qweight.to(self.compute_dtype) * self.scales[:, None]).t()
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*shape[:-1], self.out_features)

    def exact_columns(self, x: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """x: [in] one input row; columns: [k] -> float32 [k]: forward's outputs for
        those columns without the rounding to the compute dtype (same inputs: x in
        the compute dtype, int8 weights times their scales)."""
        w = self.qweight[columns].float() * self.scales[columns].float()[:, None]  # [k, in]
        out = w @ x.to(self.compute_dtype).float()
        return out if self.bias is None else out + self.bias[columns].float()


def _vector_int8_kernels():
    """The C++ kernels module when its int8_linear has vector code (AVX-512 or AVX2) on this build, else None."""
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    kernels = load_cpu_kernels()
    if kernels is None or not hasattr(kernels, "int8_linear_isa"):
        return None
    return kernels if kernels.int8_linear_isa() != "portable" else None
