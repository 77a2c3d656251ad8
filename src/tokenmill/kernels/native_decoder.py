"""A Llama-family model's decoder layers in one C++ call per step (CPU):
kernels/csrc/decoder_layers.cpp runs the same kernels as the Python layer loop
of model/llama.py, in the same order on the same tensors, so the outputs are
bitwise equal; the per-op Python (module calls, views, the KV write's
index_put_) goes. The engine sets it up on CPU unless ``enforce_eager``
(engine/core.py); a step it does not cover runs the Python loop.

Covered: dense Llama-family layers (no Mixture-of-Experts) whose linears are
any of the CPU linear modules: the panel kernel (InvariantLinear), oneDNN's
prepacked (PackedLinear), mixed (MixedLinear), plain ``nn.Linear``, int8
(Int8Linear) and the C++ int4 kernel (Int4Linear, with or without its dense
copy); steps on the C++ attention backend with the C++ fused ops.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from tokenmill.kernels.attention import CppAttentionMetadata
from tokenmill.kernels.int4_linear import DENSE_MIN_ROWS, Int4Linear
from tokenmill.kernels.int8_linear import Int8Linear
from tokenmill.kernels.invariant_linear import InvariantLinear
from tokenmill.kernels.mixed_linear import PANEL_MAX_ROWS, MixedLinear
from tokenmill.kernels.packed_linear import PackedLinear

PANELS, INT4, ONEDNN, MIXED, TORCH, INT8, INT8_ROWS = range(7)
"""Linear kinds, as decoder_layers.cpp numbers them."""
_NONE = torch.empty(0)
"""Stands for "no bias" and "no second tensor" (the C++ side reads numel 0 as absent)."""


class NativeDecoder:
    """Holds what decoder_layers.cpp reads of each layer (weights by reference,
    no copies) and calls it. Build with ``native_decoder``."""

    def __init__(self, model: nn.Module, kernels: ModuleType, linears: list[tuple]):
        arch = model.arch
        self._kernel = kernels.decoder_layers
        self.input_norms = [layer.input_layernorm.weight for layer in model.layers]
        self.post_norms = [layer.post_attention_layernorm.weight for layer in model.layers]
        self.eps = model.layers[0].input_layernorm.eps
        (self.kinds, self.a, self.b, self.biases, self.out_features, self.dense_kinds,
         self.int8) = (list(c) for c in zip(*linears))
        self.heads = (arch.num_heads, arch.num_kv_heads, arch.head_dim)
        self.scale = model.layers[0].self_attn.scale

    def covers(self, meta) -> bool:
        return isinstance(meta, CppAttentionMetadata)

    def __call__(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: CppAttentionMetadata,
                 kv_caches: list[torch.Tensor]) -> torch.Tensor:
        """x: the float32 residual stream [T, hidden], updated in place; rope:
        the C++ ops' (cos, sin) [T, D]. Returns the last layer's MLP output
        (model dtype), for the final norm to add."""
        return self._kernel(x, rope[0], rope[1], kv_caches, meta.slot_mapping, meta.block_tables, meta.context_lens,
                            meta.block_size, self.scale, self.input_norms, self.post_norms, self.eps, self.kinds,
                            self.a, self.b, self.biases, self.out_features, self.dense_kinds, self.int8, *self.heads,
                            DENSE_MIN_ROWS, PANEL_MAX_ROWS)


def native_decoder(model: nn.Module, kernels: ModuleType | None) -> NativeDecoder | None:
    """The NativeDecoder of ``model``, or None where it does not apply: not a
    Llama-family model of dense layers, a linear module it does not know, no
    C++ kernels (or an older build without decoder_layers)."""
    from tokenmill.model.llama import LlamaForCausalLM
    from tokenmill.model.moe import DenseMLP

    if kernels is None or not hasattr(kernels, "decoder_layers") or type(model) is not LlamaForCausalLM:
        return None
    if any(not isinstance(layer.mlp, DenseMLP) for layer in model.layers):
        return None
    linears = [_describe(getattr(owner, name)) for owner, name in model.decoder_linears()]
    return None if any(entry is None for entry in linears) else NativeDecoder(model, kernels, linears)


def _plain(layer: nn.Module) -> tuple[int, torch.Tensor] | None:
    """(kind, weight tensor) of a linear with one weight tensor and no rule of its own."""
    if type(layer) is InvariantLinear:
        return PANELS, layer.packed
    if type(layer) is PackedLinear:
        return ONEDNN, layer.packed
    if type(layer) is nn.Linear:
        return TORCH, layer.weight.detach()
    return None


def _describe(layer: nn.Module) -> tuple | None:
    """(kind, a, b, bias, out_features, dense kind, int8 activations) as
    decoder_layers.cpp reads a linear, or None if it cannot run this module."""
    bias = layer.bias.detach() if getattr(layer, "bias", None) is not None else _NONE
    n = getattr(layer, "out_features", 0)
    if (plain := _plain(layer)) is not None:
        return plain[0], plain[1], _NONE, bias, n, -1, False
    if type(layer) is MixedLinear:
        return MIXED, layer.panels, layer.dense.packed, bias, n, -1, False
    if type(layer) is Int8Linear and layer.qweight.device.type == "cpu":
        return INT8_ROWS if layer.uses_cpp_kernel else INT8, layer.qweight, layer.scales, bias, n, -1, False
    if type(layer) is Int4Linear and layer._int4_linear is not None:
        if layer.dense is None:
            return INT4, layer.packed, _NONE, bias, n, -1, layer.int8_activations
        dense = _plain(layer.dense)
        if dense is None or dense[1].dtype != layer.dense_dtype:
            return None
        return INT4, layer.packed, dense[1], bias, n, dense[0], layer.int8_activations
    return None
