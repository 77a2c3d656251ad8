"""DeepSeek-V3/R1's weight map, and its entry in the model registry.

Loaders hand over HF-named tensors. This module maps them onto model/deepseek.py:
- ``q_a_proj`` (or ``q_proj``) and ``kv_a_proj_with_mqa`` fill the two row
  ranges of the fused ``qkv_a_proj``;
- query rows are reordered per head into [rope parts of all heads | nope
  parts of all heads], and every rotary block's interleaved pairs (DeepSeek's
  checkpoint layout, ``rope_interleave``) into two halves, which is what the
  rope op and model/mla.py expect; scores are dot products, so reordering q
  and k the same way changes nothing else;
- ``kv_b_proj`` [H * (nope + v), kv_lora_rank] splits into ``w_uk`` and ``w_uv``;
- routed experts come per expert (``experts.{e}.gate_proj`` ..., DeepSeek's
  checkpoints) or stacked (``experts.gate_up_proj``, HF's newer layout; GGUF's
  per projection) and land in each expert's ``w13`` (gate | up) and ``w2``;
- FP8 checkpoints: an ``float8_e4m3fn`` weight and its ``weight_scale_inv``
  [ceil(out / 128), ceil(in / 128)] become ``weight * scale`` per block, in
  float32, whichever of the pair arrives first;
- MTP layers (``model.layers.{num_layers + k}``) go to the model's MTP modules
  (model/deepseek_mtp.py);
- GGUF (``deepseek2``): names and metadata in model/deepseek_gguf.py; its split
  ``k_b``/``v_b`` and per-projection stacked experts are placed here.
Completeness: every parameter must be written in full (counted in elements),
else ValueError names what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from tokenmill.model.deepseek import DeepseekV3ForCausalLM
from tokenmill.model.deepseek_arch import (
    DEEPSEEK_HF_ARCHITECTURES,
    DEEPSEEK_MODEL_TYPES,
    DeepseekArch,
    arch_from_hf_config,
)
from tokenmill.model.deepseek_gguf import GGUF_ARCHITECTURES, arch_from_gguf_fields, gguf_to_hf_name
from tokenmill.model.deepseek_presets import DEEPSEEK_PRESETS
from tokenmill.model.moe import Router
from tokenmill.model.registry import ModelEntry, register

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_TOP = {"model.embed_tokens.weight": "embed_tokens.weight", "model.norm.weight": "norm.weight",
        "lm_head.weight": "lm_head.weight"}
_SAME = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_layernorm.weight",
         "self_attn.kv_a_layernorm.weight", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
         "mlp.down_proj.weight", "mlp.gate.weight", "mlp.shared_experts.down_proj.weight")
_GATE_UP = {"mlp.gate_proj.weight": ("mlp.gate_up_proj.weight", 0),
            "mlp.up_proj.weight": ("mlp.gate_up_proj.weight", 1),
            "mlp.shared_experts.gate_proj.weight": ("mlp.shared_experts.gate_up_proj.weight", 0),
            "mlp.shared_experts.up_proj.weight": ("mlp.shared_experts.gate_up_proj.weight", 1)}


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """weight [out, in] float8 with scale_inv [ceil(out / b0), ceil(in / b1)] -> float32."""
    out, inp = weight.shape
    scale = scale_inv.float().repeat_interleave(block[0], 0)[:out].repeat_interleave(block[1], 1)[:, :inp]
    return weight.float() * scale


class DeepseekWeightMap:
    """WeightMap (model/registry.py) of DeepseekV3ForCausalLM."""

    def finish_empty(self, model: DeepseekV3ForCausalLM) -> None:
        if model.arch.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        model.set_rope()
        for gate in model.modules():
            if isinstance(gate, Router):  # DeepSeek routes in float32, whatever the model dtype
                gate.weight.data = gate.weight.data.float()
                gate.e_score_correction_bias = torch.zeros_like(gate.e_score_correction_bias, dtype=torch.float32)

    def load(self, model: DeepseekV3ForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        arch = model.arch
        targets = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
        written: dict[str, int] = {}
        pending_fp8: dict[str, torch.Tensor] = {}
        pending_scale: dict[str, torch.Tensor] = {}
        for name, tensor in tensors:
            if name.endswith("weight_scale_inv") or tensor.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                key = name.removesuffix("_scale_inv")
                mine, other = (pending_scale, pending_fp8) if key != name else (pending_fp8, pending_scale)
                if key not in other:
                    mine[key] = tensor
                    continue
                weight, scale = (other.pop(key), tensor) if key != name else (tensor, other.pop(key))
                name, tensor = key, dequantize_fp8(weight, scale, arch.weight_block_size or (128, 128))
            for target, rows, value in self._place(arch, name, tensor):
                if target not in targets:  # e.g. q_b_proj in a checkpoint whose config has no q_lora_rank
                    raise ValueError(f"unexpected weight {name!r} for this DeepSeek-V3 configuration")
                dest = targets[target] if rows is None else targets[target][rows]
                if dest.shape != value.shape:
                    raise ValueError(f"weight {name!r}: shape {tuple(value.shape)}, expected {tuple(dest.shape)}")
                with torch.no_grad():
                    dest.copy_(value)
                written[target] = written.get(target, 0) + value.numel()
        if model.mtp is not None and not any(t.startswith("mtp.") for t in written):
            model.mtp = None  # the checkpoint has no MTP layers: drafting with them is unavailable
            targets = {n: t for n, t in targets.items() if not n.startswith("mtp.")}
        if pending_fp8 or pending_scale:
            unpaired = sorted(pending_fp8 | pending_scale)[:5]
            raise ValueError(f"FP8 weights without their weight_scale_inv, or the reverse: {unpaired}")
        missing = [n for n, t in targets.items() if written.get(n, 0) < t.numel() and not n.startswith("rope_")
                   and not (n == "lm_head.weight" and arch.tie_word_embeddings)]
        if missing:
            raise ValueError(f"weights missing from the checkpoint: {missing[:5]}{' ...' if len(missing) > 5 else ''}")

    def _place(self, arch: DeepseekArch, name: str, tensor: torch.Tensor):
        """One HF tensor -> [(our target name, row slice or None, value in our layout)]."""
        if name in _TOP:
            if name == "lm_head.weight" and arch.tie_word_embeddings:
                return []
            return [(_TOP[name], None, tensor)]
        m = _LAYER.match(name)
        if not m:
            if name.endswith("rotary_emb.inv_freq"):
                return []
            raise ValueError(f"unexpected weight {name!r} for a DeepSeek-V3 model")
        index, rest = int(m.group(1)), m.group(2)
        if index < arch.num_layers:
            return self._place_in_layer(arch, name, f"layers.{index}.", rest, tensor)
        depth = index - arch.num_layers
        if depth >= arch.num_mtp_layers:
            raise ValueError(f"unexpected weight {name!r}: the model has {arch.num_layers} layers "
                             f"and {arch.num_mtp_layers} MTP layers")
        mtp = f"mtp.layers.{depth}."
        if rest in ("enorm.weight", "hnorm.weight", "eh_proj.weight"):
            return [(mtp + rest, None, tensor)]
        if rest == "shared_head.norm.weight":
            return [(mtp + "shared_head_norm.weight", None, tensor)]
        if rest in ("shared_head.head.weight", "embed_tokens.weight"):
            return []  # copies of the main model's head and embedding, which MTP shares
        return self._place_in_layer(arch, name, mtp + "block.", rest, tensor)

    def _place_in_layer(self, arch: DeepseekArch, name: str, p: str, rest: str, tensor: torch.Tensor):
        """A decoder layer's tensor (``rest``: its name inside the layer) -> targets under prefix ``p``."""
        attn = p + "self_attn."
        q_width = arch.q_lora_rank or arch.num_heads * arch.qk_head_dim
        if rest in _SAME:
            return [(p + rest, None, tensor)]
        if rest == "mlp.gate.e_score_correction_bias":
            return [(p + rest, None, tensor)]
        if rest in _GATE_UP:
            target, part = _GATE_UP[rest]
            n = tensor.shape[0]
            return [(p + target, slice(part * n, (part + 1) * n), tensor)]
        kind = rest.rpartition(".")[2]  # weight | bias
        if rest.startswith("self_attn.q_a_proj."):
            return [(attn + f"qkv_a_proj.{kind}", slice(0, q_width), tensor)]
        if rest.startswith("self_attn.q_proj."):
            return [(attn + f"qkv_a_proj.{kind}", slice(0, q_width), _query_rows(arch, tensor))]
        if rest == "self_attn.q_b_proj.weight":
            return [(attn + "q_b_proj.weight", None, _query_rows(arch, tensor))]
        if rest.startswith("self_attn.kv_a_proj_with_mqa."):
            rows = slice(q_width, q_width + arch.latent_dim)
            return [(attn + f"qkv_a_proj.{kind}", rows, _halves(arch, tensor, arch.kv_lora_rank))]
        if rest == "self_attn.kv_b_proj.weight":
            w = tensor.view(arch.num_heads, arch.qk_nope_head_dim + arch.v_head_dim, arch.kv_lora_rank)
            return [(attn + "w_uk", None, w[:, :arch.qk_nope_head_dim]),
                    (attn + "w_uv", None, w[:, arch.qk_nope_head_dim:])]
        if rest == "self_attn.k_b_proj.weight":  # GGUF's split kv_b: [H, kv_lora_rank, nope]
            return [(attn + "w_uk", None, tensor.transpose(1, 2))]
        if rest == "self_attn.v_b_proj.weight":
            return [(attn + "w_uv", None, tensor)]
        i = arch.moe.intermediate_size
        w13, w2 = p + "mlp.experts.w13.{}.weight", p + "mlp.experts.w2.{}.weight"
        if rest in ("mlp.experts.gate_proj", "mlp.experts.up_proj"):  # GGUF: stacked [E, I, hidden] each
            rows = slice(0, i) if rest.endswith("gate_proj") else slice(i, 2 * i)
            return [(w13.format(e), rows, t) for e, t in enumerate(tensor)]
        if rest == "mlp.experts.gate_up_proj":  # HF's stacked layout: [E, 2I, hidden]
            return [(w13.format(e), None, t) for e, t in enumerate(tensor)]
        if rest == "mlp.experts.down_proj":  # stacked [E, hidden, I]
            return [(w2.format(e), None, t) for e, t in enumerate(tensor)]
        expert = _EXPERT.match(rest)
        if expert:
            e, which = int(expert.group(1)), expert.group(2)
            if which == "down_proj":
                return [(w2.format(e), None, tensor)]
            return [(w13.format(e), slice(0, i) if which == "gate_proj" else slice(i, 2 * i), tensor)]
        raise ValueError(f"unexpected weight {name!r} for a DeepSeek-V3 model")

    def from_gguf(self, arch: DeepseekArch, name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
        return gguf_to_hf_name(name), tensor  # llama.cpp keeps HF's layouts (model/deepseek_gguf.py)


def _halves(arch: DeepseekArch, t: torch.Tensor, start: int) -> torch.Tensor:
    """t's rows [start, start + rope_dim) reordered from interleaved pairs
    (x0, x1), (x2, x3), ... to halves [x0, x2, ... | x1, x3, ...] when the
    checkpoint interleaves; the other rows as they are."""
    if not arch.rope_interleave:
        return t
    r = arch.qk_rope_head_dim
    rope = t[start:start + r]
    return torch.cat([t[:start], rope[0::2], rope[1::2], t[start + r:]])


def _query_rows(arch: DeepseekArch, t: torch.Tensor) -> torch.Tensor:
    """Query projection rows, per head [nope | rope] in the checkpoint ->
    [rope of all heads (halves layout) | nope of all heads]."""
    H, n, r = arch.num_heads, arch.qk_nope_head_dim, arch.qk_rope_head_dim
    per_head = t.reshape(H, n + r, *t.shape[1:])
    rope = per_head[:, n:]
    if arch.rope_interleave:
        rope = torch.cat([rope[:, 0::2], rope[:, 1::2]], dim=1)
    return torch.cat([rope.reshape(H * r, *t.shape[1:]), per_head[:, :n].reshape(H * n, *t.shape[1:])])


DEEPSEEK_ENTRY = register(ModelEntry(
    name="deepseek_v3",
    model_class=DeepseekV3ForCausalLM,
    arch_type=DeepseekArch,
    parse_hf_config=arch_from_hf_config,
    weights=DeepseekWeightMap(),
    hf_architectures=DEEPSEEK_HF_ARCHITECTURES,
    hf_model_types=DEEPSEEK_MODEL_TYPES,
    gguf_architectures=GGUF_ARCHITECTURES,
    parse_gguf=arch_from_gguf_fields,
    presets=DEEPSEEK_PRESETS,
))
