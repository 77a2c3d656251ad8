"""Putting the resolved linear backend in place: the model's ``nn.Linear``
layers replaced, once at load, by the kernels engine/resolve.py picked."""

from __future__ import annotations

import logging

from torch import nn

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.invariant_linear import make_batch_invariant, panel_linears
from tokenmill.kernels.mixed_linear import mix_linears
from tokenmill.kernels.packed_linear import prepack_linears
from tokenmill.kernels.quantize import dense_copy_fits, quantize_model

log = logging.getLogger(__name__)


def swap_linears(model: nn.Module, quantization: str | None, requested: str, backend: str, invariant_kernels,
                 keep_dense: bool, int4_activations: str = "float") -> str:
    """Replace ``model``'s linears: quantized, then batch-invariant or for
    ``backend`` (``requested``: the config's linear_backend); returns the
    backend in use (an automatic mixed becomes onednn when its second weight
    copy does not fit in memory)."""
    if quantization is not None:
        quantize_model(model, quantization, keep_dense=keep_dense, int4_activations=int4_activations)
    if invariant_kernels is not None:
        make_batch_invariant(model, invariant_kernels)
    if backend == "mixed" and requested == "auto" and not dense_copy_fits(model):
        log.info("linears: onednn (a second weight layout for mixed linears would not fit in memory)")
        backend = "onednn"
    if backend == "mixed":
        mix_linears(model, load_cpu_kernels())
    elif backend == "panels":
        panel_linears(model, load_cpu_kernels())
    elif backend == "onednn":
        prepack_linears(model)
    return backend
