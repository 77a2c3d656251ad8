"""A Llama-family model's decoder layers in one C++ call per step (CPU):
kernels/csrc/decoder_layers.cpp runs the same C++ kernels as the Python layer
loop of model/llama.py, in the same order, so the outputs are bitwise equal;
the per-op Python (module calls, views, the KV write's index_put_) goes. The
engine sets it up on CPU unless ``enforce_eager`` (engine/core.py); a step it
does not cover runs the Python loop.

Covered: dense Llama-family layers (no Mixture-of-Experts) whose four linears
each run on the panel kernel (kernels/invariant_linear.py: bf16 on AVX-512
CPUs without native bf16, ``--linear-backend panels``, ``--deterministic``) or
the C++ int4 kernel (kernels/int4_linear.py); steps on the C++ attention
backend with the C++ fused ops. int4 layers whose dense copy is not on the
panel kernel (oneDNN) are covered only in steps of fewer than
``DENSE_MIN_ROWS`` rows, the calls that never reach that copy.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from tokenmill.kernels.attention import CppAttentionMetadata
from tokenmill.kernels.int4_linear import DENSE_MIN_ROWS, Int4Linear
from tokenmill.kernels.invariant_linear import InvariantLinear

PANELS, INT4 = 0, 1
"""Linear kinds, as decoder_layers.cpp numbers them."""
_NONE = torch.empty(0)
"""Stands for "no bias" and "no dense copy" (the C++ side reads numel 0 as absent)."""
_UNLIMITED = 1 << 62


class NativeDecoder:
    """Holds what decoder_layers.cpp reads of each layer (weights by reference,
    no copies) and calls it. Build with ``native_decoder``."""

    def __init__(self, model: nn.Module, kernels: ModuleType, linears: list[tuple], max_rows: int):
        arch = model.arch
        self._kernel = kernels.decoder_layers
        self.max_rows = max_rows
        """Steps of more rows than this run the Python loop."""
        self.input_norms = [layer.input_layernorm.weight for layer in model.layers]
        self.post_norms = [layer.post_attention_layernorm.weight for layer in model.layers]
        self.eps = model.layers[0].input_layernorm.eps
        self.kinds, self.packed, self.dense, self.biases, self.out_features, self.int8 = (list(c) for c in
                                                                                         zip(*linears))
        self.heads = (arch.num_heads, arch.num_kv_heads, arch.head_dim)
        self.scale = model.layers[0].self_attn.scale

    def covers(self, meta, num_tokens: int) -> bool:
        return isinstance(meta, CppAttentionMetadata) and num_tokens <= self.max_rows

    def __call__(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: CppAttentionMetadata,
                 kv_caches: list[torch.Tensor]) -> torch.Tensor:
        """x: the float32 residual stream [T, hidden], updated in place; rope:
        the C++ ops' (cos, sin) [T, D]. Returns the last layer's MLP output
        (model dtype), for the final norm to add."""
        return self._kernel(x, rope[0], rope[1], kv_caches, meta.slot_mapping, meta.block_tables, meta.context_lens,
                            meta.block_size, self.scale, self.input_norms, self.post_norms, self.eps, self.kinds,
                            self.packed, self.dense, self.biases, self.out_features, self.int8, *self.heads,
                            DENSE_MIN_ROWS)


def native_decoder(model: nn.Module, kernels: ModuleType | None) -> NativeDecoder | None:
    """The NativeDecoder of ``model``, or None where it does not apply: not a
    Llama-family model of dense layers, another linear kind, no C++ kernels
    (or an older build without decoder_layers)."""
    from tokenmill.model.llama import LlamaForCausalLM
    from tokenmill.model.moe import DenseMLP

    if kernels is None or not hasattr(kernels, "decoder_layers") or type(model) is not LlamaForCausalLM:
        return None
    if any(not isinstance(layer.mlp, DenseMLP) for layer in model.layers):
        return None
    linears, max_rows = [], _UNLIMITED
    for owner, name in model.decoder_linears():
        layer = getattr(owner, name)
        described = _describe(layer)
        if described is None:
            return None
        entry, rows = described
        linears.append(entry)
        max_rows = min(max_rows, rows)
    return NativeDecoder(model, kernels, linears, max_rows)


def _describe(layer: nn.Module) -> tuple[tuple, int] | None:
    """(kind, packed, dense, bias, out_features, int8 activations) and the most
    rows it covers, or None if the C++ loop cannot run this linear."""
    bias = layer.bias.detach() if getattr(layer, "bias", None) is not None else _NONE
    if type(layer) is InvariantLinear:
        return (PANELS, layer.packed, _NONE, bias, layer.out_features, False), _UNLIMITED
    if type(layer) is Int4Linear and layer._int4_linear is not None:
        dense = layer.dense
        if dense is None:
            return (INT4, layer.packed, _NONE, bias, layer.out_features, layer.int8_activations), _UNLIMITED
        if type(dense) is InvariantLinear and layer.compute_dtype == torch.bfloat16:
            return (INT4, layer.packed, dense.packed, bias, layer.out_features, layer.int8_activations), _UNLIMITED
        return (INT4, layer.packed, _NONE, bias, layer.out_features, layer.int8_activations), DENSE_MIN_ROWS - 1
    return None
