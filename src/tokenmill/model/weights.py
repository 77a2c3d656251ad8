"""Copy Hugging Face-named tensors into our fused module layout.

Every loader yields (hf_name, tensor) pairs in HF naming
(``model.layers.3.self_attn.q_proj.weight``); this module owns the single
mapping onto fused q/k/v and gate/up parameters, and checks nothing is missing.
"""

from __future__ import annotations

import re
from typing import Iterable

import torch

from tokenmill.model.llama import LlamaForCausalLM

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
# HF sub-name -> (our sub-name, which slice of a fused parameter or None)
_FUSED = {
    "self_attn.q_proj": ("self_attn.qkv_proj", 0),
    "self_attn.k_proj": ("self_attn.qkv_proj", 1),
    "self_attn.v_proj": ("self_attn.qkv_proj", 2),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0),
    "mlp.up_proj": ("mlp.gate_up_proj", 1),
}
_TOP = {
    "model.embed_tokens.weight": "embed_tokens.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def load_hf_weights(model: LlamaForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Assign every tensor; ValueError names unknown, missing or misshaped ones."""
    params = dict(model.named_parameters(remove_duplicate=False))
    filled: set[str] = set()
    arch = model.arch
    for name, tensor in tensors:
        target, part = _target(name)
        if target is None:
            if name.endswith("rotary_emb.inv_freq"):
                continue
            raise ValueError(f"unexpected weight {name!r} for a {arch.family} model")
        if target == "lm_head.weight" and arch.tie_word_embeddings:
            continue  # tied: the embedding is the head
        param = params[target]
        dest = _slice(param, target, part, arch)
        if dest.shape != tensor.shape:
            raise ValueError(f"weight {name!r}: shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
        with torch.no_grad():
            dest.copy_(tensor)
        filled.add(name)
    missing = [n for n in expected_hf_names(model) if n not in filled]
    if missing:
        raise ValueError(f"weights missing from the checkpoint: {missing[:5]}{' ...' if len(missing) > 5 else ''}")


def expected_hf_names(model: LlamaForCausalLM) -> list[str]:
    arch = model.arch
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not arch.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight",
                  p + "self_attn.o_proj.weight", p + "mlp.down_proj.weight"]
        names += [p + f"{hf}.weight" for hf in _FUSED]
        if arch.attention_bias:
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
    return names


def _target(name: str) -> tuple[str | None, int | None]:
    if name in _TOP:
        return _TOP[name], None
    m = _LAYER.match(name)
    if not m:
        return None, None
    idx, rest = m.groups()
    module, _, kind = rest.rpartition(".")
    if module in _FUSED:
        ours, part = _FUSED[module]
        return f"layers.{idx}.{ours}.{kind}", part
    known = ("input_layernorm", "post_attention_layernorm", "self_attn.o_proj", "mlp.down_proj")
    if module in known:
        return f"layers.{idx}.{rest}", None
    return None, None


def _slice(param: torch.Tensor, target: str, part: int | None, arch) -> torch.Tensor:
    if part is None:
        return param
    if "qkv_proj" in target:
        bounds = [0, arch.q_size, arch.q_size + arch.kv_size, arch.q_size + 2 * arch.kv_size]
    else:
        bounds = [0, arch.intermediate_size, 2 * arch.intermediate_size]
    return param[bounds[part]:bounds[part + 1]]
