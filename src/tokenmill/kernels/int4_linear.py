"""Weight-only int4 linear layers: groups of 32 input channels, asymmetric
(a scale and a zero per group and output channel), the layout of GGUF's Q4_1.

Why: a batch-1 decode step on CPU reads every weight once, so its time is
weight bytes over memory bandwidth; int4 reads an eighth of fp32's bytes. For a
model shipped as Q4_1 (the embedded SmolLM2) re-quantizing the dequantized
weights recovers the shipped 4-bit grid: each group's min and max land on
codes 0 and 15, so the codes come back unchanged and only the scale and zero are
rounded, to the compute dtype (bf16 on CPU).

CPU: on AVX-512 and AVX2 builds of the C++ kernels, their ``int4_linear``
(kernels/csrc/int4_linear.cpp): the codes widened in registers, scale and offset
applied once per group. With ``activations="int8"`` (EngineConfig.int4_activations;
AVX512-VNNI or AVX2) the activations are also quantized to int8 per group of 32, as
llama.cpp does for its Q4 formats on CPU, and the products are summed as integers
(four into one instruction with VNNI): faster, less exact (docs/PERFORMANCE.md,
"int4 kernel"). Other CPUs use torch's packed kernel ``_weight_int4pack_mm_for_cpu``
with bf16 activations. Elsewhere the weight is dequantized per call (memory saving only).

torch's kernel's time grows with every input row (a matrix-vector kernel run
per row): at 64-512 rows it measured 35-50x slower than the bf16 GEMM on the
same shape, so an int4 prefill chunk would take many times a bf16 one
(tokenmill's: 1.4x slower than the bf16 panels at 158 rows with float
activations, as fast with int8 ones). Where memory
allows (kernels/quantize.py decides), the layer also keeps a bf16 copy of its
weight, prepacked for oneDNN (kernels/packed_linear.py) or, on AVX-512 CPUs
without native bf16, packed for the panel kernel (a float32 copy on the panels on
AVX2-only CPUs, which have no fast bf16 GEMM: ``dense_copy_dtype``), and runs every call
of ``DENSE_MIN_ROWS`` rows or more on it: prefill and large decode batches at
GEMM speed, small decode batches reading the int4 bytes.
"""

from __future__ import annotations

import torch
from torch import nn

GROUP_SIZE = 32
INT8_ACTIVATION_ISAS = ("avx512-vnni", "avx2")
"""int4_linear_isa() values whose builds have the int8-activations path."""
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


def int4_pack(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
              panels_per_block: int | None = None) -> torch.Tensor:
    """quantize_groupwise_int4's (codes [N, K], scales, zeros [N, K/32]) -> the
    layout of the C++ int4_linear (kernels/csrc/int4_linear.cpp): int32
    [B, K/32, NP * 80], B blocks of NP panels of 16 output columns; per (block,
    group) the codes [4][NP][16] (word jj, lane l of panel p holds column
    16 (NP b + p) + l's codes for k = 32 g + 8 jj + t in bits 4t..4t+3), then
    the scales [NP][16] and zeros [NP][16] as bf16, two to a word; the kernel
    computes w = code * scale + (zero - 8 * scale). Scales and zeros are rounded
    to bf16, the grid torch's packed kernel computes with on CPU too, so both
    kernels compute with one grid. Padding columns: zero codes, scales and
    zeros. NP: ``panels_per_block``, or ``panels_per_block_for(N)``."""
    n, k = codes.shape
    p = -(-n // 16)
    npb = panels_per_block or panels_per_block_for(n)
    blocks = -(-p // npb)
    g = k // GROUP_SIZE
    pad = blocks * npb * 16 - n
    c = torch.nn.functional.pad(codes.to(torch.int64), (0, 0, 0, pad))  # [B*NP*16, K]
    c = c.view(blocks, npb, 16, g, 4, 8).permute(0, 3, 4, 1, 2, 5)  # [B, G, 4, NP, 16, 8]
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)  # nibble t at bits 4t
    words = (c << shifts).sum(-1)  # [B, G, 4, NP, 16], < 2**32
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).reshape(blocks, g, -1)

    def per_group(t: torch.Tensor) -> torch.Tensor:  # [N, G] float32 -> [B, G, NP * 16] bf16
        t = torch.nn.functional.pad(t, (0, 0, 0, pad)).view(blocks, npb * 16, g).transpose(1, 2)
        return t.to(torch.bfloat16).contiguous()

    # [B, G, NP * 32] bf16 (scales, then zeros) viewed as [B, G, NP * 16] int32.
    scales_zeros = torch.cat([per_group(scales), per_group(zeros)], dim=2).contiguous().view(torch.int32)
    return torch.cat([words, scales_zeros], dim=2).contiguous()


def panels_per_block_for(n: int, threads: int | None = None) -> int:
    """Panels of 16 columns per block for an N-column layer: the most (up to 4:
    more independent vector chains at batch 1) that leave no padding and a block
    count that ``threads`` threads (default: torch's count now) split evenly,
    each thread streaming whole blocks; 4 when none does."""
    threads = threads or torch.get_num_threads()
    p = -(-n // 16)
    for npb in (4, 3, 2):
        if p % npb == 0 and (p // npb) % threads == 0:
            return npb
    return 4 if p >= 4 else p


def supports_int4(linear: nn.Linear) -> bool:
    """The packed CPU kernel needs whole groups along the input and output
    channels in multiples of 16."""
    return linear.in_features % GROUP_SIZE == 0 and linear.out_features % 16 == 0


class Int4Linear(nn.Module):
    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype, keep_dense: bool = False,
                 activations: str = "float"):
        """keep_dense: also keep a dense copy of the weight (``dense_copy_dtype``)
        for calls of ``DENSE_MIN_ROWS`` rows or more (CPU only). activations:
        float | int8, what the codes multiply on CPU (int8 needs the C++ kernels
        with AVX512-VNNI or AVX2)."""
        super().__init__()
        if not supports_int4(linear):
            raise ValueError(f"int4: needs in_features % {GROUP_SIZE} == 0 and out_features % 16 == 0, "
                             f"got {linear.in_features} -> {linear.out_features}")
        codes, scales, zeros = quantize_groupwise_int4(linear.weight.data)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.compute_dtype = compute_dtype
        self.bias = linear.bias
        self.on_cpu = linear.weight.device.type == "cpu"
        # The C++ int4_linear where it has vector code here, else torch's kernel (CPU) or a
        # dequantized matmul per call (elsewhere).
        kernels = _vector_int4_kernels() if self.on_cpu else None
        # The kernel function, not the module: copy.deepcopy shares a builtin function, a module it cannot copy.
        self._int4_linear = kernels.int4_linear if kernels is not None else None
        if activations == "int8" and not has_int8_activations(kernels):
            raise ValueError("int4_activations: int8 needs the C++ kernels built with AVX512-VNNI or AVX2 on a CPU "
                             "(here: " + ("not on CPU" if not self.on_cpu else "neither, or no kernels") + "); "
                             "use float")
        self.int8_activations = activations == "int8"
        if kernels is not None:
            self.register_buffer("packed", int4_pack(codes, scales, zeros))
        elif self.on_cpu:
            # Packed two codes per byte in torch's tiled layout: [out, in / 2] uint8.
            self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(codes, 1))
            # The kernel's scale/zero layout: [in / g, out, 2].
            sz = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
            self.register_buffer("scales_zeros", sz.to(compute_dtype))
        else:
            self.register_buffer("codes", codes.to(torch.uint8))
            self.register_buffer("scales", scales.to(compute_dtype))
            self.register_buffer("zeros", zeros.to(compute_dtype))
        keep = keep_dense and self.on_cpu
        self.dense_dtype = dense_copy_dtype(compute_dtype) if keep else compute_dtype
        """What the dense copy computes in (its input is cast to it)."""
        self.dense = dense_copy(linear, self.dense_dtype) if keep else None

    @property
    def on_cpp_kernel(self) -> bool:
        """Whether calls run the C++ int4_linear (else torch's kernel or a dequantized matmul)."""
        return self._int4_linear is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.dense is not None and x2.shape[0] >= DENSE_MIN_ROWS:
            y = self.dense(x2.to(self.dense_dtype)).to(x.dtype)
            y = y if self.bias is None else y + self.bias
        else:
            y = self.int4_matmul(x2)
        return y.view(*shape[:-1], self.out_features)

    def int4_matmul(self, x2: torch.Tensor) -> torch.Tensor:
        """x2 [M, in] @ the int4 weight^T + bias -> [M, out] in x2's dtype. The
        C++ kernel reads float32 or bf16 rows and writes their dtype (no casts
        around it: at batch 1 each cast costs about what a small layer's
        product does); the other paths compute in the compute dtype."""
        if self._int4_linear is not None:
            return self._int4_linear(x2.contiguous(), self.packed, self.out_features, self.bias,
                                     self.int8_activations)
        xc = x2.to(self.compute_dtype)
        if self.on_cpu:
            y = torch._weight_int4pack_mm_for_cpu(xc, self.packed, GROUP_SIZE, self.scales_zeros)
        else:
            y = xc @ dequantize_groupwise_int4(self.codes, self.scales, self.zeros).to(self.compute_dtype).t()
        y = y.to(x2.dtype)
        return y if self.bias is None else y + self.bias


def resolve_int4_activations(setting: str, device: torch.device, self_int4_draft: bool) -> str:
    """EngineConfig.int4_activations for one model's int4 layers: ``auto`` is
    int8 for self-int4's twin on a CPU whose C++ int4 kernel has the int8 path
    (AVX512-VNNI or AVX2; its drafts are verified at full precision, so the
    activations' rounding can only cost acceptance: on a Xeon with AMX it made the
    embedded model's draft pass ~1.2x faster, and on an AVX2 EPYC self-int4
    1.77-2.03x plain against 1.68-1.94x with float drafts, docs/PERFORMANCE.md),
    float otherwise (the served model; an int4 draft_model, not measured with int8
    ones); float and int8 stand as given."""
    if setting != "auto":
        return setting
    if not self_int4_draft or device.type != "cpu":
        return "float"
    return "int8" if has_int8_activations(_vector_int4_kernels()) else "float"


def has_int8_activations(kernels) -> bool:
    """Whether these C++ kernels (or None) have int4_linear's int8-activations path."""
    return kernels is not None and kernels.int4_linear_isa() in INT8_ACTIVATION_ISAS


def _vector_int4_kernels():
    """The C++ kernels when their int4_linear has vector code here (AVX-512 or
    AVX2), else None (torch's int4 kernel is faster than the portable loops)."""
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    kernels = load_cpu_kernels()
    return kernels if kernels is not None and kernels.int4_linear_isa() != "portable" else None


def dense_copy_dtype(compute_dtype: torch.dtype = torch.bfloat16) -> torch.dtype:
    """What a CPU int4 layer's dense copy computes in: the compute dtype, but
    float32 for bf16 where this CPU has no fast bf16 GEMM (no native bf16, no
    oneDNN bf16 packing, no AVX-512 for the panel kernel to widen bf16: AVX2-only
    CPUs) and the C++ kernels build: there a plain bf16 nn.Linear ran the
    embedded model's batch-32 decode step 3x slower than the float32 panels
    (docs/PERFORMANCE.md, "int4 on AVX2")."""
    from tokenmill.engine.resolve import cpu_has_bf16_panels, cpu_has_fast_bf16
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.packed_linear import onednn_available

    if compute_dtype != torch.bfloat16 or cpu_has_fast_bf16() or cpu_has_bf16_panels():
        return compute_dtype
    return compute_dtype if onednn_available(torch.bfloat16) or load_cpu_kernels() is None else torch.float32


def dense_copy(linear: nn.Linear, dtype: torch.dtype) -> nn.Module:
    """A bias-free copy of ``linear`` in ``dtype``: on the panel kernel for
    bf16 on AVX-512 CPUs without native bf16 (where oneDNN's bf16 is emulated,
    2.5-4x slower per call: kernels/invariant_linear.py) and for float32 (the
    float32 copy of ``dense_copy_dtype``: AVX2-only CPUs, where the panels
    measured faster than oneDNN at every row count, docs/PERFORMANCE.md), else
    prepacked for oneDNN where torch has it, else a plain nn.Linear."""
    from tokenmill.engine.resolve import cpu_has_bf16_panels
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.invariant_linear import InvariantLinear
    from tokenmill.kernels.packed_linear import PackedLinear, onednn_available

    copy = nn.Linear(linear.in_features, linear.out_features, bias=False, device=linear.weight.device, dtype=dtype)
    with torch.no_grad():
        copy.weight.copy_(linear.weight)
    panels = dtype == torch.float32 or (dtype == torch.bfloat16 and cpu_has_bf16_panels())
    if panels and (kernels := load_cpu_kernels()) is not None:
        return InvariantLinear(copy, kernels, keep_weight=False)
    return PackedLinear(copy, keep_weight=False) if onednn_available(dtype) else copy
