"""The decoder layers in one C++ call (kernels/native_decoder.py,
csrc/decoder_layers.cpp): bitwise the Python layer loop's results (the same
kernels in the same order) for every linear module it takes; the engines and
models it covers; a clear error for a bad KV slot."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int4_linear import has_int8_activations
from tokenmill.kernels.native_decoder import native_decoder
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available
from tokenmill.model.llama import LlamaForCausalLM
from tokenmill.model.llama_presets import LLAMA_PRESETS
from tokenmill.model.moe import MoEConfig
from tokenmill.sampling_params import SamplingParams

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="C++ kernels unavailable (no compiler)")
INT8_ACTIVATIONS = has_int8_activations(kernels)
INT4 = kernels is not None and kernels.int4_linear_isa() != "portable"

# 4 to 40 tokens, two sharing a prefix; chunked at 16 tokens per step, so steps mix
# prompt chunks with decodes and run 1 to 16 rows.
PROMPTS = [[3 + i, 17, 29, 41 + i] * (1 + 3 * i) for i in range(4)] + [[5, 6, 7, 8] * 6 + [9, 10]]


def _engine(enforce_eager: bool, **overrides) -> LLMEngine:
    config = dict(model="dummy:tiny", load_format="dummy", num_kv_blocks=48, max_model_len=128,
                  max_num_batched_tokens=16, seed=3, enforce_eager=enforce_eager)
    return LLMEngine(EngineConfig(**(config | overrides)))


def _run(engine: LLMEngine) -> list:
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=3)
    seeded = SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=11, ignore_eos=True, logprobs=3)
    results = engine.generate(PROMPTS, [greedy, seeded] * 2 + [greedy])
    return [(r.token_ids, r.logprobs) for r in results]


# (dtype, linear backend, quantization, int4 activations); mixed and onednn where oneDNN packs the dtype here.
CASES = [("bfloat16", "panels", None, "float"), ("float32", "panels", None, "float"),
         ("float32", "torch", None, "float"), ("bfloat16", "auto", "int8", "float")]
CASES += [(d, b, None, "float") for d in ("float32", "bfloat16") for b in ("mixed", "onednn") if onednn_available(
    getattr(torch, d))]
if INT4:
    CASES.append(("bfloat16", "auto", "int4", "float"))
if INT8_ACTIVATIONS:
    CASES.append(("bfloat16", "auto", "int4", "int8"))


@pytest.mark.parametrize("dtype,backend,quantization,activations", CASES)
def test_native_layers_give_the_python_loops_bits(dtype, backend, quantization, activations):
    kw = dict(dtype=dtype, linear_backend=backend, quantization=quantization, int4_activations=activations)
    native, eager = _engine(False, **kw), _engine(True, **kw)
    assert native.core.decoder_loop == "native" and eager.core.decoder_loop == "python"
    calls = 0
    inner = native.core.model.native_decoder

    class Counting:
        def covers(self, meta):
            return inner.covers(meta)

        def __call__(self, *args):
            nonlocal calls
            calls += 1
            return inner(*args)

    native.core.model.native_decoder = Counting()
    assert _run(native) == _run(eager)
    assert calls > 0


def test_qkv_bias_is_added_as_the_python_loop_adds_it():
    """Qwen2-style attention bias, on the panel kernel."""
    engines = [_engine(eager, dtype="float32", linear_backend="panels") for eager in (False, True)]
    for engine in engines:
        gen = torch.Generator().manual_seed(0)
        for layer in engine.core.model.layers:
            qkv = layer.self_attn.qkv_proj
            qkv.bias = nn.Parameter(torch.randn(qkv.out_features, generator=gen) * 0.5)
    model = engines[0].core.model
    model.native_decoder = native_decoder(model, kernels)  # it holds the linears' biases: rebuild after the change
    with_bias, python = (_run(e) for e in engines)
    assert with_bias == python
    engines[0].core.model.native_decoder = None
    assert _run(engines[0]) == python


def test_what_the_native_loop_covers():
    assert _engine(False, dtype="float32", linear_backend="torch").core.decoder_loop == "native"
    assert _engine(False, dtype="float32", linear_backend="panels", attention_backend="torch"
                   ).core.decoder_loop == "python"
    assert _engine(False, dtype="float32", linear_backend="panels", fused_ops="torch").core.decoder_loop == "python"
    moe = dataclasses.replace(LLAMA_PRESETS["tiny"], moe=MoEConfig(num_experts=4, top_k=2, intermediate_size=64))
    assert native_decoder(LlamaForCausalLM(moe, 64), kernels) is None
    model = _engine(False, dtype="float32", linear_backend="panels").core.model
    model.layers[1].self_attn.o_proj = nn.Identity()  # a module it does not know: the Python loop
    assert native_decoder(model, kernels) is None
    if INT4 and onednn_available(torch.bfloat16):
        # int4 whose dense copy (prefill rows) is oneDNN's packed bf16 weight, as on CPUs with native bf16.
        kw = dict(dtype="bfloat16", quantization="int4")
        native, eager = _engine(False, **kw), _engine(True, **kw)
        for engine in (native, eager):
            gen = torch.Generator().manual_seed(1)
            for layer in engine.core.model.layers:
                proj = layer.mlp.gate_up_proj
                copy = nn.Linear(proj.in_features, proj.out_features, bias=False).bfloat16()
                copy.weight.data.copy_(torch.randn(copy.weight.shape, generator=gen) * 0.05)
                proj.dense = PackedLinear(copy, keep_weight=False)
        native.core.model.native_decoder = native_decoder(native.core.model, kernels)
        assert _run(native) == _run(eager)


def test_a_slot_outside_the_cache_is_refused():
    engine = _engine(False, dtype="float32", linear_backend="panels")
    runner = engine.core.runner
    seen = {}
    inner = engine.core.model.native_decoder

    class Spy:
        def covers(self, meta):
            return inner.covers(meta)

        def __call__(self, x, rope, meta, caches):
            seen["args"] = (x.clone(), rope, dataclasses.replace(meta), caches)
            return inner(x, rope, meta, caches)

    engine.core.model.native_decoder = Spy()
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=1, ignore_eos=True))
    x, rope, meta, caches = seen["args"]
    num_slots = runner.kv_caches[0].shape[0] * runner.kv_caches[0].shape[3]
    meta.slot_mapping = torch.full_like(meta.slot_mapping, num_slots)
    with pytest.raises(RuntimeError, match="out of the cache"):
        inner(x, rope, meta, caches)
