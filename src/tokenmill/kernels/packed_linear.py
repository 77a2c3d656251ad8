"""Linear layers with weights prepacked once for oneDNN (CPU, bf16).

``F.linear`` hands oneDNN the plain [out, in] bf16 weight on every call;
oneDNN's fast kernels want their own blocked layout (presumably reordered on
each such call: the measured difference fits, not checked inside oneDNN).
``PackedLinear`` reorders once, at load, and calls oneDNN's linear on the
packed weight: measured 1.3-2x faster per matmul for bf16 and a 1.36x faster
batch-1 decode step on an AVX512-BF16/AMX Xeon; for float32 it measured no
faster, so ``--linear-backend auto`` packs bf16 only (docs/PERFORMANCE.md,
"Prepacked linears").

The packed tensor is opaque (oneDNN's layout, chosen for this CPU): nothing
reads it but ``forward``. The original weight is kept only where something
else reads it (the LM head: tied input embeddings and the sampler's exact
head), as in kernels/invariant_linear.py.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

_PACK_BATCH_HINT = 1
"""The batch size oneDNN tunes the layout for; the packed weight serves any
batch (packed with hint 1, it measured faster than ``F.linear`` at 1 to 256
rows and about equal at 1,000; other hints not compared)."""


@functools.cache
def onednn_available(dtype: torch.dtype = torch.bfloat16) -> bool:
    """torch was built with oneDNN (mkldnn), can run its packed linear, and this
    CPU can pack a ``dtype`` weight for it (bf16 packing needs AVX512-BW/VL/DQ or
    AVX-NE-CONVERT: oneDNN refuses it on AVX2-only CPUs)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=dtype), _PACK_BATCH_HINT)
    except RuntimeError:
        return False
    return True


class PackedLinear(nn.Module):
    def __init__(self, linear: nn.Linear, keep_weight: bool):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_BATCH_HINT)
        self.register_buffer("packed", packed, persistent=False)
        self.bias = linear.bias
        self.weight = linear.weight if keep_weight else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., in_features] (the weight's dtype) -> [..., out_features]."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def prepack_linears(model: nn.Module) -> int:
    """Swap the decoder's plain ``nn.Linear`` layers and the LM head for
    PackedLinear, in place; layers already replaced (quantized, batch-invariant)
    stay as they are. Returns how many were packed."""
    packed = 0
    for owner, name in model.decoder_linears():  # the architecture names its own weights
        layer = getattr(owner, name)
        if type(layer) is nn.Linear:
            setattr(owner, name, PackedLinear(layer, keep_weight=False))
            packed += 1
    if type(model.lm_head) is nn.Linear:
        model.lm_head = PackedLinear(model.lm_head, keep_weight=True)
        packed += 1
    return packed
