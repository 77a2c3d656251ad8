"""Batch-invariant linear layers for ``--deterministic`` (CPU).

torch's matmul picks kernels and blockings by shape, so one row's result
changes in its last bits with the number of rows beside it; in bf16 that is
enough to flip greedy tokens (docs/PERFORMANCE.md, "Deterministic mode").
``InvariantLinear`` runs the C++ kernel of csrc/invariant_linear.cpp instead:
each output element is one float32 sum over k in order, whatever the batch.

The weight is packed once into the kernel's panel layout; the original is
kept only where something else reads it (the LM head: tied input embeddings
and ``exact_logits``), so the mode's extra memory is one copy of the LM head.
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
    for owner, name in model.decoder_linears():  # the architecture names its own weights
        setattr(owner, name, InvariantLinear(getattr(owner, name), kernels, keep_weight=False))
    model.lm_head = InvariantLinear(model.lm_head, kernels, keep_weight=True)
