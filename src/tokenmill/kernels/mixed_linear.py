"""Linear layers that pick their kernel by the number of rows (CPU, bf16 or fp32).

Measured on an AMX Xeon (docs/PERFORMANCE.md, "Mixed linears"): for a few
rows (decode steps of small batches) tokenmill's own panel kernel
(csrc/invariant_linear.cpp, the one ``--deterministic`` runs on) is 1.3-2.4x
faster per call than oneDNN's on its prepacked weight, and the whole batch-1
decode step 1.2x faster (1.25x on a Xeon with AVX512-BF16 and no AMX, where
the kernel runs on vectors); from a few dozen rows on (prefill chunks, large
batches) oneDNN is faster, up to 1.9x on the LM head at 256 rows. In float32
on an AVX2 CPU without AVX-512 (the kernel's 8-lane path) the panels beat
oneDNN at every row count measured, 1 to 256: 1.2-1.5x at one row, 1.7-3x at
2-8 rows (a speculative verification step), and torch's F.linear by 2-5x
(docs/PERFORMANCE.md, "Speculative decoding: draft_model, and float32 panels on
AVX2"); and at 128 to 1024 rows on the AVX2 EPYC in a later session, where
whole steps of a prefill chunk beside decodes ran 1.2x faster on panels alone
("Float32 linears on panels past 128 rows"), so ``auto`` takes ``panels``
there (every call on the kernel, one weight layout), not this class; on an AVX-512
Xeon without BF16, float32 decode steps on mixed linears measured faster than
on F.linear at 1-64 rows and equal at 256 ("bf16 on AVX-512 without BF16"). A
``MixedLinear`` keeps the weight in both layouts and sends calls of at most
``PANEL_MAX_ROWS`` rows to the panel kernel, larger ones to oneDNN.

Cost: a second copy of every decoder weight (kept only when it fits:
kernels/quantize.py ``dense_copy_fits``). The LM head is mixed too in float32: on
the AVX2 EPYC (Zen 3) SmolLM2-135M's head (49,152 x 576) ran 1.2x faster per call on
panels at one row, 1.4-2.3x at 2-32 rows and equal at 128, and decode steps 1.09-1.18x
faster at batch 1-32 (docs/PERFORMANCE.md, "The float32 LM head on panels"). In bfloat16
it stays oneDNN-only: it is a fifth of this model's weights and measured no faster on
panels at one row on the AMX Xeon.

A request's tokens may therefore come from either kernel depending on the
batch it shares: both accumulate in float32 and round once, so they differ
only in summation order (as torch's own shape-dependent kernels do);
``--deterministic`` is the mode for answers that must not depend on the batch.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from tokenmill.kernels.packed_linear import PackedLinear

PANEL_MAX_ROWS = 128
"""Calls with at most this many rows run on the panel kernel. Per call the
crossover with oneDNN lies between 16 and 64 rows depending on the layer's
shape, but whole decode steps measured faster with panels up to 128 rows and
slower at 256 (bf16 on the AMX Xeon: docs/PERFORMANCE.md, "Mixed linears")."""


class MixedLinear(nn.Module):
    def __init__(self, linear: nn.Linear, kernels: ModuleType, keep_weight: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.dense = PackedLinear(linear, keep_weight=False)
        self.register_buffer("panels", kernels.pack_invariant_weight(linear.weight.detach()), persistent=False)
        self.bias = linear.bias
        # The original weight only where something else reads it (the LM head: tied
        # input embeddings and the sampler's exact head), as PackedLinear keeps it.
        self.weight = linear.weight if keep_weight else None
        self._panel_kernel = kernels.invariant_linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., in_features] (the weight's dtype) -> [..., out_features]."""
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] > PANEL_MAX_ROWS:
            return self.dense(x)
        out = self._panel_kernel(rows, self.panels, self.out_features, self.bias)  # [M, out_features]
        return out.view(*x.shape[:-1], self.out_features)


def mix_linears(model: nn.Module, kernels: ModuleType) -> int:
    """Swap the decoder's plain ``nn.Linear`` layers for MixedLinear and the LM
    head for a MixedLinear in float32, a PackedLinear otherwise, in place
    (layers already replaced stay). Returns how many decoder layers were mixed."""
    mixed = 0
    for owner, name in model.decoder_linears():  # the architecture names its own weights
        layer = getattr(owner, name)
        if type(layer) is nn.Linear:
            setattr(owner, name, MixedLinear(layer, kernels))
            mixed += 1
    head = model.lm_head
    if type(head) is nn.Linear:
        on_panels = head.weight.dtype == torch.float32
        model.lm_head = MixedLinear(head, kernels, keep_weight=True) if on_panels else \
            PackedLinear(head, keep_weight=True)
    return mixed
