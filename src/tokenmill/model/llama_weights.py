"""The Llama family's weight map, and its entry in the model registry.

Every loader hands over (name, tensor) pairs in HF naming
(``model.layers.3.self_attn.q_proj.weight``); this module owns the mapping
onto the fused q/k/v and gate/up parameters of model/llama.py (and Mixtral's
``block_sparse_moe`` experts onto the stacked ``w13``/``w2`` of model/moe.py)
and checks that nothing is missing. GGUF files name tensors llama.cpp's way
(``blk.3.attn_q.weight``) and store q/k rows permuted for its rope: ``from_gguf``
renames them and undoes the permutation. Importing this module registers the
family (Llama, Mistral, Qwen2, Mixtral) in model/registry.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from tokenmill.model.arch import (
    LLAMA_FAMILIES,
    LLAMA_GGUF_ARCHITECTURES,
    LLAMA_HF_FAMILIES,
    ModelArch,
    arch_from_gguf_fields,
    arch_from_hf_config,
)
from tokenmill.model.llama import LlamaForCausalLM
from tokenmill.model.llama_presets import LLAMA_PRESETS
from tokenmill.model.registry import ModelEntry, register
from tokenmill.model.rope import inverse_frequencies

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
# HF sub-name -> (our sub-name, which slice of a fused parameter or None)
_FUSED = {
    "self_attn.q_proj": ("self_attn.qkv_proj", 0),
    "self_attn.k_proj": ("self_attn.qkv_proj", 1),
    "self_attn.v_proj": ("self_attn.qkv_proj", 2),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0),
    "mlp.up_proj": ("mlp.gate_up_proj", 1),
}
_MIXTRAL_EXPERT = re.compile(r"^block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)$")
_UNFUSED = ("input_layernorm", "post_attention_layernorm", "self_attn.o_proj", "mlp.down_proj")
_TOP = {
    "model.embed_tokens.weight": "embed_tokens.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}
_GGUF_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_BLOCK = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
ROPE_FREQS = "rope_freqs.weight"
"""GGUF's Llama-3 rope frequency factors: not a parameter, they build the rope tables."""


class LlamaWeightMap:
    """WeightMap (model/registry.py) of LlamaForCausalLM."""

    def finish_empty(self, model: LlamaForCausalLM) -> None:
        arch = model.arch
        # to_empty() converts the two ends of a tied pair separately: re-tie them.
        if arch.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        # Rope tables are computed, not loaded (float32 on the device); GGUF
        # frequency factors arrive with the weights (see ``load``).
        if not _uses_gguf_freq_factors(arch):
            model.set_rope(inverse_frequencies(arch))

    def load(self, model: LlamaForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(model.named_parameters(remove_duplicate=False))
        filled: set[str] = set()
        arch = model.arch
        for name, tensor in tensors:
            if name == ROPE_FREQS:
                model.set_rope(inverse_frequencies(arch, tensor))
                filled.add(name)
                continue
            target, part = _target(name)
            if target is None:
                if name.endswith("rotary_emb.inv_freq"):
                    continue
                raise ValueError(f"unexpected weight {name!r} for a {arch.family} model")
            if target == "lm_head.weight" and arch.tie_word_embeddings:
                continue  # tied: the embedding is the head
            if target not in params:  # e.g. a dense MLP weight in a Mixtral checkpoint
                raise ValueError(f"unexpected weight {name!r} for a {arch.family} model")
            dest = _slice(params[target], target, part, arch)
            if dest.shape != tensor.shape:
                raise ValueError(f"weight {name!r}: shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
            with torch.no_grad():
                dest.copy_(tensor)
            filled.add(name)
        if _uses_gguf_freq_factors(arch) and ROPE_FREQS not in filled:
            raise ValueError(f"{ROPE_FREQS}: GGUF declares frequency factors but the tensor is missing")
        missing = [n for n in expected_hf_names(arch) if n not in filled]
        if missing:
            raise ValueError(f"weights missing from the checkpoint: {missing[:5]}{' ...' if len(missing) > 5 else ''}")

    def from_gguf(self, arch: ModelArch, name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
        if name == ROPE_FREQS:
            return name, tensor
        target = _gguf_hf_name(name)
        if target is None:
            raise ValueError(f"unexpected GGUF tensor {name!r}")
        # llama.cpp permutes q/k only for the llama family (which includes Mistral).
        if arch.family in ("llama", "mistral"):
            if target.endswith(("q_proj.weight", "q_proj.bias")):
                tensor = unpermute_rope(tensor, arch.num_heads)
            elif target.endswith(("k_proj.weight", "k_proj.bias")):
                tensor = unpermute_rope(tensor, arch.num_kv_heads)
        return target, tensor


def expected_hf_names(arch: ModelArch) -> list[str]:
    """Every HF tensor name a checkpoint of ``arch`` must provide."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not arch.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        names += [p + f"{module}.weight" for module in _UNFUSED if not (arch.moe and module.startswith("mlp."))]
        names += [p + f"{hf}.weight" for hf in _FUSED if not (arch.moe and hf.startswith("mlp."))]
        if arch.moe:
            names.append(p + "block_sparse_moe.gate.weight")
            names += [p + f"block_sparse_moe.experts.{e}.{w}.weight"
                      for e in range(arch.moe.num_experts) for w in ("w1", "w2", "w3")]
        if arch.attention_bias:
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
    return names


def unpermute_rope(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (interleaved rope pairs -> two halves)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _uses_gguf_freq_factors(arch: ModelArch) -> bool:
    return (arch.rope_scaling or {}).get("rope_type") == "gguf_freq_factors"


def _gguf_hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GGUF_TOP:
        return _GGUF_TOP[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _GGUF_BLOCK:
        return f"model.layers.{parts[1]}.{_GGUF_BLOCK[parts[2]]}.{parts[3]}"
    return None


def _target(name: str) -> tuple[str | None, int | None]:
    """HF name -> (our parameter name, slice of a fused parameter or None)."""
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
    if module in _UNFUSED:
        return f"layers.{idx}.{rest}", None
    if module == "block_sparse_moe.gate":
        return f"layers.{idx}.mlp.gate.{kind}", None
    expert = _MIXTRAL_EXPERT.match(module)
    if expert:  # w1: gate, w3: up (rows of w13), w2: down
        e, w = int(expert.group(1)), expert.group(2)
        return (f"layers.{idx}.mlp.experts.w2.{e}.weight", None) if w == "w2" else \
            (f"layers.{idx}.mlp.experts.w13.{e}.weight", 0 if w == "w1" else 1)
    return None, None


def _slice(param: torch.Tensor, target: str, part: int | None, arch: ModelArch) -> torch.Tensor:
    """The rows of a fused parameter that one HF tensor fills (q | k | v, gate | up;
    a Mixtral expert's w13 is gate | up too, ``intermediate_size`` rows each)."""
    if part is None:
        return param
    if "qkv_proj" in target:
        bounds = [0, arch.q_size, arch.q_size + arch.kv_size, arch.q_size + 2 * arch.kv_size]
    else:
        bounds = [0, arch.intermediate_size, 2 * arch.intermediate_size]
    return param[bounds[part]:bounds[part + 1]]


LLAMA_ENTRY = register(ModelEntry(
    name="llama",
    model_class=LlamaForCausalLM,
    arch_type=ModelArch,
    parse_hf_config=arch_from_hf_config,
    weights=LlamaWeightMap(),
    hf_architectures=tuple(LLAMA_HF_FAMILIES),
    hf_model_types=LLAMA_FAMILIES,
    gguf_architectures=LLAMA_GGUF_ARCHITECTURES,
    parse_gguf=arch_from_gguf_fields,
    presets=LLAMA_PRESETS,
))
