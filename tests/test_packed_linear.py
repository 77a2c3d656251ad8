"""Prepacked oneDNN linears (kernels/packed_linear.py, --linear-backend)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.resolve import resolve_linear_backend
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available, prepack_linears
from tokenmill.model.loaders import load_model
from tokenmill.sampling_params import SamplingParams

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(not onednn_available(torch.float32), reason="torch built without oneDNN")
needs_bf16 = pytest.mark.skipif(not onednn_available(torch.bfloat16),
                                reason="oneDNN packs bf16 weights only on CPUs with AVX-512 or AVX-NE-CONVERT")


@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, marks=needs_bf16), torch.float32])
@pytest.mark.parametrize("rows", [1, 7, 64, 300])
def test_packed_linear_matches_f_linear(dtype, rows):
    torch.manual_seed(rows)
    linear = nn.Linear(96, 80, bias=True).to(dtype)
    x = torch.randn(rows, 96, dtype=dtype)
    expected = nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
    got = PackedLinear(linear, keep_weight=False)(x)
    assert got.dtype == dtype and got.shape == (rows, 80)
    # Both accumulate in float32; only the output rounding (bf16) or summation order differs.
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(got, linear(x), rtol=tol, atol=tol)


@needs_bf16
def test_prepack_swaps_plain_linears_and_keeps_the_tied_head_weight():
    model = load_model("dummy:tiny", "dummy", CPU, torch.bfloat16).model
    ids = torch.arange(5)
    before = model.compute_logits(model.embed_tokens(ids))
    n = prepack_linears(model)
    assert n == 4 * len(model.layers) + 1
    assert all(isinstance(getattr(o, a), PackedLinear) and getattr(o, a).weight is None
               for o, a in model.decoder_linears())
    head = model.lm_head
    assert isinstance(head, PackedLinear)
    if model.arch.tie_word_embeddings:
        assert head.weight is model.embed_tokens.weight
    torch.testing.assert_close(model.compute_logits(model.embed_tokens(ids)), before, rtol=2e-2, atol=2e-2)
    assert model.exact_head().weight is head.weight  # the sampler's tie rule reads the original
    assert prepack_linears(model) == 0  # nothing plain is left


@needs_bf16
def test_auto_packs_bf16_on_cpu_only_and_onednn_refuses_what_it_cannot_pack():
    # mixed: AMX or AVX512-BF16; panels: other AVX-512 CPUs (tests/test_panel_linears.py has the rule per CPU)
    assert resolve_linear_backend(EngineConfig(), CPU, torch.bfloat16) in ("onednn", "mixed", "panels")
    assert resolve_linear_backend(EngineConfig(), CPU, torch.float32) in ("torch", "mixed", "panels")  # AVX2 + FMA
    assert resolve_linear_backend(EngineConfig(linear_backend="onednn"), CPU, torch.float32) == "onednn"
    assert resolve_linear_backend(EngineConfig(quantization="int4"), CPU, torch.bfloat16) == "int4"
    assert resolve_linear_backend(EngineConfig(deterministic=True), CPU, torch.bfloat16) == "invariant"
    with pytest.raises(ValueError, match="linear_backend: onednn runs on CPU"):
        resolve_linear_backend(EngineConfig(linear_backend="onednn"), CPU, torch.float16)
    with pytest.raises(ValueError, match="linear_backend: .*quantization 'int8'"):
        resolve_linear_backend(EngineConfig(linear_backend="onednn", quantization="int8"), CPU, torch.bfloat16)
    with pytest.raises(ValueError, match="linear_backend: must be one of"):
        EngineConfig(linear_backend="mkl")


@needs_bf16
def test_bf16_engine_answers_the_same_with_packed_and_plain_linears():
    """Greedy bf16 on the embedded model: oneDNN's packed and plain paths
    compute the same float32 sums at these sizes, so the text is the same."""
    params = SamplingParams(max_tokens=24, temperature=0.0)
    prompts = ["The capital of France is", "List three primary colors:", "def fibonacci(n):"]
    answers = {}
    for backend in ("onednn", "torch"):
        engine = LLMEngine(EngineConfig(dtype="bfloat16", linear_backend=backend, num_kv_blocks=64,
                                        max_model_len=256, num_threads=1))
        assert engine.core.linear_backend == backend
        answers[backend] = [r.text for r in engine.generate(prompts, params)]
    assert answers["onednn"] == answers["torch"]
