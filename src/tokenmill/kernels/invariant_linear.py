"""Linear layers on tokenmill's panel kernel (CPU): ``--deterministic``'s
batch-invariant linears, and ``--linear-backend panels``.

torch's matmul picks kernels and blockings by shape, so one row's result
changes in its last bits with the number of rows beside it; in bf16 that is
enough to flip greedy tokens (docs/PERFORMANCE.md, "Deterministic mode").
``InvariantLinear`` runs the C++ kernel of csrc/invariant_linear.cpp instead:
each output element is one float32 sum over k in order, whatever the batch.

The weight is packed once into the kernel's panel layout; the original is
kept only where something else reads it (the LM head: tied input embeddings
and ``exact_logits``), so the mode's extra memory is one copy of the LM head.

The same kernel is the fastest linear for bfloat16 on AVX-512 CPUs without
AVX512-BF16 at every row count measured, 1 to 512: it widens the bf16
weights on the fly (two k per 32-bit lane: a shift and a mask), while
oneDNN's bf16 GEMM there is emulated. On an Intel Xeon with AVX-512 and no
BF16 (docs/PERFORMANCE.md, "bf16 on AVX-512 without BF16"), per call
2.6-4x faster than oneDNN's bf16 at 16-512 rows, and the bf16 decode step
on panels 1.5x faster than float32 at batch 1. ``panel_linears`` swaps them
in for that (``--linear-backend panels``, auto there): unlike
``make_batch_invariant`` it leaves other matmuls (experts, latent
projections) as they are, so it makes no batch-invariance promise.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn


class InvariantLinear(nn.Module):
    def __init__(self, linear: nn.Linear, kernels: ModuleType, keep_weight: bool):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed", kernels.pack_invariant_weight(linear.weight.detach()), persistent=False)
        self.bias = linear.bias
        self.weight = linear.weight if keep_weight else None
        self._kernel = kernels.invariant_linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., in_features] -> [..., out_features] in x's dtype."""
        rows = x.reshape(-1, self.in_features)
        out = self._kernel(rows, self.packed, self.out_features, self.bias)  # [M, out_features]
        return out.view(*x.shape[:-1], self.out_features)


def make_batch_invariant(model: nn.Module, kernels: ModuleType) -> None:
    """Swap every linear of the decoder and the LM head for an InvariantLinear, in
    place. ValueError first if the model multiplies by any other weight matrix
    (stacked experts, per-head latent projections): those would still depend on
    the batch."""
    covered = {id(getattr(owner, name).weight) for owner, name in model.decoder_linears()}
    covered.add(id(model.lm_head.weight))
    covered |= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    other = [n for n, p in model.named_parameters() if p.dim() >= 2 and id(p) not in covered]
    if other:
        raise ValueError(f"deterministic: {other[0]} (and {len(other) - 1} more) are not plain linear layers the "
                         f"batch-invariant kernel runs (Mixture-of-Experts or latent attention); --deterministic "
                         f"supports dense models")
    panel_linears(model, kernels)


def panel_linears(model: nn.Module, kernels: ModuleType) -> int:
    """Swap the decoder's plain ``nn.Linear`` layers and the LM head for
    InvariantLinear, in place (layers already replaced stay). Returns how many
    decoder layers were swapped."""
    swapped = 0
    for owner, name in model.decoder_linears():  # the architecture names its own weights
        layer = getattr(owner, name)
        if type(layer) is nn.Linear:
            setattr(owner, name, InvariantLinear(layer, kernels, keep_weight=False))
            swapped += 1
    if type(model.lm_head) is nn.Linear:
        model.lm_head = InvariantLinear(model.lm_head, kernels, keep_weight=True)
    return swapped
