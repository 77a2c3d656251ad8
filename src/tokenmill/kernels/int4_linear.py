"""Weight-only int4 linear layers: groups of 32 input channels, asymmetric
(a scale and a zero per group and output channel), the layout of GGUF's Q4_1.

Why: a batch-1 decode step on CPU reads every weight once, so its time is
weight bytes over memory bandwidth; int4 reads an eighth of fp32's bytes. For a
model shipped as Q4_1 (the embedded SmolLM2) re-quantizing the dequantized
weights recovers the shipped 4-bit grid: each group's min and max land on
codes 0 and 15, so the codes come back unchanged and only the scale and zero are
rounded, to the compute dtype (bf16 on CPU).

CPU uses torch's packed kernel ``_weight_int4pack_mm_for_cpu`` with bf16
activations. Elsewhere the weight is dequantized per call (memory saving only).

That kernel's time grows with every input row (a matrix-vector kernel run per
row): at 64-512 rows it measured 35-50x slower than the bf16 GEMM on the same
shape, so an int4 prefill chunk would take many times a bf16 one. Where memory
allows (kernels/quantize.py decides), the layer also keeps a bf16 copy of its
weight, prepacked for oneDNN (kernels/packed_linear.py) or, on AVX-512 CPUs
without native bf16, packed for the panel kernel, and runs every call
of ``DENSE_MIN_ROWS`` rows or more on it: prefill and large decode batches at
bf16 GEMM speed, small decode batches reading the int4 bytes.
"""

from __future__ import annotations

import torch
from torch import nn

GROUP_SIZE = 32
DENSE_MIN_ROWS = 5
"""Calls with this many rows or more use the dense copy, when kept: the int4
kernel measured as fast as bf16 at 4 rows and 2x slower at 8 (2 cores, Xeon
with AMX; docs/PERFORMANCE.md, "int4 prefill")."""


def quantize_groupwise_int4(weight: torch.Tensor, group_size: int = GROUP_SIZE
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight [out, in] -> (codes int32 [out, in] in 0..15, scales [out, in/g],
    zeros [out, in/g]), float32, with w ~= (code - 8) * scale + zero."""
    out_f, in_f = weight.shape
    w = weight.float().view(out_f, in_f // group_size, group_size)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    scales = ((hi - lo) / 15.0).clamp_min(1e-10)
    codes = torch.round((w - lo[..., None]) / scales[..., None]).clamp_(0, 15).to(torch.int32)
    zeros = lo + 8.0 * scales
    return codes.view(out_f, in_f), scales, zeros


def dequantize_groupwise_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                              group_size: int = GROUP_SIZE) -> torch.Tensor:
    """Inverse of quantize_groupwise_int4: [out, in] float32."""
    out_f, in_f = codes.shape
    c = codes.view(out_f, in_f // group_size, group_size).float()
    return ((c - 8.0) * scales[..., None].float() + zeros[..., None].float()).view(out_f, in_f)


def supports_int4(linear: nn.Linear) -> bool:
    """The packed CPU kernel needs whole groups along the input and output
    channels in multiples of 16."""
    return linear.in_features % GROUP_SIZE == 0 and linear.out_features % 16 == 0


class Int4Linear(nn.Module):
    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype, keep_dense: bool = False):
        """keep_dense: also keep a bf16 copy of the weight for calls of
        ``DENSE_MIN_ROWS`` rows or more (CPU only)."""
        super().__init__()
        if not supports_int4(linear):
            raise ValueError(f"int4: needs in_features % {GROUP_SIZE} == 0 and out_features % 16 == 0, "
                             f"got {linear.in_features} -> {linear.out_features}")
        codes, scales, zeros = quantize_groupwise_int4(linear.weight.data)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.compute_dtype = compute_dtype
        self.bias = linear.bias
        self.on_cpu = linear.weight.device.type == "cpu"
        if self.on_cpu:
            # Packed two codes per byte in the kernel's tiled layout: [out, in / 2] uint8.
            self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(codes, 1))
            # The kernel's scale/zero layout: [in / g, out, 2].
            sz = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
            self.register_buffer("scales_zeros", sz.to(compute_dtype))
            self.dense = dense_copy(linear, compute_dtype) if keep_dense else None
        else:
            self.register_buffer("codes", codes.to(torch.uint8))
            self.register_buffer("scales", scales.to(compute_dtype))
            self.register_buffer("zeros", zeros.to(compute_dtype))
            self.dense = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(self.compute_dtype)
        if self.dense is not None and x2.shape[0] >= DENSE_MIN_ROWS:
            y = self.dense(x2)
        elif self.on_cpu:
            y = torch._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP_SIZE, self.scales_zeros)
        else:
            w = dequantize_groupwise_int4(self.codes, self.scales, self.zeros).to(self.compute_dtype)
            y = x2 @ w.t()
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*shape[:-1], self.out_features)


def dense_copy(linear: nn.Linear, dtype: torch.dtype) -> nn.Module:
    """A bias-free copy of ``linear`` in ``dtype``: on the panel kernel for
    bf16 on AVX-512 CPUs without native bf16 (where oneDNN's bf16 is emulated,
    2.5-4x slower per call: kernels/invariant_linear.py), else prepacked for oneDNN where
    torch has it, else a plain nn.Linear."""
    from tokenmill.engine.resolve import cpu_has_bf16_panels
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.invariant_linear import InvariantLinear
    from tokenmill.kernels.packed_linear import PackedLinear, onednn_available

    copy = nn.Linear(linear.in_features, linear.out_features, bias=False, device=linear.weight.device, dtype=dtype)
    with torch.no_grad():
        copy.weight.copy_(linear.weight)
    if dtype == torch.bfloat16 and cpu_has_bf16_panels() and (kernels := load_cpu_kernels()) is not None:
        return InvariantLinear(copy, kernels, keep_weight=False)
    return PackedLinear(copy, keep_weight=False) if onednn_available(dtype) else copy
